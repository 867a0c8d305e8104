"""YAML aliases expanding past a bound ("billion laughs") are refused by every reader of YAML
gangway has — manifests, contracts, cluster files — in a moment, each its own way; a document
using a few aliases as people write them is read as before."""

from __future__ import annotations

import pytest
import yaml

from gangway.contract import kueue
from gangway.contract.yamldocs import EXPANDED_NODES_MAX, AliasExpansionError, documents
from gangway.services.binder.cluster import ClusterFileError, load_nodes
from gangway.services.submission.manifests import ManifestError, load_jobs


def laughs(levels: int = 9) -> str:
    """Nine aliases of nine aliases of …, ``levels`` deep (9**levels leaves)."""
    lines = ['a0: &a0 ["lol"]']
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [{', '.join(f'*a{i - 1}' for _ in range(9))}]")
    return "\n".join(lines) + "\n"


def test_a_billion_laughs_is_refused_and_a_few_aliases_are_read():
    with pytest.raises(AliasExpansionError, match="expand to more than"):
        list(documents(laughs()))
    assert 2 * 9 ** 5 < EXPANDED_NODES_MAX  # five levels: 59,049 leaves, read
    assert len(list(documents(laughs(5)))[0]["a5"]) == 9
    [doc] = documents("base: &b {cpu: 1}\none: *b\ntwo: *b\n")
    assert doc["one"] == doc["two"] == {"cpu": 1}
    with pytest.raises(AliasExpansionError, match="refers to a node that contains it"):
        list(documents("&a [*a]\n"))


def test_every_reader_of_yaml_refuses_it_in_its_own_words():
    bomb = laughs()
    with pytest.raises(ManifestError) as caught:
        load_jobs("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nx:\n" +
                  "".join(f"  {line}\n" for line in bomb.splitlines()), "job.yaml")
    assert caught.value.reason == "malformed_yaml" and "expand to more than" in caught.value.problem
    with pytest.raises(kueue.ConfigError, match="expand to more than"):
        kueue.read_contract(bomb, "contract.yaml")
    with pytest.raises(ClusterFileError, match="expand to more than"):
        load_nodes(bomb, "cluster.yaml")
    assert issubclass(AliasExpansionError, yaml.YAMLError)
