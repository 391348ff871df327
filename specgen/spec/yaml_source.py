"""Load YAML safely and keep the source position of every key and value.

PyYAML's composer gives a node tree with marks; we convert it to plain Python
values ourselves so that we can (1) record positions by path, the way dagster
keeps a tree of source positions next to the values, (2) reject duplicate keys
(PyYAML silently keeps the last one), and (3) bound the work that aliases can
cause, which defeats "billion laughs" alias bombs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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


@dataclass
class SourceMap:
    """Positions of values and mapping keys in one YAML file, keyed by path."""

    path: str
    values: dict[PathKey, Position] = field(default_factory=dict)
    keys: dict[PathKey, Position] = field(default_factory=dict)

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
        if key and found in self.keys:
            return self.keys[found]
        return self.values.get(found)


def _position(node: yaml.Node) -> Position:
    return Position(node.start_mark.line + 1, node.start_mark.column + 1)


class _Converter:
    """Turns a composed node tree into Python values, recording positions."""

    def __init__(self, source: SourceMap):
        self.source = source
        self.visited = 0
        self.scalars = yaml.SafeLoader("")  # only its scalar constructors are used
        self.problems: list[Diagnostic] = []

    def convert(self, node: yaml.Node, path: PathKey, depth: int = 0) -> Any:
        self.visited += 1
        if self.visited > MAX_NODES:  # point at the top-level value being expanded, not deep inside it
            where = self.source.values.get(path[:1]) or _position(node)
            raise SpecError([Diagnostic(self.source.path, where, f"the document expands to more than {MAX_NODES} "
                                        "values through aliases (a YAML alias bomb?); "
                                        "write the values out or use fewer aliases")])
        if depth > MAX_DEPTH:
            raise SpecError([self._error(node, f"the document nests more than {MAX_DEPTH} levels deep")])
        if node.tag not in STANDARD_TAGS:
            tag = node.tag.replace("tag:yaml.org,2002:", "!!", 1)
            raise SpecError([self._error(node, f"unsupported YAML tag {tag!r}; specs hold plain data")])
        self.source.values.setdefault(path, _position(node))
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path, depth)
        if isinstance(node, yaml.SequenceNode):
            return [self.convert(item, (*path, i), depth + 1) for i, item in enumerate(node.value)]
        return self._scalar(node)

    def _scalar(self, node: yaml.Node) -> Any:
        if node.tag == STR_TAG:  # most scalars in a spec: skip the general constructor's bookkeeping
            return node.value
        try:
            return self.scalars.construct_object(node, deep=True)
        except yaml.YAMLError as exc:  # e.g. `!!int abc`, `!!timestamp 2020-99-99`
            problem = getattr(exc, "problem", None) or str(exc)
            raise SpecError([self._error(node, f"invalid YAML: {problem}")]) from None
        except ValueError as exc:  # PyYAML's timestamp constructor raises these directly
            raise SpecError([self._error(node, f"invalid YAML value: {exc}")]) from None

    def _mapping(self, node: yaml.MappingNode, path: PathKey, depth: int) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                self._merge(result, value_node, path, depth)
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
            self.source.keys[(*path, key)] = _position(key_node)
            result[key] = self.convert(value_node, (*path, key), depth + 1)
        return result

    def _merge(self, result: dict[Any, Any], value_node: yaml.Node, path: PathKey, depth: int) -> None:
        """Support `<<: *defaults`: keys written in the mapping itself win."""
        sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
        for source in sources:
            merged = self.convert(source, path, depth)
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


FAST_LOADER = getattr(yaml, "CSafeLoader", None)  # libyaml: same nodes and marks, 5-7x faster


def _compose(text: str) -> yaml.Node | None:
    """Compose with libyaml when present; on a syntax error, again in Python for PyYAML's messages."""
    if FAST_LOADER is not None:
        try:
            return yaml.compose(text, Loader=FAST_LOADER)
        except yaml.YAMLError:
            pass
    return yaml.compose(text, Loader=yaml.SafeLoader)


def parse_yaml(text: str, display: str) -> tuple[Any, SourceMap]:
    """Parse YAML text; syntax errors become diagnostics at the problem's mark."""
    source = SourceMap(display)
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
    converter = _Converter(source)
    data = converter.convert(root, ())
    if converter.problems:
        raise SpecError(converter.problems)
    return data, source
