"""The contract as operators write it: Kueue's own YAML in, gangway's canonical Contract out.

Rule of this package: parsing and validation only. It reads text (and, in ``validate_file``,
``read_contract_file`` and ``load_contract_file``, one local file) and returns
``gangway.events.contract`` types or a ``ConfigError`` listing every problem. It imports the
standard library, pyyaml, msgspec and ``gangway.events`` — never Kafka, SQL or Kubernetes clients.
"""

from gangway.contract.kueue import (
    ConfigError,
    Problem,
    check_file,
    contract_digest,
    digest_matches,
    load_contract,
    load_contract_file,
    read_contract,
    read_contract_file,
    validate_file,
)

__all__ = [
    "ConfigError",
    "Problem",
    "check_file",
    "contract_digest",
    "digest_matches",
    "load_contract",
    "load_contract_file",
    "read_contract",
    "read_contract_file",
    "validate_file",
]
