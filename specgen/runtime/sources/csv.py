"""The `csv` reader: a header row naming the columns, one row per example, read into memory as numbers.

A ragged or non-numeric row, an empty cell and a file that is not UTF-8 are errors naming the line
(line 1 is the header); a feature's columns are one example's values, flattened.
"""

from __future__ import annotations

import csv
import io

import numpy as np

from specgen.diagnostics import did_you_mean
from specgen.runtime.sources.base import DataError, Source, open_regular
from specgen.runtime.sources.context import SourceContext


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
        return f"line {lines[index[0]]}, column '{wanted[name][flat]}'"

    arrays = {name: _column(context, name, refs, [columns[c] for c in refs], rows, lines)
              for name, refs in wanted.items()}
    return context.from_arrays(arrays, where, flat_rows=True)


def _rows(context: SourceContext) -> tuple[list[str], list[list[str]], np.ndarray]:
    """Header, rows (blank lines skipped) and each row's line number; ragged rows are errors."""
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
    reader = csv.reader(io.StringIO(text, newline=""))
    rows, lines = [], []
    try:
        header = [c.strip() for c in next(reader, [])]
        if not header:
            raise context.fail((context.kind,), "the file is empty; a header row naming the columns is expected")
        for fields in reader:
            if not fields or (len(fields) == 1 and not fields[0].strip() and len(header) > 1):
                continue
            if len(fields) != len(header):
                raise context.fail((context.kind,), f"line {reader.line_num} has {len(fields)} fields but the "
                                   f"header has {len(header)}; every row needs one value per column")
            rows.append(fields)
            lines.append(reader.line_num)
    except csv.Error as exc:
        raise context.fail((context.kind,), f"line {reader.line_num}: {exc}") from None
    return header, rows, np.asarray(lines, np.int64)


def _column(context: SourceContext, name: str, refs: list[str], indexes: list[int], rows: list[list[str]],
            lines: np.ndarray) -> np.ndarray:
    """One spec name's columns as float64 [rows, columns]."""
    values = np.empty((len(rows), len(refs)), np.float64)
    for r, fields in enumerate(rows):
        for c, index in enumerate(indexes):
            text = fields[index].strip()
            try:
                values[r, c] = float(text)
            except ValueError:
                what = "is empty" if not text else f"is {text[:30]!r}, not a number"
                raise context.fail(context.loc(name), f"line {lines[r]}, column '{refs[c]}' {what}; features "
                                   "and labels must be numbers (fill in or drop that row)") from None
    return values
