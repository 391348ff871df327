"""Composing YAML text into PyYAML's node tree, with the nesting bounded before libyaml ever recurses.

libyaml's composer recurses in C and a deep enough document kills the process; PyYAML's recurses in
Python and ends in RecursionError without a position. A text that provably nests little (a few string
scans: `max_nesting`) is composed directly; any other is first checked level by level on the parser's
iterative event stream (`check_depth`), which names the first node too deep.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml import events

from specgen.diagnostics import Diagnostic, Position, SpecError

MAX_FILE_BYTES = 1 << 20  # a spec is a few kilobytes; a megabyte is already absurd
MAX_DEPTH = 64  # nesting of mappings and lists (and `<<` merges); a spec needs about 5
# libyaml's composer recurses in C, about 370 bytes of stack a level (an 8 MiB stack overflows
# near 22,000 levels). A text that provably nests less than this is composed directly; any
# other is first checked level by level on the parser's (iterative) event stream.
C_SAFE_DEPTH = 1000


_SCALAR_TAGS: dict[tuple[str, tuple[bool, bool]], str] = {}


class _TagCache:
    """Resolver shortcuts for the safe loaders; the composed nodes are the same.

    PyYAML resolves each plain scalar's tag with a handful of regular expressions, in Python,
    called back from libyaml; specs repeat the same scalars (op names, `same`, sizes), so the
    tag of each (value, style) is kept. Path resolvers are never registered, so descending and
    ascending them is a no-op. Together this halves composing a spec.
    """

    LIMIT = 4096  # distinct scalars remembered per process
    LONGEST = 64  # characters: names and numbers repeat, long text does not (and would be kept alive)

    def resolve(self, kind: type, value: Any, implicit: tuple[bool, bool]) -> str:
        # The ignores below (misc): a mixin, whose super() is the loader's Resolver (PyYAML's stubs leave it untyped)
        if kind is not yaml.ScalarNode:
            resolved: str = super().resolve(kind, value, implicit)  # type: ignore[misc]
            return resolved
        key = (value, implicit)
        tag = _SCALAR_TAGS.get(key)
        if tag is None:
            tag = super().resolve(kind, value, implicit)  # type: ignore[misc]
            if len(_SCALAR_TAGS) < self.LIMIT and len(value) <= self.LONGEST:
                _SCALAR_TAGS[key] = tag
        return tag

    def descend_resolver(self, current_node: Any, current_index: Any) -> None:
        pass

    def ascend_resolver(self) -> None:
        pass


class _SafeLoader(_TagCache, yaml.SafeLoader):
    pass


FAST_LOADER: type | None = None  # libyaml: the same nodes and marks, 5-7x faster than PyYAML's parser
if hasattr(yaml, "CSafeLoader"):
    class _CSafeLoader(_TagCache, yaml.CSafeLoader):
        pass

    FAST_LOADER = _CSafeLoader


def compose(text: str, display: str = "<yaml>") -> yaml.Node | None:
    """Compose with libyaml when present; on a syntax error, again in Python for PyYAML's messages.

    Nesting is bounded first: libyaml's composer recurses in C and a deep enough document
    kills the process; PyYAML's recurses in Python and ends in RecursionError without a position.
    """
    if FAST_LOADER is not None:
        try:
            if max_nesting(text) > C_SAFE_DEPTH:
                check_depth(text, display, FAST_LOADER)
            return yaml.compose(text, Loader=FAST_LOADER)
        except yaml.YAMLError:
            pass
    try:
        return yaml.compose(text, Loader=_SafeLoader)
    except RecursionError:
        pass
    check_depth(text, display, _SafeLoader)  # raises at the first node too deep, with its position
    raise SpecError([Diagnostic(display, None, f"the document nests more than {MAX_DEPTH} levels deep")])


def max_nesting(text: str) -> int:
    """An upper bound on how deeply `text` can nest collections, from a few C-speed string scans.

    Flow collections nest only through '[' and '{' (a flow sequence adds at most one implicit
    mapping per '['); block collections only by indenting further, at most two levels (a mapping
    and a sequence inside it) per column. Normal specs stay far below C_SAFE_DEPTH; a text that
    does not gets the exact check.
    """
    brackets = text.count("[") + text.count("{")
    longest_line = max(map(len, text.split("\n")))  # only '\n': other breaks make lines shorter
    return 2 * brackets + 2 * (longest_line + 1)


_OPEN = (events.MappingStartEvent, events.SequenceStartEvent)
_CLOSE = (events.MappingEndEvent, events.SequenceEndEvent)
_NODE = (events.ScalarEvent, events.AliasEvent, *_OPEN)


def check_depth(text: str, display: str, loader: type) -> None:
    """Raise SpecError at the first node nested more than MAX_DEPTH levels, reading the parser's
    events, which needs no recursion. Levels count as in `_Converter` (the top-level node is
    level 0; scalar mapping keys are not checked), so both report the same node."""
    parser = loader(text)
    try:
        open_items: list[int] = []  # per open collection: -1 for a sequence, else nodes read in the mapping
        while parser.check_event():
            event = parser.get_event()
            if isinstance(event, _CLOSE):
                open_items.pop()
            elif isinstance(event, _NODE):
                in_mapping = bool(open_items) and open_items[-1] >= 0
                scalar_key = in_mapping and open_items[-1] % 2 == 0 and isinstance(event, events.ScalarEvent)
                if len(open_items) > MAX_DEPTH and not scalar_key:
                    raise SpecError([Diagnostic(display, mark_position(event),
                                                f"the document nests more than {MAX_DEPTH} levels deep")])
                if in_mapping:
                    open_items[-1] += 1
                if isinstance(event, _OPEN):
                    open_items.append(0 if isinstance(event, events.MappingStartEvent) else -1)
    finally:
        parser.dispose()


def mark_position(node: yaml.Node | yaml.Event) -> Position:
    """Where a node or event starts, 1-based."""
    mark = node.start_mark
    assert mark is not None  # the loader marks every node and event it makes (PyYAML types the mark optional)
    return Position(mark.line + 1, mark.column + 1)
