"""The `csv` reader: a header row naming the columns, one row per example, read into memory as numbers.

A ragged or non-numeric row, an empty cell and a file that is not UTF-8 are errors naming the line
(line 1 is the header; a record whose quoted field runs over several lines is named by the line it starts on,
and the message says how far it runs); a feature's columns are one example's values, flattened.

Cells are numbers as numpy and TensorFlow read them, no more: ASCII digits with an optional sign, decimal
point and exponent, and the words nan and inf(inity) (refused after, as every non-finite value is). Python's
float() alone would also take '1_000' and other scripts' digits, which those readers refuse. A column read as
an integer input or label is parsed as integers, exactly (float64 would turn 2**53 + 1 into 2**53), unless a
cell holds a decimal point or an exponent (`3.0`): then it is read as floats and each must be an integer
that float64 holds exactly (context.py).
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from specgen.diagnostics import did_you_mean
from specgen.runtime.sources.base import DataError, Source, Wanted, open_regular
from specgen.runtime.sources.context import SourceContext

INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)
NUMBER = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?|inf|infinity|nan)", re.ASCII | re.IGNORECASE)


@dataclass(frozen=True)
class Lines:
    """Each row's first and last line in the file (they differ where a quoted field holds line breaks), and the
    file's last line (a quote never closed runs to it)."""

    starts: np.ndarray
    ends: np.ndarray
    last: int

    def of(self, row: int) -> str:
        """Where row `row` is, as messages say it: `line 6`, with how far its record runs when that is further."""
        return f"line {self.starts[row]}{_runs(int(self.starts[row]), int(self.ends[row]), self.last)}"


def _runs(start: int, end: int, last: int) -> str:
    """What a record over several lines adds to its line: usually a stray '"' that opened a quoted field."""
    if end == start:
        return ""
    if end >= last:
        return (f" (a quoted field opened on line {start} runs to the end of the file, line {end}: is a '\"' "
                "stray or never closed?)")
    return f" (its record runs to line {end}: a quoted field opened on line {start} holds line breaks; is a '\"' stray?)"


def read(context: SourceContext) -> Source:
    context.require_file()
    header, rows, lines = _rows(context)
    columns: dict[str, int] = {}
    for index, column in enumerate(header):
        columns.setdefault(column, index)
    wanted: dict[str, list[str]] = {}
    for name, (section, ref) in context.names().items():
        refs = [ref] if isinstance(ref, str) else list(ref)
        for column in refs:
            if column not in columns:
                raise context.fail((section, name), f"column '{column}' not found{did_you_mean(column, header)} "
                                   f"(columns: {', '.join(header)})")
            if header.count(column) > 1:
                raise context.fail((section, name), f"column '{column}' appears {header.count(column)} times in "
                                   "the header; rename the copies")
        wanted[name] = refs

    def where(name: str, index: tuple[int, ...], flat: int) -> str:
        """An element's place in the file, as the user would look for it: CSV line and column."""
        return f"{lines.of(index[0])}, column '{wanted[name][flat]}'"

    expected = context.expected()
    arrays = {name: _column(context, name, refs, [[f[columns[c]].strip() for c in refs] for f in rows], lines,
                            expected.get(name)) for name, refs in wanted.items()}
    return context.from_arrays(arrays, where, flat_rows=True)


def _rows(context: SourceContext) -> tuple[list[str], list[list[str]], Lines]:
    """Header, rows (blank lines skipped) and where each row is; ragged rows are errors."""
    try:
        with open_regular(context.path) as file:  # checked again as opened: never a FIFO's blocking read
            raw = file.read()
    except DataError as exc:
        raise context.fail((context.kind,), str(exc)) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:  # decoded whole, so that the line number is exact
        line = raw[:exc.start].count(b"\n") + 1
        raise context.fail((context.kind,), f"line {line} is not UTF-8 text; save the CSV as UTF-8") from None
    limit = csv.field_size_limit()
    # No field is longer than the file, which is read whole anyway: the csv module's default limit (128 KiB)
    # would refuse a file for a long note in a column the spec does not even read.
    csv.field_size_limit(max(limit, len(text) + 1))
    try:
        return _records(context, text)
    finally:
        csv.field_size_limit(limit)


def _records(context: SourceContext, text: str) -> tuple[list[str], list[list[str]], Lines]:
    reader = csv.reader(io.StringIO(text, newline=""))
    last = text.count("\n") + (0 if text.endswith("\n") else 1)
    rows, starts, ends = [], [], []
    try:
        header = [c.strip() for c in next(reader, [])]
        if not header:
            raise context.fail((context.kind,), "the file is empty; a header row naming the columns is expected")
        start = reader.line_num + 1  # the line the next record starts on (line_num is the last one read)
        for fields in reader:
            if fields and not (len(fields) == 1 and not fields[0].strip() and len(header) > 1):
                if len(fields) != len(header):
                    raise context.fail((context.kind,), f"line {start} has {len(fields)} fields but the header has "
                                       f"{len(header)}; every row needs one value per column"
                                       f"{_runs(start, reader.line_num, last)}")
                rows.append(fields)
                starts.append(start)
                ends.append(reader.line_num)
            start = reader.line_num + 1
    except csv.Error as exc:
        raise context.fail((context.kind,), f"line {reader.line_num}: {exc}") from None
    return header, rows, Lines(np.asarray(starts, np.int64), np.asarray(ends, np.int64), last)


def _column(context: SourceContext, name: str, refs: list[str], cells: list[list[str]], lines: Lines,
            want: Wanted | None) -> np.ndarray:
    """One spec name's columns as [rows, columns]: int64 where the spec reads integers and every cell is one,
    float64 otherwise (whose cast to float32 rounds each decimal once: _round_once)."""
    if want is not None and want.kind == "int" and all(INTEGER.fullmatch(t) for row in cells for t in row):
        return _integers(context, name, refs, cells, lines, want)
    values = np.empty((len(cells), len(refs)), np.float64)
    for r, row in enumerate(cells):
        for c, text in enumerate(row):
            if not NUMBER.fullmatch(text):
                what = "is empty" if not text else f"is {text[:30]!r}, not a number{_hint(text)}"
                raise context.fail(context.loc(name), f"{lines.of(r)}, column '{refs[c]}' {what}; features and "
                                   "labels must be numbers (fill in or drop that row)")
            values[r, c] = float(text)
    if want is None or want.kind != "int":
        _round_once(values, cells)
    return values


def _round_once(values: np.ndarray, cells: list[list[str]]) -> None:
    """Make the float32 cast of `values` (float64, parsed from `cells`) round each cell's decimal once, as
    TensorFlow's CSV reader (tf.io.decode_csv) and strtof do, in place.

    float() rounds the decimal to float64 and the cast rounds that again to float32. The two roundings differ from
    one only where float64 lands exactly on a midpoint between two float32 values while the decimal does not (a cell
    with more digits than float64 keeps, such as 1.0000000596046447753906250001): the cast then breaks the tie to
    even, which may be the wrong side. Those cells, and only those, are compared exactly (fractions.Fraction) and
    moved one float64 step to the decimal's side of the midpoint, so that the cast rounds as a single rounding
    would. A value exactly on the midpoint stays (ties to even, as TensorFlow)."""
    with np.errstate(over="ignore", invalid="ignore"):
        narrow = values.astype(np.float32)
        back = narrow.astype(np.float64)
        toward = np.where(values > back, np.float32(np.inf), np.float32(-np.inf)).astype(np.float32)
        other = np.nextafter(narrow, toward).astype(np.float64)
        tie = np.isfinite(back) & np.isfinite(other) & (values != back) & (values == (back + other) / 2)
    for r, c in zip(*np.nonzero(tie), strict=True):
        exact, midpoint = Fraction(cells[r][c]), Fraction(float(values[r, c]))
        if exact != midpoint:
            values[r, c] = np.nextafter(values[r, c], np.inf if exact > midpoint else -np.inf)


def _integers(context: SourceContext, name: str, refs: list[str], cells: list[list[str]], lines: Lines,
              want: Wanted) -> np.ndarray:
    """Integer cells parsed exactly; one beyond int64 (the array's type) is refused here, where the text is known,
    and a narrower dtype's range is checked by the context (context.py)."""
    low, high = context.integer_range(replace(want, dtype="int64"))
    values = np.empty((len(cells), len(refs)), np.int64)
    for r, row in enumerate(cells):
        for c, text in enumerate(row):
            # int64 has 19 digits: a longer one is out of range, and never handed to int() (which refuses
            # over 4,300 digits)
            value = int(text) if len(text.lstrip("+-").lstrip("0")) <= 19 else high + 1
            if not low <= value <= high:
                shown = text if len(text) <= 30 else f"{text[:27]}..."
                raise context.out_of_range(name, shown, f"{lines.of(r)}, column '{refs[c]}'", want)
            values[r, c] = value
    return values


def _hint(text: str) -> str:
    """Why a cell that looks like a number to Python is not one here."""
    if "_" in text or not text.isascii():
        return " (ASCII digits with an optional sign, '.' and exponent: no '_' separators, no other scripts' digits)"
    return ""
