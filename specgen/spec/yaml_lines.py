"""The lines around a PyYAML error, read as a spec writer wrote them: indentation, keys, values, list items.

yaml_errors.py's rules say a syntax error in terms of these lines; this module only reads them (a line's indent,
the `key:` it starts with, the nearest line above at a column) and names what it finds for a message (`'name'`, 'the
list item', '2 spaces'). Columns and lines are 0-based, as PyYAML's marks are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from specgen.diagnostics import MAX_ECHO, quoted


@dataclass(frozen=True)
class Marked:
    """One PyYAML error with the text it was raised on: 0-based marks, as PyYAML counts them."""

    lines: list[str]
    line: int  # the problem mark
    col: int
    context: tuple[int, int] | None  # the context mark (where the open quote, bracket or collection starts)
    whole: str  # what the text is, in messages: 'the file', 'the value'

    def text(self, line: int) -> str:
        return self.lines[line].rstrip("\r") if 0 <= line < len(self.lines) else ""


_KEY = re.compile(r"((?:- +)*)([^\s#'\"{\[][^:#]*?|'[^']*'|\"[^\"]*\"):(?:\s|$)")  # `- key: ...` at a line's start


def indent_of(line: str) -> int:
    """The spaces a line starts with."""
    return len(line) - len(line.lstrip(" "))


def has_content(line: str) -> bool:
    """Not blank and not only a comment."""
    return bool(line.strip()) and not line.strip().startswith("#")


def previous_line(error: Marked, line: int) -> int | None:
    """The nearest line above `line` with content."""
    return next((i for i in range(line - 1, -1, -1) if has_content(error.text(i))), None)


def key_of(line: str) -> tuple[int, str] | None:
    """(column, key) of the `key:` a line starts with (after any `- ` list markers), or None."""
    found = _KEY.match(line, indent_of(line))
    return (found.start(2), found.group(2).strip()) if found else None


def key_column(line: str) -> int:
    """Where a line's entry starts after its indentation and any `- ` list markers."""
    found = re.match(r" *(?:- +)*", line)
    return found.end() if found else 0


def value_of(line: str) -> str:
    """The value of a `key: value` line as written, without a trailing comment."""
    found = key_of(line)
    rest = line[found[0] + len(found[1]) + 1:] if found else line
    return re.sub(r"\s+#.*$", "", rest).strip()


def label_at(line: str, col: int) -> str:
    """What the entry at `col` of `line` is called in a message: its key, or 'the list item'."""
    if line[col:col + 1] == "-":
        return "the list item"
    found = key_of(line)
    return quoted(found[1]) if found and found[0] == col else quoted(cut(line[col:].strip()))


def cut(text: str) -> str:
    """`text`, cut to what a message echoes."""
    return text if len(text) <= MAX_ECHO else f"{text[:MAX_ECHO]}…"


def line_at(error: Marked, col: int, below: int) -> int | None:
    """The nearest line above `below` whose entry (a key, or a `-` list marker) starts at column `col`."""
    for i in range(below - 1, -1, -1):
        line = error.text(i)
        if not has_content(line):
            continue
        if indent_of(line) == col or (key_of(line) or (-1, ""))[0] == col:
            return i
        if indent_of(line) < col:
            return None
    return None


def spaces(count: int) -> str:
    """A count of columns with its unit: '1 space', '2 spaces'."""
    return f"{count} space" if count == 1 else f"{count} spaces"


def char(character: str) -> str:
    """A character quoted for a message (a single quote in double quotes)."""
    return f'"{character}"' if character == "'" else f"'{character}'"


def level_above(line: str, column: int) -> int | None:
    """The nearest column deeper than `column` where `line` starts an entry: its `-` or its key."""
    deeper = [level for level in (indent_of(line), key_column(line)) if level > column]
    return min(deeper) if deeper else None
