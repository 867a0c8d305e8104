"""YAML documents read with a bound on what their aliases expand to.

YAML's aliases let a few hundred bytes stand for a billion nodes (the "billion laughs": nine
aliases of nine aliases of …). PyYAML builds such a document as a small graph of shared objects,
but whatever then walks it as a tree — a manifest's keys, a contract's fields — walks every
expanded node, for minutes. Each document's node graph is sized as a tree before it is built, and
refused when its aliases add more than ``EXPANDED_NODES_MAX`` nodes (a document of any size
without aliases is never refused: only what aliases add is counted). A text with no anchor (``&``)
has no alias, and is read as it is.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import yaml

#: The most nodes aliases may add to one document once expanded.
EXPANDED_NODES_MAX = 1_000_000


class AliasExpansionError(yaml.YAMLError):
    """A document whose aliases expand past ``EXPANDED_NODES_MAX`` nodes (or refer to themselves)."""

    def __init__(self, problem: str, mark):
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


class StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing duplicate keys in a mapping as kubectl does."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {json.dumps(key, ensure_ascii=False, default=str)}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def documents(text: str, loader: type = yaml.SafeLoader) -> Iterator:
    """Each YAML document of ``text`` (``None`` for an empty one), built by ``loader`` once its
    aliases are known to expand to at most ``EXPANDED_NODES_MAX`` more nodes. Raises yaml.YAMLError
    (``AliasExpansionError`` for that)."""
    if "&" not in text:  # no anchor, no alias: nothing to expand (and no walk of every node)
        yield from yaml.load_all(text, Loader=loader)
        return
    reader = loader(text)
    try:
        while reader.check_node():
            node = reader.get_node()
            _check_expansion(node)
            yield reader.construct_document(node)
    finally:
        reader.dispose()


def _check_expansion(root) -> None:
    """Refuse a node graph whose aliases (nodes reached more than once) add more than the limit."""
    sizes: dict[int, int] = {}
    added = 0
    # iterative post-order: (node, children pushed?)
    stack = [(root, False)]
    open_nodes: set[int] = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            open_nodes.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in _children(node))
            continue
        if key in sizes:  # reached again: an alias, the whole subtree again
            added += sizes[key]
            if added > EXPANDED_NODES_MAX:
                raise AliasExpansionError(f"its aliases expand to more than {EXPANDED_NODES_MAX:,} nodes: refused "
                                          "(a \"billion laughs\" document)", node.start_mark)
            continue
        if key in open_nodes:
            raise AliasExpansionError("an alias refers to a node that contains it: refused", node.start_mark)
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(_children(node)))


def _children(node) -> list:
    if isinstance(node, yaml.SequenceNode):
        return node.value
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []
