"""Diagnostics in the `path:line:col: error: message` form, shared by every stage.

Whatever a spec holds, a diagnostic stays small: every received value a message echoes goes
through `shown` / `quoted` / `describe` (at most `MAX_ECHO` characters, then an ellipsis and the
full length), a whole message is cut to `MAX_MESSAGE` characters as a backstop for messages
built elsewhere, and `report_lines` prints at most `MAX_PER_FILE` diagnostics per file.
"""

from __future__ import annotations

import difflib
import itertools
import math
import re
import reprlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from specgen.errors import SpecgenError
from specgen.text import printable

MAX_ECHO = 80  # characters of one received value (a name, a key, a number) in a message
MAX_MESSAGE = 2000  # characters of a whole message; the longest real one lists ~40 op names
MAX_PER_FILE = 100  # diagnostics printed per file; the rest are counted in one line



class _BoundedRepr(reprlib.Repr):
    """reprlib's bounded `repr` of containers, also for huge integers and bytes inside them
    (reprlib converts those whole first; Python refuses ints over 4300 digits outright)."""

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 256:
            return f"<an integer of about {digit_count(x)} digits>"
        return repr(x)

    def repr_bytes(self, x: bytes, level: int) -> str:
        return f"{x[:MAX_ECHO]!r}… ({len(x)} bytes)" if len(x) > MAX_ECHO else repr(x)


def digit_count(x: int) -> int:
    """The decimal digits of `x`, without str(), which Python refuses past 4300 digits: from its bits (2**(b-1) <= |x|
    < 2**b), which leave two candidates, told apart by one power of ten (the bits alone over-counted 999 as 4)."""
    x = abs(x)
    digits = int((max(x.bit_length(), 1) - 1) * math.log10(2)) + 1
    while x >= 10**digits:
        digits += 1
    while digits > 1 and x < 10 ** (digits - 1):  # a float rounding at millions of digits
        digits -= 1
    return digits


_REPR = _BoundedRepr()  # a few items, a few levels, never the whole value
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict = 3, 6, 6, 4
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = MAX_ECHO


@dataclass(frozen=True, order=True)
class Position:
    """A 1-based line and column in a spec file.

    `file` is set when the position lies in another file than the diagnostic's spec (a base it `extends`,
    spec/compose.py): the diagnostic then names that file, and `via` the `extends` entries that brought it in.
    """

    line: int
    col: int
    file: str | None = field(default=None, compare=False)
    via: str = field(default="", compare=False)


@dataclass(frozen=True)
class Diagnostic:
    """One problem found in a spec file, with where it is."""

    path: str
    position: Position | None
    message: str
    severity: str = "error"

    def __post_init__(self) -> None:
        # Held here, not only when printed: thousands of diagnostics may echo the same long value.
        if len(self.message) > MAX_MESSAGE:
            object.__setattr__(self, "message", _cut(self.message, MAX_MESSAGE))
        if self.position is not None and self.position.file:  # written in a base the spec extends
            object.__setattr__(self, "path", self.position.file)
        if len(self.path) > MAX_MESSAGE:  # `--set <text>` names the override as the path
            object.__setattr__(self, "path", _cut(self.path, MAX_MESSAGE))

    def __str__(self) -> str:
        where = self.path
        if self.position is not None:
            where = f"{self.path}:{self.position.line}:{self.position.col}"
        via = f" (via {self.position.via})" if self.position is not None and self.position.via else ""
        return one_line(f"{where}: {self.severity}: {self.message}{via}")

    def sort_key(self) -> tuple[str, int, int, tuple[str | tuple[int, str, str], ...]]:
        line, col = (self.position.line, self.position.col) if self.position else (0, 0)
        return (self.path, line, col, natural_key(self.message))


def natural_key(text: str) -> tuple[str | tuple[int, str, str], ...]:
    """`text` with its runs of digits ordered as numbers, so that 'encoder/2' sorts before 'encoder/10' (instances
    of a `repeat`). A run is keyed by its length without leading zeros, then its digits: the numeric order, without
    `int()`, which refuses a run of more than 4,300 digits (a message can echo one). The split alternates text and
    digits, so two keys compare str with str and run with run."""
    return tuple(_number_key(part) if i % 2 else part for i, part in enumerate(re.split(r"(\d+)", text)))


def _number_key(digits: str) -> tuple[int, str, str]:
    """A run of digits keyed as its number: fewer significant digits first, then the digits (both without leading
    zeros: '02' is 2, after '1'); equal numbers by how they are written ('02' before '2'), so no two runs tie."""
    significant = digits.lstrip("0")
    return (len(significant), significant, digits)


def _cut(text: str, limit: int) -> str:
    """Keep the start and the end (where messages say what was expected) of an over-long text."""
    head = limit * 2 // 3
    tail = limit - head - 40
    return f"{text[:head]}… [{len(text) - head - tail} characters cut] …{text[-tail:]}"


def one_line(text: str) -> str:
    """Escape line breaks and other control characters that a spec's own text can bring into
    a message (`unknown key 'a\\nb'`), so that every diagnostic stays one line."""
    return printable(text)


class SpecError(SpecgenError):
    """Raised with every diagnostic found; the CLI prints them and exits 1."""

    def __init__(self, diagnostics: Iterable[Diagnostic]):
        self.diagnostics = sorted(diagnostics, key=Diagnostic.sort_key)
        super().__init__("\n".join(report_lines(self.diagnostics)))


def report_lines(diagnostics: list[Diagnostic], per_file: int = MAX_PER_FILE) -> list[str]:
    """The lines to print: the first `per_file` diagnostics of each file (in the order given,
    sorted by position in SpecError), then one line counting the rest of that file's."""
    lines: list[str] = []
    for path, group in itertools.groupby(diagnostics, key=lambda d: d.path):
        items = list(group)
        lines += [str(d) for d in items[:per_file]]
        if len(items) > per_file:
            lines.append(one_line(f"{path}: note: and {len(items) - per_file} more errors in this file "
                                  f"(only the first {per_file} are shown)"))
    return lines


def shown(text: str, limit: int = MAX_ECHO) -> str:
    """`text` cut to `limit` characters, with an ellipsis and the full length when it was longer."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} characters)"


def quoted(value: object) -> str:
    """A name or key as messages quote it, `'conv1'`; a long one as `'conv1conv1…' (900000 characters)`."""
    text = value if isinstance(value, str) else safe_repr(value)
    if len(text) <= MAX_ECHO:
        return f"'{text}'"
    return f"'{text[:MAX_ECHO]}…' ({len(text)} characters)"


def safe_repr(value: object) -> str:
    """`repr(value)` in about MAX_ECHO characters, without building the whole repr first: a long
    string or list would cost its full length for every message that echoes it."""
    if isinstance(value, str):
        return f"{value[:MAX_ECHO]!r}… ({len(value)} characters)" if len(value) > MAX_ECHO else repr(value)
    if isinstance(value, int | bytes | list | tuple | dict | set | frozenset) and not isinstance(value, bool):
        return _REPR.repr(value)
    return shown(repr(value))


def closest(received: str, choices: Iterable[str]) -> str | None:
    """The one entry of `choices` close enough to `received` to suggest, if any."""
    options = sorted(set(choices))
    # A text over 2.4x longer than every choice cannot reach the 0.6 ratio; don't let difflib
    # index a long one only to find that out.
    if not options or len(received) > 2.4 * max(map(len, options)):
        return None
    close = difflib.get_close_matches(received, options, n=1, cutoff=0.6)
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
    """A short, safe rendering of a received value for messages: `'abc' (str)`."""
    return f"{safe_repr(value)} ({type(value).__name__})"
