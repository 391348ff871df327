"""Load YAML safely and keep the source position of every key and value.

PyYAML's composer gives a node tree with marks; we convert it to plain Python
values ourselves so that we can (1) keep the node tree next to the values, the way
dagster keeps a tree of source positions, and look positions up by path only when
a diagnostic needs one, (2) reject duplicate keys (PyYAML silently keeps the last
one), and (3) bound the work that aliases can cause, which defeats "billion laughs"
alias bombs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from specgen.diagnostics import Diagnostic, Position, SpecError

MAX_FILE_BYTES = 1 << 20  # a spec is a few kilobytes; a megabyte is already absurd
MAX_NODES = 100_000  # values visited after alias expansion
MAX_DEPTH = 64  # nesting of mappings and lists; a spec needs about 5
# Tags that plain data has; anything else (`!foo`, `!!python/object`) is refused, never ignored.
STANDARD_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq",
                                                    "timestamp", "binary", "merge")}

PathKey = tuple[str | int, ...]
STR_TAG = "tag:yaml.org,2002:str"
MERGE_TAG = "tag:yaml.org,2002:merge"


class SourceMap:
    """Where each value and mapping key of one YAML file is, looked up by path on demand.

    It keeps the composed node tree and walks it only when a diagnostic needs a position,
    so the common case (a valid spec) pays nothing for positions.
    """

    def __init__(self, path: str, root: yaml.Node | None = None):
        self.path = path
        self.root = root

    def locate(self, loc: PathKey, data: Any, *, key: bool = False) -> Position | None:
        """Position of the deepest node along `loc` that exists in `data`.

        Components that are not in the data (pydantic adds union tags such as
        'conv2d' to error locations) are skipped, so every location maps to the
        nearest real node.
        """
        found: PathKey = ()
        node = data
        for part in loc:
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                node = node[part]
            else:
                continue
            found = (*found, part)
        return self.position(found, key=key)

    def position(self, path: PathKey, *, key: bool = False) -> Position | None:
        """Position of the value at `path` (or of its mapping key), which must exist."""
        value, key_node = self.root, None
        for part in path:
            if value is None:
                return None
            value, key_node = _child(value, part)
        target = key_node if key and key_node is not None else value
        return None if target is None else _position(target)


def _child(node: yaml.Node, part: str | int) -> tuple[yaml.Node | None, yaml.Node | None]:
    """(value node, key node) of one step: own keys first, then `<<` merges, as the converter reads them."""
    if isinstance(node, yaml.SequenceNode):
        ok = isinstance(part, int) and 0 <= part < len(node.value)
        return (node.value[part], None) if ok else (None, None)
    if not isinstance(node, yaml.MappingNode):
        return None, None
    merges = []
    for key_node, value_node in node.value:
        if key_node.tag == MERGE_TAG:
            merges += value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
        elif isinstance(key_node, yaml.ScalarNode) and _key_value(key_node) == part:
            return value_node, key_node
    for source in merges:
        found = _child(source, part)
        if found[0] is not None:
            return found
    return None, None


def _key_value(node: yaml.ScalarNode) -> Any:
    if node.tag == STR_TAG:
        return node.value
    try:
        return yaml.SafeLoader("").construct_object(node, deep=True)
    except (yaml.YAMLError, ValueError):
        return None


def _position(node: yaml.Node) -> Position:
    return Position(node.start_mark.line + 1, node.start_mark.column + 1)


class _Converter:
    """Turns a composed node tree into Python values, bounding alias expansion and depth."""

    def __init__(self, source: SourceMap):
        self.source = source
        self.visited = 0
        self.top: yaml.Node | None = None  # the top-level value being converted (alias-bomb messages)
        self.scalars = yaml.SafeLoader("")  # only its scalar constructors are used
        self.problems: list[Diagnostic] = []

    def convert(self, node: yaml.Node, depth: int = 0) -> Any:
        self.visited += 1
        if self.visited > MAX_NODES:  # point at the top-level value being expanded, not deep inside it
            raise SpecError([Diagnostic(self.source.path, _position(self.top or node),
                                        f"the document expands to more than {MAX_NODES} values through aliases "
                                        "(a YAML alias bomb?); write the values out or use fewer aliases")])
        if depth > MAX_DEPTH:
            raise SpecError([self._error(node, f"the document nests more than {MAX_DEPTH} levels deep")])
        tag = node.tag
        if tag == STR_TAG:  # most scalars in a spec: skip the general constructor's bookkeeping
            return node.value
        if tag not in STANDARD_TAGS:
            shown = tag.replace("tag:yaml.org,2002:", "!!", 1)
            raise SpecError([self._error(node, f"unsupported YAML tag {shown!r}; specs hold plain data")])
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, depth)
        if isinstance(node, yaml.SequenceNode):
            return [self.convert(item, depth + 1) for item in node.value]
        return self._scalar(node)

    def _scalar(self, node: yaml.Node) -> Any:
        if node.tag == STR_TAG:
            return node.value
        try:
            return self.scalars.construct_object(node, deep=True)
        except yaml.YAMLError as exc:  # e.g. `!!int abc`, `!!timestamp 2020-99-99`
            problem = getattr(exc, "problem", None) or str(exc)
            raise SpecError([self._error(node, f"invalid YAML: {problem}")]) from None
        except ValueError as exc:  # PyYAML's timestamp constructor raises these directly
            raise SpecError([self._error(node, f"invalid YAML value: {exc}")]) from None

    def _mapping(self, node: yaml.MappingNode, depth: int) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        merges: list[yaml.Node] = []
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:
                merges.append(value_node)
                continue
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag not in STANDARD_TAGS:
                self.problems.append(self._error(key_node, "mapping keys must be plain scalars"))
                continue
            key = self._scalar(key_node)
            if not isinstance(key, str | int | float | bool) or key is None:
                self.problems.append(self._error(key_node, "mapping keys must be plain scalars"))
                continue
            if key in result:
                self.problems.append(self._error(key_node, f"duplicate key '{key}'; "
                                                 "YAML keeps only one of them, so write it once"))
                continue
            if depth == 0:
                self.top = value_node
            result[key] = self.convert(value_node, depth + 1)
        for value_node in merges:  # after the mapping's own keys: those win wherever `<<` is written
            self._merge(result, value_node, depth)
        return result

    def _merge(self, result: dict[Any, Any], value_node: yaml.Node, depth: int) -> None:
        """Support `<<: *defaults` and `<<: [*a, *b]` (earlier sources win)."""
        sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
        for source in sources:
            merged = self.convert(source, depth)
            if not isinstance(merged, dict):
                self.problems.append(self._error(source, "'<<' merges only mappings"))
                continue
            for key, value in merged.items():
                result.setdefault(key, value)

    def _error(self, node: yaml.Node, message: str) -> Diagnostic:
        return Diagnostic(self.source.path, _position(node), message)


def load_yaml(path: Path, display: str | None = None) -> tuple[Any, SourceMap]:
    """Parse one YAML file into plain values and its source map, or raise SpecError."""
    shown = display or str(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise SpecError([Diagnostic(shown, None, f"cannot read the spec: {exc.strerror}")]) from None
    if size > MAX_FILE_BYTES:
        raise SpecError([Diagnostic(shown, None, f"the file is {size} bytes; specs are limited to "
                                    f"{MAX_FILE_BYTES} bytes (is this really a spec?)")])
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError([Diagnostic(shown, None, f"the file is not UTF-8 text: {exc.reason}")]) from None
    return parse_yaml(text, shown)


_SCALAR_TAGS: dict[tuple[str, tuple[bool, bool]], str] = {}


class _TagCache:
    """Resolver shortcuts for the safe loaders; the composed nodes are the same.

    PyYAML resolves each plain scalar's tag with a handful of regular expressions, in Python,
    called back from libyaml; specs repeat the same scalars (op names, `same`, sizes), so the
    tag of each (value, style) is kept. Path resolvers are never registered, so descending and
    ascending them is a no-op. Together this halves composing a spec.
    """

    LIMIT = 4096  # distinct scalars remembered per process

    def resolve(self, kind: type, value: Any, implicit: tuple[bool, bool]) -> str:
        if kind is not yaml.ScalarNode:
            return super().resolve(kind, value, implicit)  # type: ignore[misc]
        key = (value, implicit)
        tag = _SCALAR_TAGS.get(key)
        if tag is None:
            tag = super().resolve(kind, value, implicit)  # type: ignore[misc]
            if len(_SCALAR_TAGS) < self.LIMIT:
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


def _compose(text: str) -> yaml.Node | None:
    """Compose with libyaml when present; on a syntax error, again in Python for PyYAML's messages."""
    if FAST_LOADER is not None:
        try:
            return yaml.compose(text, Loader=FAST_LOADER)
        except yaml.YAMLError:
            pass
    return yaml.compose(text, Loader=_SafeLoader)


def parse_yaml(text: str, display: str) -> tuple[Any, SourceMap]:
    """Parse YAML text; syntax errors become diagnostics at the problem's mark."""
    try:
        root = _compose(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = Position(mark.line + 1, mark.column + 1) if mark else None
        raise SpecError([Diagnostic(display, where, f"invalid YAML: {exc.problem or exc}")]) from None
    except yaml.YAMLError as exc:
        raise SpecError([Diagnostic(display, None, f"invalid YAML: {exc}")]) from None
    except RecursionError:  # PyYAML's composer recurses once per nesting level
        raise SpecError([Diagnostic(display, None, f"the document nests more than {MAX_DEPTH} "
                                    "levels deep")]) from None
    if root is None:
        raise SpecError([Diagnostic(display, Position(1, 1), "the file is empty; expected a spec mapping")])
    source = SourceMap(display, root)
    converter = _Converter(source)
    data = converter.convert(root)
    if converter.problems:
        raise SpecError(converter.problems)
    return data, source
