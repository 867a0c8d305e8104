"""Contracts in: a ConfigApplied on ``gangway.config`` becomes a ConfigApplied on the log.

Only the admin principal may write ``gangway.config`` (a Kafka ACL, README "Who may write what"),
and it may not write the log: the submission service, the log's gate for outside input, copies
each valid contract onto it. A record that is not a ConfigApplied CloudEvent, or whose digest is
not its contract's, is rejected to ``gangway.rejections`` with its bytes; a contract already in
force is a re-delivery and gives nothing.
"""

from __future__ import annotations

from gangway.contract.kueue import digest_matches
from gangway.events import codec
from gangway.events.catalogue import ConfigApplied, JobRejected
from gangway.events.state import State
from gangway.services.submission.policy import Headers, Invalid, rejected, rejection_for_error

#: Who writes the contract's CloudEvent (``gangway config apply``); the relayed copy is the
#: submission service's.
SOURCE = "gangway/config"


def decide_config(value: bytes | None, key: bytes | None, headers: Headers, state: State,
                  where: str) -> ConfigApplied | JobRejected | None:
    try:
        env = codec.from_record(value, headers)
    except Exception as exc:  # whatever the bytes: a rejection that keeps them, never a crash
        return rejection_for_error(value, key, headers, where, exc)
    if not isinstance(env.data, ConfigApplied):
        return rejected(Invalid("wrong_event_type", f"{env.type} on {where}: only ConfigApplied is read there"),
                        "", value, key, headers, where)
    if not digest_matches(env.data.contract, env.data.digest):  # (one an older gangway applied verifies)
        return rejected(Invalid("invalid_field", "digest: not the digest of the contract it carries"),
                        "", value, key, headers, where)
    if env.data.digest == state.contract_digest:
        return None
    return env.data
