"""Where a value written through a YAML alias is: at the alias (`units: *s`), not at the anchor (`seed: &s 42`).

PyYAML's composer makes an alias the anchored node itself, so every use of `*s` would be positioned at `&s`, on
another key's line. `mark_aliases` gives each use a node of its own, marked where the alias is written; the loader
(yaml_source.py) still judges how a value is written (its tag, its YAML 1.1 reading) at the anchor, via `ALIASED`.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import yaml

from specgen.spec.yaml_compose import FAST_LOADER

ANCHOR = re.compile(r"&[^\s,\[\]{}]")  # text that may hold an anchor (and so aliases); over-inclusive is harmless
ALIASED = "specgen_anchored"  # the attribute of an alias's node that holds the anchored node it repeats


def mark_aliases(text: str, root: yaml.Node) -> None:
    """Give each use of an alias (`units: *s`) a node of its own, marked where the alias is written.

    The composer makes an alias the anchored node itself, so a value written through `*s` would be positioned at
    `&s` (another key's line). The parser's events are read again beside the composed tree (iteratively: the
    depth was bounded when composing) and each alias's slot gets a shallow copy with the alias's marks; the copy
    shares the anchored node's children, so the work stays one node per alias whatever the anchor holds.
    """
    try:
        _mark(text, root, FAST_LOADER or yaml.SafeLoader)
    except yaml.YAMLError:  # libyaml refuses a few texts PyYAML reads (`{a:{b: c}}`), and compose fell back to
        _mark(text, root, yaml.SafeLoader)  # PyYAML for them: read its events (slots already marked stay the same)


def _mark(text: str, root: yaml.Node, loader: Any) -> None:
    parser = loader(text)
    try:
        open_nodes: list[list[Any]] = []  # per open collection: its node and its next slot (a mapping's: 2 a pair)
        while parser.check_event():
            event = parser.get_event()
            if isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
                open_nodes.pop()
                continue
            if not isinstance(event, yaml.NodeEvent):  # stream and document events
                continue
            here = root
            if open_nodes:
                frame = open_nodes[-1]
                here = _slot(frame)
                if isinstance(event, yaml.AliasEvent):
                    _set_slot(frame, _alias_node(here, event))
                frame[1] += 1
            if isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
                open_nodes.append([here, 0])
    finally:
        parser.dispose()


def _slot(frame: list[Any]) -> yaml.Node:
    node, at = frame
    found: yaml.Node = node.value[at] if isinstance(node, yaml.SequenceNode) else node.value[at // 2][at % 2]
    return found


def _set_slot(frame: list[Any], value: yaml.Node) -> None:
    node, at = frame
    if isinstance(node, yaml.SequenceNode):
        node.value[at] = value
    else:
        pair = node.value[at // 2]
        node.value[at // 2] = (value, pair[1]) if at % 2 == 0 else (pair[0], value)


def _alias_node(anchored: yaml.Node, event: yaml.AliasEvent) -> yaml.Node:
    found = copy.copy(anchored)
    found.start_mark, found.end_mark = event.start_mark, event.end_mark
    setattr(found, ALIASED, getattr(anchored, ALIASED, anchored))
    return found
