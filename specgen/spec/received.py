"""Received values as spec errors print them: as written in YAML flow style, never as Python prints them.

`extends: {a: b}` is refused with `received {a: b} (a mapping)`, not `{'a': 'b'} (dict)`: the user wrote YAML, and
Python's repr of a container (quotes on every key, `None`, `True`) is a spelling they never used. Bounded like
every echo (diagnostics.MAX_ECHO): a few items, a few levels, each text cut, so a huge value costs what it shows.
"""

from __future__ import annotations

import datetime
import math
import re
from typing import Any

from specgen.diagnostics import MAX_ECHO, describe, digit_count

ITEMS = 6  # items of one list or mapping shown; the rest as `...`
LEVELS = 3  # nesting shown; deeper containers as `[...]` / `{...}`
# A text YAML reads back as the same text when written plain in flow style: no indicator first, no `: ` / ` #`,
# no flow punctuation, and not a word or number YAML would read as something else.
_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./\-]*")
_SPECIAL = re.compile(r"(?i)(y|n|yes|no|on|off|true|false|null|~|\.inf|\.nan)")


def received(value: Any) -> str:
    """A received value for a message: `null`, `true (a boolean)`, `{a: b} (a mapping)`, `[1, 2] (a list)`; any
    other scalar as diagnostics.describe writes it (`'abc' (str)`, `-3 (int)`)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{'true' if value else 'false'} (a boolean)"
    if isinstance(value, dict):
        return f"{flow(value)} (a mapping)"
    if isinstance(value, list | tuple):
        return f"{flow(value)} (a list)"
    if isinstance(value, bytes):  # only an explicit `!!binary` gives bytes (and the loader refuses it)
        return f"{binary_data(value)} (!!binary)"
    if isinstance(value, datetime.date):  # only an explicit `!!timestamp` gives a date
        return f"{value.isoformat()} (a date)"
    return describe(value)


def binary_data(value: bytes) -> str:
    return f"binary data of {len(value)} byte{'' if len(value) == 1 else 's'}"


def flow(value: Any, level: int = 0) -> str:
    """`value` in YAML flow style, bounded (the whole text at most about MAX_ECHO characters)."""
    text = _flow(value, level)
    return text if len(text) <= MAX_ECHO else text[: MAX_ECHO - 1] + "…"


def _flow(value: Any, level: int) -> str:
    if isinstance(value, dict):
        if level >= LEVELS:
            return "{...}"
        shown = [f"{_flow(k, LEVELS)}: {_flow(v, level + 1)}" for k, v in _first(value.items())]
        return "{" + ", ".join(shown + (["..."] if len(value) > ITEMS else [])) + "}"
    if isinstance(value, list | tuple):
        if level >= LEVELS:
            return "[...]"
        shown = [_flow(v, level + 1) for v in _first(value)]
        return "[" + ", ".join(shown + (["..."] if len(value) > ITEMS else [])) + "]"
    return _scalar(value)


def _first(items: Any) -> list[Any]:
    out: list[Any] = []
    for item in items:  # never the whole of a huge container
        if len(out) == ITEMS:
            break
        out.append(item)
    return out


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return repr(value) if value.bit_length() <= 256 else f"<an integer of about {digit_count(value)} digits>"
    if isinstance(value, float):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf") if math.isinf(value) else repr(value)
    if isinstance(value, bytes):  # the tag only in received()'s kind, so that a message names it once
        return binary_data(value)
    if isinstance(value, datetime.date):
        return value.isoformat()
    text = value if isinstance(value, str) else str(type(value).__name__)
    cut = text[:MAX_ECHO]
    if _PLAIN.fullmatch(cut) and not _SPECIAL.fullmatch(cut):
        return cut + ("…" if len(text) > MAX_ECHO else "")
    quoted = "'" + cut.replace("'", "''") + "'"  # YAML's single quotes: only ' is escaped, by doubling it
    escaped = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in quoted)
    return escaped + ("…" if len(text) > MAX_ECHO else "")
