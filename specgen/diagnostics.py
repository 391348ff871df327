"""Diagnostics in the `path:line:col: error: message` form, shared by every stage."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Position:
    """A 1-based line and column in a spec file."""

    line: int
    col: int


@dataclass(frozen=True)
class Diagnostic:
    """One problem found in a spec file, with where it is."""

    path: str
    position: Position | None
    message: str
    severity: str = "error"

    def __str__(self) -> str:
        where = self.path
        if self.position is not None:
            where = f"{self.path}:{self.position.line}:{self.position.col}"
        return one_line(f"{where}: {self.severity}: {self.message}")

    def sort_key(self) -> tuple[str, int, int, str]:
        line, col = (self.position.line, self.position.col) if self.position else (0, 0)
        return (self.path, line, col, self.message)


def one_line(text: str) -> str:
    """Escape line breaks and other control characters that a spec's own text can bring into
    a message (`unknown key 'a\\nb'`), so that every diagnostic stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in text)


class SpecError(Exception):
    """Raised with every diagnostic found; the CLI prints them and exits 1."""

    def __init__(self, diagnostics: Iterable[Diagnostic]):
        self.diagnostics = sorted(diagnostics, key=Diagnostic.sort_key)
        super().__init__("\n".join(str(d) for d in self.diagnostics))


def closest(received: str, choices: Iterable[str]) -> str | None:
    """The one entry of `choices` close enough to `received` to suggest, if any."""
    close = difflib.get_close_matches(received, sorted(set(choices)), n=1, cutoff=0.6)
    return close[0] if close else None


def did_you_mean(received: str, choices: Iterable[str]) -> str:
    """A ' did you mean 'x'?' suffix when something in `choices` is close to `received`."""
    close = closest(received, choices)
    return f"; did you mean '{close}'?" if close else ""


def one_of(choices: Iterable[str]) -> str:
    """Render a list of allowed values for a message: 'a', 'b' or 'c'."""
    quoted = [f"'{c}'" for c in sorted(set(choices))]
    if len(quoted) <= 1:
        return "".join(quoted)
    return ", ".join(quoted[:-1]) + " or " + quoted[-1]


def describe(value: object) -> str:
    """A short, safe rendering of a received value for messages."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"
