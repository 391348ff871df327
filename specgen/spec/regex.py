"""Restore-map regular expressions: RE2 syntax and linear-time matching, Python's `\\1` replacements.

A spec's `pattern` runs over every key of a checkpoint someone else wrote. Python's `re`
backtracks: `([a-z0-9/_]+)+X` takes minutes per 37-character key and cannot be interrupted
with Ctrl-C while it runs. RE2 matches in time linear in the key, so patterns are compiled
with RE2 only, at validate time and at restore time; what RE2 cannot do in linear time
(backreferences, lookaround, atomic groups) is refused with a positioned error.

The `to` template keeps Python's `Match.expand` meaning for what it accepts (`\\1`..`\\99`,
`\\g<1>`, `\\g<name>`, `\\\\`); every other backslash escape is refused, so the two never differ.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, NamedTuple

# Why RE2 refuses a construct Python users reach for, keyed by how RE2's message starts.
_HINTS = (
    *((f"invalid escape sequence: \\{d}", "backreferences") for d in range(10)),
    ("invalid perl operator: (?=", "lookahead"), ("invalid perl operator: (?!", "lookahead"),
    ("invalid perl operator: (?<=", "lookbehind"),
    ("invalid perl operator: (?<!", "lookbehind"), ("invalid perl operator: (?>", "atomic groups"),
    ("bad repetition operator: ++", "possessive quantifiers"), ("bad repetition operator: *+", "possessive quantifiers"),
    ("bad repetition operator: ?+", "possessive quantifiers"),
)
# One token of a `to` template, in the order Python's template parser tries them. Python reads
# `\\` + three octal digits as a character code, not group 12 then a digit: refused below.
# (A fixed pattern without nested repetition: it cannot backtrack badly on any input.)
_TEMPLATE_TOKEN = re.compile(r"\\g<([^>]*)>|\\([1-7][0-7]{2})|\\([1-9][0-9]?)|\\(.?)|[^\\]+", re.S)


@lru_cache(maxsize=256)
def compile_re2(pattern: str) -> Any:
    """`pattern` compiled by RE2; ValueError saying why RE2 refuses it (its syntax is what specs use)."""
    import re2  # only specs with restore patterns pay for the import

    options = re2.Options()
    options.log_errors = False  # RE2 would also print each error to stderr
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ValueError(_message(pattern, reason)) from None


def _message(pattern: str, reason: str) -> str:
    lacking = next((what for start, what in _HINTS if reason.startswith(start)), None)
    why = f" (RE2 matches in linear time, so it has no {lacking})" if lacking else ""
    return f"pattern '{pattern}' is not valid RE2 syntax, which restore patterns use: {reason}{why}"


def check_pattern(pattern: str) -> str:
    """Pydantic validator: the pattern compiles with RE2."""
    compile_re2(pattern)
    return pattern


class _Piece(NamedTuple):
    text: str  # literal text, or "" for a group reference
    group: int  # the group whose match goes here, -1 for literal text


@lru_cache(maxsize=256)
def parse_template(pattern: str, template: str) -> tuple[_Piece, ...]:
    """The pieces of `template`; ValueError for anything Python and this parser would read differently."""
    regex = compile_re2(pattern)
    pieces = []
    for token in _TEMPLATE_TOKEN.finditer(template):
        named, octal, number, escaped = token.groups()
        if named is not None:
            pieces.append(_Piece("", _group(named, regex)))
        elif number is not None:
            pieces.append(_Piece("", _group(number, regex)))
        elif escaped == "\\":
            pieces.append(_Piece("\\", -1))
        elif octal is not None or escaped is not None:
            raise ValueError(f"'to' may use a backslash only in \\1 to \\99, \\g<number>, \\g<name> or \\\\; "
                             f"received '{token.group()}'")
        else:
            pieces.append(_Piece(token.group(), -1))
    return tuple(pieces)


def _group(reference: str, regex: Any) -> int:
    if reference.isdecimal() and reference.isascii():
        if int(reference) > regex.groups:
            raise ValueError(f"'to' refers to group \\{int(reference)} but the pattern has {regex.groups} group(s)")
        return int(reference)
    if reference not in regex.groupindex:
        names = ", ".join(regex.groupindex) or "none"
        raise ValueError(f"'to' refers to group '{reference}', which the pattern does not name (names: {names})")
    return int(regex.groupindex[reference])


def rename(pattern: str, template: str, key: str) -> str | None:
    """`template` expanded with the groups of `pattern` matching all of `key`; None when it does not match."""
    match = compile_re2(pattern).fullmatch(key)
    if match is None:
        return None
    return "".join(p.text if p.group < 0 else (match.group(p.group) or "") for p in parse_template(pattern, template))
