"""Load YAML safely and keep the source position of every key and value.

PyYAML's composer gives a node tree with marks; we convert it to plain Python
values ourselves so that we can (1) keep the node tree next to the values, the way
dagster keeps a tree of source positions, and look positions up by path only when
a diagnostic needs one, (2) reject duplicate keys (PyYAML silently keeps the last
one), and (3) bound the work that aliases can cause, which defeats "billion laughs"
alias bombs.

Every bound holds before the work it limits: the file is checked to be a regular file and
read only up to the size limit; nesting is checked before libyaml's composer (which recurses
in C and would overflow the stack, killing the process) ever sees a deep document; aliases
are counted while they are expanded (the file: spec_file.py; the composer's bounds: yaml_compose.py).
`--set` values go through the same code (`parse_value`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from specgen.diagnostics import MAX_ECHO, Diagnostic, Position, SpecError, quoted, shown
from specgen.spec.key_slips import KeySlips, placed_slips
from specgen.spec.received import binary_data
from specgen.spec.source_map import CONSTRUCTOR_ERRORS, MERGE_TAG, STR_TAG, PathKey, SourceMap
from specgen.spec.spec_file import read_spec_text
from specgen.spec.yaml_aliases import ALIASED, ANCHOR, mark_aliases
from specgen.spec.yaml_compose import MAX_DEPTH, MAX_FILE_BYTES, compose, mark_position
from specgen.spec.yaml_dialect import (
    TAGGED_KINDS,
    dialect_problem,
    explicitly_tagged,
    hidden_break,
    long_key,
    number_12,
    resolved_alike,
    tagged_problem,
)
from specgen.spec.yaml_errors import translated

MAX_NODES = 100_000  # values visited after alias expansion
_TAG = "tag:yaml.org,2002:"
# Tags that plain data has; anything else (`!foo`, `!!python/object`) is refused, never ignored.
STANDARD_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq",
                                                    "timestamp", "binary", "merge")}

VALUE_TAG = "tag:yaml.org,2002:value"  # YAML 1.1's `=`: refused as a dialect difference (yaml_dialect.py)


def _constructor_problem(node: yaml.Node, exc: Exception) -> str:
    if isinstance(exc, ValueError) and str(exc):
        return f"invalid YAML value: {exc}"
    tag = node.tag.replace("tag:yaml.org,2002:", "!!", 1)
    return f"invalid YAML value: {quoted(node.value)} is not a valid {tag}"


class _Converter:
    """Turns a composed node tree into Python values, bounding alias expansion and depth."""

    def __init__(self, source: SourceMap, text: str):
        self.source = source
        self.text = text
        self._lines: list[str] | None = None  # split only when a dialect difference is found
        self.visited = 0
        self.expanded = 0  # of those, values repeated through an alias (the limit's message names the cause)
        self.expanding = False  # converting the value an alias repeats
        self.top: yaml.Node | None = None  # the top-level value being converted (alias-bomb messages)
        self.scalars = yaml.SafeLoader("")  # only its scalar constructors are used
        self.problems: list[Diagnostic] = []
        self.open: set[int] = set()  # the anchored collections being converted, innermost last (recursive aliases)
        self.path: list[str | int] = []  # where in the document the value being converted sits
        # Keys that are not names, with the place of their mapping: judged once the document is whole (placed_slips),
        # since under a key the spec does not have, that key is the mistake to report, not these.
        self.not_names: list[tuple[PathKey, Diagnostic]] = []

    def convert(self, node: yaml.Node, depth: int = 0, label: str = "") -> Any:
        """`node` as plain values; `label` names it in messages (`units`, `shape[1]`)."""
        if self.expanding or not hasattr(node, ALIASED):
            return self._convert(node, depth, label)
        self.expanding = True  # every value below an alias repeats one written elsewhere
        try:
            return self._convert(node, depth, label)
        finally:
            self.expanding = False

    def _convert(self, node: yaml.Node, depth: int, label: str) -> Any:
        written = node  # where it is written: an alias's own place, for a message about the alias
        node = getattr(node, ALIASED, node)  # how a value is written is judged where it is written: at its anchor
        self.visited += 1
        self.expanded += self.expanding
        if self.visited > MAX_NODES:
            raise SpecError([self._too_many(node)])
        if depth > MAX_DEPTH:
            raise SpecError([self._error(node, f"the document nests more than {MAX_DEPTH} levels deep")])
        tag = node.tag
        if tag == STR_TAG:  # most scalars in a spec: skip the general constructor's bookkeeping
            return node.value
        if isinstance(node, yaml.ScalarNode) and not self._same_in_yaml12(node, label):
            return None  # reported; the spec is refused once conversion ends
        if tag not in STANDARD_TAGS:
            shown = quoted(tag.replace("tag:yaml.org,2002:", "!!", 1))
            raise SpecError([self._error(node, f"unsupported YAML tag {shown}; specs hold plain data")])
        if isinstance(node, yaml.MappingNode | yaml.SequenceNode):
            return self._collection(node, written, depth, label)
        value = self._scalar(node)
        if isinstance(value, bytes):  # `!!binary`: pydantic would take the bytes as the text (or number) they spell
            self._binary(node, value, label)
            return None
        return value

    def _collection(self, node: yaml.Node, written: yaml.Node, depth: int, label: str) -> Any:
        """A mapping or list, refused at the alias when it is inside the value that alias repeats (`&r [*r]`, `&m
        {<<: *m}`): that value would hold itself without end, which is a cycle to name, not a depth to count."""
        if id(node) in self.open:
            raise SpecError([self._error(written, _recursive_alias(self.text, written))])
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, depth)
            return [self._at(i, item, depth + 1, f"{label}[{i}]") for i, item in enumerate(node.value)]
        finally:
            self.open.discard(id(node))

    def _too_many(self, node: yaml.Node) -> Diagnostic:
        """The node limit's message, at the top-level value being converted (not deep inside it): an alias bomb
        where most of the values counted are repeats through aliases, else a document that is simply too big."""
        if self.expanded > self.visited - self.expanded:
            message = (f"the document expands to more than {MAX_NODES} values through aliases (a YAML alias bomb?); "
                       "write the values out or use fewer aliases")
        else:
            message = f"the document holds more than {MAX_NODES} values; specs are limited to {MAX_NODES} (is this " \
                      "really a spec?)"
        return Diagnostic(self.source.path, mark_position(self.top or node), message)

    def _binary(self, node: yaml.Node, value: bytes, label: str) -> None:
        problem = (f"received {binary_data(value)} (!!binary); a spec holds text, numbers and booleans: write the "
                   "value itself, without the tag")
        self.problems.append(self._error(node, f"{shown(label)}: {problem}" if label else problem))

    def _same_in_yaml12(self, node: yaml.ScalarNode, label: str) -> bool:
        """False (and a problem noted) for a scalar YAML 1.2 reads differently (`010`, `no`, `1:30`, `!!int 010`)."""
        node = getattr(node, ALIASED, node)  # an alias used as a key: its anchor says how it is written
        problem = self._yaml12_problem(node)
        if problem is None:
            return True
        self.problems.append(self._error(node, f"{shown(label)}: {problem}" if label else problem))
        return False

    def _yaml12_problem(self, node: yaml.ScalarNode) -> str | None:
        """A tag asks for a kind of value (`!!int`), which YAML 1.2 reads by its own rules, so a tagged int, float,
        boolean or null is judged as tagged; `!!timestamp 2020-01-01` and `!!str 010` ask for their reading."""
        if node.tag.removeprefix(_TAG) not in TAGGED_KINDS:
            problem = dialect_problem(node)
            return None if problem is None or self._tagged(node) else problem
        problem = tagged_problem(node)  # first: most numbers read alike, and then how they are written is moot
        if problem is None or node.style or not resolved_alike(node) or self._tagged(node):  # (all three: tagged)
            return problem
        return dialect_problem(node)

    def _number_12(self, node: yaml.ScalarNode) -> int | float | None:
        """The number YAML 1.2 reads a plain scalar as where PyYAML kept the text (`1e3`, `0o17`); None for text
        in both, a quoted scalar and one tagged `!!str`."""
        if node.style or node.tag != STR_TAG:
            return None
        number = number_12(node.value)
        return None if number is None or self._tagged(node) else number

    def _scalar(self, node: yaml.Node) -> Any:
        if node.tag == STR_TAG:
            return node.value
        try:
            return self.scalars.construct_object(node, deep=True)
        except yaml.YAMLError as exc:  # e.g. `!!int abc`, `!!timestamp 2020-99-99`
            problem = getattr(exc, "problem", None) or str(exc)
            raise SpecError([self._error(node, f"invalid YAML: {problem}")]) from None
        except CONSTRUCTOR_ERRORS as exc:  # PyYAML's constructors assume well-formed text
            raise SpecError([self._error(node, _constructor_problem(node, exc))]) from None

    def _tagged(self, node: yaml.Node) -> bool:
        if self._lines is None:
            self._lines = self.text.split("\n")  # the lines PyYAML counted: other breaks are refused first
        return explicitly_tagged(self._lines, node)

    def _mapping(self, node: yaml.MappingNode, depth: int) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        merges: list[yaml.Node] = []
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:
                # `<<` is a key like any other: YAML 1.2 readers (which have no merge keys) see a second one as a
                # duplicate, and PyYAML keeps the last merge where specgen would take the first. One `<<` merges
                # several mappings as a list.
                if merges or MERGE in result:
                    self.problems.append(self._error(key_node, DUPLICATE_MERGE))
                else:
                    merges.append(value_node)
                continue
            if isinstance(key_node, yaml.ScalarNode) and not self._same_in_yaml12(key_node, "a mapping key"):
                continue
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag not in STANDARD_TAGS:
                self.problems.append(self._error(key_node, "mapping keys must be plain scalars"))
                continue
            key = self._scalar(key_node)
            if isinstance(key, str) and (number := self._number_12(getattr(key_node, ALIASED, key_node))) is not None:
                key = number  # `1e3:`, `0o17:`: text to PyYAML, a number to YAML 1.2, so a slip as `1:` is
            if not isinstance(key, str):  # every key of a spec is a name: `~:`, `1:`, `true:` are slips
                problem = self._error(key_node, _not_a_name(getattr(key_node, ALIASED, key_node), key))
                self.not_names.append((tuple(self.path), problem))
                # Kept, without its value: should the schema ever read this mapping, it refuses the key too.
                result.setdefault(key, None)
                continue
            if key in result or (key == MERGE and merges):  # `'<<'` (quoted) beside a `<<`: the same key in YAML 1.2
                self.problems.append(self._error(key_node, DUPLICATE_MERGE if key == MERGE else
                                                 f"duplicate key {quoted(key)}; YAML keeps only one of them, so "
                                                 "write it once"))
                continue
            if depth == 0:
                self.top = value_node
            result[key] = self._at(key, value_node, depth + 1, key)
        for value_node in merges:  # after the mapping's own keys: those win wherever `<<` is written
            self._merge(result, value_node, depth)
        return result

    def _at(self, part: str | int, node: yaml.Node, depth: int, label: str) -> Any:
        """`node`, the value at `part` of the collection being converted, converted with its place known."""
        self.path.append(part)
        try:
            return self.convert(node, depth, label)
        finally:
            self.path.pop()

    def _merge(self, result: dict[Any, Any], value_node: yaml.Node, depth: int) -> None:
        """Support `<<: *defaults` and `<<: [*a, *b]` (earlier sources win).

        A merge counts as one level of nesting: a chain of mappings each merging the one before
        (or a mapping merging itself) would otherwise recurse without bound.
        """
        sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
        for source in sources:
            merged = self.convert(source, depth + 1)
            if not isinstance(merged, dict):
                self.problems.append(self._error(source, "'<<' merges only mappings"))
                continue
            for key, value in merged.items():
                result.setdefault(key, value)

    def _error(self, node: yaml.Node, message: str) -> Diagnostic:
        return Diagnostic(self.source.path, mark_position(node), message)


MERGE = "<<"
DUPLICATE_MERGE = ("duplicate key '<<'; YAML keeps only one of them, so write it once: one '<<: [*a, *b]' merges "
                   "several mappings (the first one given wins)")


def _not_a_name(node: yaml.ScalarNode, key: Any) -> str:
    """A key YAML reads as null, a number or a boolean: what it read and how to write the text."""
    text = node.value
    if key is None:
        what = f"{text} (null)" if text else "an empty key (null)"
    else:
        what = f"{text[:MAX_ECHO]}{'…' * (len(text) > MAX_ECHO)} ({'a boolean' if isinstance(key, bool) else 'a number'})"
    hint = f" (quote it ('{text}') if you mean the text)" if text and len(text) <= MAX_ECHO else ""
    return f"a mapping key: received {what}, expected a name{hint}"


_ALIAS = re.compile(r"\*[^\s,\[\]{}]+")


def _recursive_alias(text: str, alias: yaml.Node) -> str:
    """The message for an alias inside the value its anchor marks (`&r [*r]`), naming the alias as written."""
    mark = alias.start_mark
    found = _ALIAS.match(text, mark.index) if mark is not None else None
    name = found.group()[:MAX_ECHO] if found else "this alias"
    shown_name = f"'{name}'" if found else name
    return (f"the alias {shown_name} is inside the value it repeats, so that value would hold itself without end "
            "(a recursive alias); alias a value written elsewhere, or write the value out")


def load_yaml(path: Path, display: str | None = None) -> tuple[Any, SourceMap]:
    """Parse one YAML file into plain values and its source map, or raise SpecError."""
    shown = display or str(path)
    return parse_yaml(read_spec_text(path, shown), shown)


def parse_yaml(text: str, display: str) -> tuple[Any, SourceMap]:
    """Parse a spec's YAML text; syntax errors become diagnostics at the problem's line:col."""
    data, source, _ = _parse(text, display)
    if source.root is None:
        raise SpecError([Diagnostic(display, Position(1, 1), "the file is empty; expected a spec mapping")])
    return data, source


def parse_document(text: str, display: str) -> tuple[Any, SourceMap]:
    """A file's data and source map, None for a file without a document (a base's caller says what it expected)."""
    data, source, _ = _parse(text, display)
    return data, source




def parse_value(text: str, display: str) -> Any:
    """One YAML value (a `--set` override), under the same bounds as a spec file; empty is None."""
    value, slips = parse_placed_value(text, display)
    if slips:
        raise SpecError([problem for _, problem in slips])
    return value


def parse_placed_value(text: str, display: str) -> tuple[Any, KeySlips]:
    """parse_value's value, with its keys that are not names left for `placed_slips` to judge once the value's place
    in a spec is known (`--set train.class_weight={0: 2}`: the unknown `class_weight` is the mistake to report)."""
    data, _, slips = _parse(text, display, whole="the value", spec=False)
    return data, slips


def _parse(text: str, display: str, whole: str = "the file", spec: bool = True) -> tuple[Any, SourceMap, KeySlips]:
    """`whole` names the text in messages (a quote left open runs to the end of it); `spec`: the text is a spec
    document (a file, a base), whose keys' places the schema knows, and its key slips are judged here; a `--set`
    value's place is not its root, so its slips are returned to its caller unjudged (none when it raises)."""
    undecoded = not_utf8(text)  # a file is decoded strictly; this is text from elsewhere (a command line)
    if undecoded is not None:
        raise SpecError([Diagnostic(display, None, f"the text is not UTF-8 ({undecoded}); write it in UTF-8")])
    if len(text) > MAX_FILE_BYTES:  # characters: a file was already held to the byte limit
        raise SpecError([Diagnostic(display, None, f"the text is {len(text)} characters; specs are limited "
                                    f"to {MAX_FILE_BYTES} (is this really a spec?)")])
    hidden = hidden_break(text)  # before PyYAML, which would count it as a line break
    if hidden is not None:
        raise SpecError([Diagnostic(display, *hidden)])
    try:
        root = compose(text, display)
    except yaml.YAMLError as exc:
        position = _error_position(exc, text)
        too_long = long_key(text, position)  # PyYAML's own words name a ':' it did not expect, not the key
        message = too_long[1] if too_long else _problem(exc, text, whole)
        raise SpecError([Diagnostic(display, too_long[0] if too_long else position, message)]) from None
    if root is not None and ANCHOR.search(text):
        mark_aliases(text, root)
    source = SourceMap(display, root)
    if root is None:
        return None, source, []
    converter = _Converter(source, text)
    data = converter.convert(root)
    slips = placed_slips((), converter.not_names, data) if spec else [problem for _, problem in converter.not_names]
    if converter.problems or (slips and spec):
        raise SpecError(converter.problems + slips)
    return data, source, [] if spec else converter.not_names


_SURROGATE = re.compile("[\ud800-\udfff]")


def not_utf8(text: str) -> str | None:
    """Where `text` holds what UTF-8 cannot encode, or None. Python decodes a command line's bytes that are not UTF-8
    into lone surrogates (U+DC80-U+DCFF for the bytes 0x80-0xFF) instead of refusing them, and PyYAML (like every
    encoder) then fails on them with a traceback; so text from the command line is checked before it is read."""
    found = _SURROGATE.search(text)
    if found is None:
        return None
    code = ord(found.group())
    what = f"the byte 0x{code - 0xDC00:02X}" if 0xDC80 <= code <= 0xDCFF else f"the lone surrogate U+{code:04X}"
    return f"{what} at character {found.start() + 1}"


def _error_position(exc: yaml.YAMLError, text: str) -> Position | None:
    """Where a PyYAML error is: its problem mark, else its context mark, else (reader errors,
    e.g. a control character) the character offset it gives, turned into line:col."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        return Position(mark.line + 1, mark.column + 1) if mark else None
    offset = getattr(exc, "position", None)
    if isinstance(offset, int) and 0 <= offset <= len(text):
        return offset_position(text, offset)
    return None


# PyYAML's problems whose words need their context (`but found another document`), said whole instead.
_WHOLE = {"expected a single document in the stream":
          "a second document starts here ('---'); a spec is one YAML document: delete the '---' and what follows, "
          "or make it a spec file of its own"}


def _problem(exc: yaml.YAMLError, text: str, whole: str) -> str:
    """The message for a syntax error: in the spec writer's terms (yaml_errors.py) where the table knows it, else
    PyYAML's own words after `invalid YAML:`."""
    if isinstance(exc, yaml.MarkedYAMLError):
        return translated(exc, text, whole) or f"invalid YAML: {_raw_problem(exc)}"
    return f"invalid YAML: {_raw_problem(exc)}"


def _raw_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError):
        return _WHOLE.get(str(exc.context)) or str(exc.problem or exc.context or "syntax error")
    if isinstance(exc, yaml.reader.ReaderError) and isinstance(exc.character, int):
        return f"unacceptable character U+{exc.character:04X}: {exc.reason}"
    return str(exc).split("\n", 1)[0]


_BREAKS = ("\n", "\x85", "\u2028", "\u2029")  # what PyYAML's reader counts as line breaks (and a lone '\r')


def offset_position(text: str, offset: int) -> Position:
    """1-based line:col of a character offset, counting lines as PyYAML's marks do."""
    before = text[:offset]
    if before.endswith("\r") and text.startswith("\n", offset):  # '\r\n' breaks at its '\n'
        before = before[:-1]
    line_start = max(before.rfind(b) for b in (*_BREAKS, "\r")) + 1
    lines = sum(before.count(b) for b in _BREAKS) + before.count("\r") - before.count("\r\n")
    return Position(lines + 1, offset - line_start + 1)
