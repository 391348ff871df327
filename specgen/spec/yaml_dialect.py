"""What YAML 1.1 (PyYAML, specgen's reader) and YAML 1.2 (editors, yaml-language-server, most libraries) read
differently in a spec's text, refused with one positioned line each instead of silently read one way.

A reviewer reads a spec with YAML 1.2 tools; specgen reads it with PyYAML, which follows YAML 1.1. Where the two
disagree, the reviewer would approve one spec and specgen would run another, so those forms are errors:

- the characters U+0085, U+2028 and U+2029, which YAML 1.1 counts as line breaks and YAML 1.2 as ordinary
  characters (a comment pasted with one hides a live key from every editor and `git diff`), anywhere in the text;
- plain scalars that YAML 1.1 reads as a number, boolean or date and YAML 1.2 as another number or as text:
  `010` (octal 8 / 10), `1:30` (90 / text), `0b11`, `+0x1F`, `1_000`, `yes`/`no`/`on`/`off`, `2001-12-14`, `=`;
- scalars tagged `!!int`, `!!float`, `!!bool` or `!!null` whose text YAML 1.2's core schema reads as another value
  or refuses under that tag (`!!int 010`: 8 / 10, `!!int 1_000`, `!!null relu`): a tag asks for a kind of value,
  not for YAML 1.1's reading of the text (`tagged_problem`).

Not a dialect difference but refused the same way, anywhere in the text (values and comments): the bidirectional
embedding, override and isolate controls U+202A-U+202E and U+2066-U+2069. An editor, `git diff` or a review page
obeys them and shows the text around them reordered, so the spec a reviewer reads is not the one specgen runs
("Trojan Source", CVE-2021-42574). These nine are the ones compilers warn of (GCC's -Wbidi-chars, rustc's
text_direction_codepoint_in_literal). The marks U+200E, U+200F and U+061C stay allowed: each is one invisible
strong character that can move neutral characters (punctuation) next to right-to-left text but not reorder runs
of text across it, and right-to-left prose in a `doc` needs them. A `\u202e` escape in a double-quoted value is
visible as written and allowed; pictures escape such characters when they draw that value (text.printable).

Every other plain scalar means the same in both (specgen's own reading of `1e-3` as a number, docs/spec.md
"Numbers", is YAML 1.2's). Messages quote the text as written, never Python's rendering of it.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

from specgen.diagnostics import Position, safe_repr, shown
from specgen.fields.base import MAX_NAME_CHARS
from specgen.spec.source_map import CONSTRUCTOR_ERRORS

# YAML 1.1 line breaks that YAML 1.2 reads as ordinary characters (and their names for the message).
BREAKS_11 = {"\x85": "NEXT LINE (NEL)", "\u2028": "LINE SEPARATOR", "\u2029": "PARAGRAPH SEPARATOR"}
# Bidirectional controls that reorder the text around them on screen (the module docstring says why these nine).
BIDI = {"\u202a": "LEFT-TO-RIGHT EMBEDDING", "\u202b": "RIGHT-TO-LEFT EMBEDDING", "\u202c": "POP DIRECTIONAL FORMATTING",
        "\u202d": "LEFT-TO-RIGHT OVERRIDE", "\u202e": "RIGHT-TO-LEFT OVERRIDE", "\u2066": "LEFT-TO-RIGHT ISOLATE",
        "\u2067": "RIGHT-TO-LEFT ISOLATE", "\u2068": "FIRST STRONG ISOLATE", "\u2069": "POP DIRECTIONAL ISOLATE"}
_HIDDEN = re.compile("[\x85\u2028\u2029\u202a-\u202e\u2066-\u2069]")

_TAG = "tag:yaml.org,2002:"
_DECIMAL_12 = re.compile(r"[-+]?[0-9]+")  # YAML 1.2 core schema: a decimal integer
_OCTAL_11 = re.compile(r"[-+]?0[0-7_]+")  # YAML 1.1: a leading zero means octal
# Python refuses to turn more decimal digits than this into an int (sys.get_int_max_str_digits' default):
# a spec's numbers have at most ten, so a longer one is a mistake to name, not Python's advice to echo.
MAX_INT_DIGITS = 4300


def hidden_break(text: str) -> tuple[Position, str] | None:
    """The first YAML-1.1-only line break or bidirectional control in `text`, at its line:col counted on '\\n'
    only (as editors count), with the message; None when there is none."""
    found = _HIDDEN.search(text)
    if found is None:
        return None
    offset = found.start()
    line_start = text.rfind("\n", 0, offset) + 1
    char = found.group()
    position = Position(text.count("\n", 0, offset) + 1, offset - line_start + 1)
    if char in BIDI:
        return position, (f"the character U+{ord(char):04X} ({BIDI[char]}) makes editors, git diff and review pages "
                          "show the text around it reordered, so a reviewer would read another spec than the one "
                          "specgen runs (Trojan Source); delete it")
    message = (f"the character U+{ord(char):04X} ({BREAKS_11[char]}) is a line break for YAML 1.1 readers "
               "(specgen's) and an ordinary character for YAML 1.2 ones (editors, yaml-language-server, git diff), "
               "so they would read different specs; delete it, or write a newline")
    return position, message


def dialect_problem(node: yaml.ScalarNode) -> str | None:
    """Why a scalar that PyYAML resolved to `node.tag` means something else in YAML 1.2, with what to write instead;
    None when both read it alike. Only plain (unquoted) scalars are resolved by the dialect's rules."""
    if node.style:  # quoted or block: text in both dialects
        return None
    kind, text = node.tag.removeprefix(_TAG), node.value
    if kind == "int":
        return _integer(text)
    if kind == "float" and ("_" in text or ":" in text):
        return _both(text, f"the number {_number(text)}", f"write {_number(text)}")
    if kind == "bool":  # PyYAML's booleans beyond true/false: yes, no, on, off in three spellings
        if text.lower() in ("true", "false"):
            return None
        value = "true" if text.lower() in ("yes", "on") else "false"
        return _both(text, value, f"write {value}, or quote it ('{text}') for the text")
    if kind == "timestamp":
        return _both(text, "a date", f"quote it ('{text}'); a spec holds no dates")
    if kind == "value":  # YAML 1.1's "default value" key `=`
        return _both(text, "the default-value key", f"quote it ('{text}')")
    return None


# A node's properties as written at its mark: an anchor (`&a`), then a tag; the mark is at the first of them.
_TAGGED_AT = re.compile(r"(?:&[^\s,\[\]{}]*[ \t]+)?!")


def explicitly_tagged(lines: list[str], node: yaml.Node) -> bool:
    """Whether a scalar was written with an explicit tag (after its anchor, if any: its mark is at either), which
    asks for that reading. The node does not record it, and only untagged scalars are resolved by the dialect.
    Matched in place (no slice of the line): a one-line flow document of many values asks once per value."""
    mark = node.start_mark
    if mark is None or mark.line >= len(lines):
        return False
    return _TAGGED_AT.match(lines[mark.line], mark.column) is not None


_RESOLVER = yaml.resolver.Resolver()  # PyYAML's (YAML 1.1) implicit tags of plain scalars


def resolved_alike(node: yaml.ScalarNode) -> bool:
    """Whether PyYAML reads the scalar's text, written plain and untagged, as the tag it has: False only for one
    that was tagged (`!!null relu`), whichever way its tag was written (after an anchor on the line before, too)."""
    return bool(_RESOLVER.resolve(yaml.ScalarNode, node.value, (True, False)) == node.tag)  # type: ignore[no-untyped-call]


# The tags whose text YAML 1.2's core schema reads by its own rules (what it refuses under the tag, what it reads).
TAGGED_KINDS = {"int": "an integer", "float": "a number", "bool": "true or false", "null": "null"}
_INT_12 = re.compile(r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+")
_INF_NAN_12 = re.compile(r"[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)")
_BOOL_12 = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_NULL_12 = ("", "~", "null", "Null", "NULL")


def tagged_problem(node: yaml.ScalarNode) -> str | None:
    """Why a scalar with the tag `!!int`, `!!float`, `!!bool` or `!!null` means something else, or nothing, to a YAML
    1.2 reader: `!!int 010` is 8 to PyYAML and 10 to YAML 1.2, `!!int 1_000` and `!!null relu` are refused by YAML
    1.2 (PyYAML reads 1000 and null). A tag asks for a kind of value, not for YAML 1.1's reading of the text. Also
    the text neither reads under its tag (`!!int relu`), in specgen's words. None when both read it alike."""
    kind, text = node.tag.removeprefix(_TAG), node.value
    if kind not in TAGGED_KINDS:
        return None
    unsigned = text.lstrip("+-")
    if kind == "int" and len(text) > MAX_INT_DIGITS and unsigned[:2] not in ("0x", "0b"):
        return _integer(text)  # too many digits for int(), as untagged
    read_12, value_12 = _read_12(kind, text)
    read_11, value_11 = _read_11(node)
    if read_11 and read_12 and type(value_11) is type(value_12) and (value_11 == value_12 or value_11 != value_11):
        return None  # (NaN is not equal to itself)
    written, what = f"!!{kind} {shown(text) if text else repr(text)}", TAGGED_KINDS[kind]
    if read_11 and read_12:  # a leading zero: octal to YAML 1.1, decimal to YAML 1.2
        octal = " (octal)" if _OCTAL_11.fullmatch(text) else ""
        which = "the octal value" if octal else "YAML 1.1's reading"
        return (f"received {written}: YAML 1.1 reads {_yaml(value_11)}{octal} and YAML 1.2 reads {_yaml(value_12)}; "
                f"write {_yaml(value_12)}, or {_yaml(value_11)} for {which}")
    if read_11:
        advice = f"write null, or {shown(text)} without the tag" if kind == "null" else f"write {_yaml(value_11)}"
        return (f"received {written}: YAML 1.1 reads {_yaml(value_11)} and YAML 1.2 refuses it (not {what} there); "
                f"{advice}")
    if read_12:
        return (f"received {written}: YAML 1.2 reads {_yaml(value_12)} and YAML 1.1 (specgen's reader) refuses it; "
                f"write {_yaml(value_12)}")
    return f"received {written}, expected {what} after !!{kind}; write {what} there, or the value without the tag"


def _read_12(kind: str, text: str) -> tuple[bool, Any]:
    """(whether YAML 1.2's core schema reads `text` under the tag `kind`, the value it reads)."""
    if kind == "null":
        return text in _NULL_12, None
    if kind == "bool":
        return text in _BOOL_12, _BOOL_12.get(text)
    if kind == "int":
        if not _INT_12.fullmatch(text):
            return False, None
        base = {"0o": 8, "0x": 16}.get(text[:2], 10)
        return True, int(text[2:] if base != 10 else text, base)
    if _INF_NAN_12.fullmatch(text):
        return True, float(text.replace(".", "", 1))  # `-.inf`: float('-inf')
    return (True, float(text)) if _FLOAT_12.fullmatch(text) else (False, None)


def _read_11(node: yaml.ScalarNode) -> tuple[bool, Any]:
    """(whether PyYAML reads the scalar under its tag, the value it reads)."""
    try:
        return True, yaml.SafeLoader("").construct_object(node)
    except (yaml.YAMLError, *CONSTRUCTOR_ERRORS):
        return False, None


def _yaml(value: Any) -> str:
    """A value read under a tag, as YAML writes it: `null`, `false`, `.inf`, `1000`."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if value != value else "-.inf" if value < 0 else ".inf"
    return repr(value) if isinstance(value, float) else safe_repr(value)


def _integer(text: str) -> str | None:
    unsigned = text.lstrip("+-")
    if len(text) > MAX_INT_DIGITS and unsigned[:2] not in ("0x", "0b"):  # decimal (or octal) digits: Python
        digits = sum(ch.isdigit() for ch in text)  # refuses to convert more of them, and is slow to try
        return (f"received an integer of {digits} digits, expected at most {MAX_INT_DIGITS} digits (sizes, counts and "
                "steps are at most 2147483647)")
    if _OCTAL_11.fullmatch(text) and len(unsigned) > 1:
        octal = _number(text)
        if _DECIMAL_12.fullmatch(text):
            decimal = int(text)
            if str(decimal) == octal:  # 07: 7 in both
                return None
            return (f"received {text}: YAML 1.1 reads {octal} (octal) and YAML 1.2 reads {decimal}; "
                    f"write {decimal}, or {octal} for the octal value")
        return _both(text, f"{octal} (octal)", f"write {octal}")
    signed_hex = unsigned.startswith("0x") and unsigned != text  # YAML 1.2's hex has no sign: `-0x1F` is text
    if unsigned.startswith("0b") or signed_hex or "_" in text or ":" in text:
        return _both(text, _number(text), f"write {_number(text)}, or quote it ('{text}') for the text")
    return None


def _both(text: str, reading_11: str, advice: str) -> str:
    """The message for text that YAML 1.2 reads as itself."""
    return f"received {text}: YAML 1.1 reads {reading_11} and YAML 1.2 reads the text '{text}'; {advice}"


def _number(text: str) -> str:
    """PyYAML's (YAML 1.1) value of an int or float form, as decimal text."""
    loader = yaml.SafeLoader("")
    is_float = "." in text or text.lstrip("+-").startswith(".")
    node = yaml.ScalarNode(f"{_TAG}{'float' if is_float else 'int'}", text)
    value = loader.construct_yaml_float(node) if is_float else loader.construct_yaml_int(node)
    return repr(value) if isinstance(value, float) else safe_repr(value)  # bounded: 0b and 0x have no digit limit


# YAML 1.2 core schema's floats and octal integers. PyYAML (YAML 1.1) reads a float only with a dot and a signed
# exponent (`1.0e+3`), and has no `0o`, so `1e-3`, `3.2e1`, `1e999` and `0o17` reach specgen as text.
_FLOAT_12 = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_OCTAL_12 = re.compile(r"0o[0-7]+")


def number_12(text: str) -> int | float | None:
    """The number YAML 1.2 reads a plain scalar as, for text PyYAML kept as text (`3.2e1`: 32.0, `1e999`: inf,
    `0o17`: 15); None for text that is text in both. For messages: a number key that refuses such a value says what
    number the user wrote (docs/spec.md "Numbers")."""
    if len(text) > MAX_INT_DIGITS:  # float() and int() of that many digits is slow, and no spec means it
        return None
    if _OCTAL_12.fullmatch(text):
        return int(text[2:], 8)
    return float(text) if _FLOAT_12.fullmatch(text) else None


MAX_KEY = 1024  # characters: PyYAML's (and YAML's) bound on a key written without `? `


def long_key(text: str, position: Position | None) -> tuple[Position, str] | None:
    """A key over MAX_KEY characters where PyYAML's syntax error points (at or just before the ':' after it): its
    start and a message naming it, since PyYAML only says it did not expect that ':'. None for any other error."""
    lines = text.split("\n")
    if position is None or not 0 < position.line <= len(lines):
        return None
    line = lines[position.line - 1]
    colon = line.find(":", max(position.col - 2, 0))
    if colon < 0:
        return None
    start = max(line.rfind(mark, 0, colon) for mark in "{[,") + 1  # a flow key starts after one of these
    key = line[start:colon]
    written = key.strip().removeprefix("- ").strip()
    if len(written) <= MAX_KEY:
        return None
    return (Position(position.line, start + key.index(written[0]) + 1),
            f"a mapping key of {len(written)} characters; YAML reads keys of at most {MAX_KEY} characters "
            f"(specgen's names are at most {MAX_NAME_CHARS}), so shorten it")
