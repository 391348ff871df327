"""Datasets from the spec's `data` section through tf.data, checked before training starts.

npz and csv sources are read into memory (they are meant for small and medium
data); TFRecord files are read once up front to count and check them, then stream.
Nothing a source holds is trusted: a missing or damaged file, a missing array or
column, an array whose shape or dtype does not fit the declared input, a ragged or
non-numeric CSV row, a NaN or infinite value, a class label or embedding id out of
range, and too few examples are each a SpecError at the spec's `data` entry that
names the file, the row (CSV line, array row or TFRecord record) and the column.
There is no NaN policy to choose: a non-finite value is always an error, because
it reaches the weights silently and can survive to an export.

TensorFlow is imported only where a dataset is built, so that `specgen infer` can
use `open_npz` / `npz_array` without paying for it.
"""

from __future__ import annotations

import csv
import io
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from specgen import text
from specgen.diagnostics import SpecError, did_you_mean
from specgen.errors import SpecgenError
from specgen.ir.model import ModelIR
from specgen.spec.load import LoadedSpec

if TYPE_CHECKING:
    import tensorflow as tf

FLOAT_KINDS = "f"
INT_KINDS = "iu"
ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")  # a zip with members; an empty zip
NPY_MAGIC = b"\x93NUMPY"
# What zipfile, zlib and numpy raise on a damaged archive: a cut-off central directory,
# a bad CRC, a member that is not a valid .npy. None of it should reach the user as a traceback.
DAMAGED = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError)
SCAN_CHUNK = 1024  # TFRecord records parsed together while checking a file

# Where an element came from in its file, for messages: (spec name, its index, flat index within the example).
Locate = Callable[[str, tuple[int, ...], int], str]


class DataError(SpecgenError, ValueError):
    """A data file that cannot be used; the message says what is wrong and what to do."""


@dataclass
class Source:
    """One stage's data: a dataset of (features, labels) examples and its size."""

    dataset: tf.data.Dataset
    examples: int


@dataclass(frozen=True)
class Wanted:
    """What the spec expects of one feature or label."""

    shape: tuple[int | None, ...]  # one example's shape
    kind: str  # 'float' or 'int'
    bound: int | None = None  # integers must be in [0, bound)
    why: str = ""  # what sets the bound, for messages


def _shape(shape: tuple[int | None, ...]) -> str:
    return text.shape(shape, unknown="N")


def open_npz(path: Path) -> np.lib.npyio.NpzFile:
    """The archive at `path`, or DataError saying why it is not a readable .npz (never loads pickles)."""
    try:
        with open(path, "rb") as handle:
            magic = handle.read(6)
    except OSError as exc:
        raise DataError(f"cannot read the file: {exc.strerror}") from None
    if magic.startswith(NPY_MAGIC):
        raise DataError("this is a single .npy array, not an .npz archive; save the arrays with "
                        "numpy.savez(path, name=array, ...)")
    if magic[:4] not in ZIP_MAGICS:
        raise DataError("not an .npz file (it does not start with a zip header); save the arrays with numpy.savez")
    try:
        with zipfile.ZipFile(path):  # read the zip directory first: np.load leaks its file handle when that fails
            pass
        return np.load(path, allow_pickle=False)
    except DAMAGED as exc:
        raise DataError(f"damaged or truncated .npz file ({exc}); write it again with numpy.savez") from None


def npz_array(npz: np.lib.npyio.NpzFile, name: str) -> np.ndarray:
    """One array of an open archive, or DataError: object arrays are refused, since loading them runs pickle."""
    try:
        return npz[name]
    except DAMAGED as exc:
        if "allow_pickle" in str(exc):  # numpy's only signal that the member is an object (pickled) array
            raise DataError(f"array '{name}' holds Python objects (dtype object), which specgen does not load "
                            "(unpickling can run code); save it as a numeric array") from None
        raise DataError(f"array '{name}' is damaged or truncated ({exc}); write the file again with "
                        "numpy.savez") from None


def _first(mask: np.ndarray) -> tuple[tuple[int, ...], int]:
    """Index of the first True element of `mask` ([rows, ...]) and its flat index within its example."""
    index = tuple(int(i) for i in np.argwhere(mask)[0])
    flat = int(np.ravel_multi_index(index[1:], mask.shape[1:])) if mask.ndim > 1 else 0
    return index, flat


def _dtype(dtype: np.dtype) -> str:
    """A dtype as a message shows it, with what it holds when numpy's name does not say: <U32 (text)."""
    word = {"U": "text", "S": "bytes", "b": "booleans", "c": "complex numbers", "V": "records", "M": "dates",
            "m": "time spans"}.get(dtype.kind)
    return f"{dtype} ({word})" if word else str(dtype)


def _describe(value: Any) -> str:
    """A value as a message shows it: NaN, infinite, -infinite, 12, 0.5."""
    if isinstance(value, (float, np.floating)):
        if np.isnan(value):
            return "NaN"
        if np.isinf(value):
            return "infinite" if value > 0 else "-infinite"
        return f"{float(value):g}"
    return str(value)


class SourceReader:
    def __init__(self, loaded: LoadedSpec, ir: ModelIR, stage: str):
        assert ir.training is not None
        self.loaded, self.ir, self.stage, self.training = loaded, ir, stage, ir.training
        self.source = ir.training.data[stage]
        self.kind = self.source.kind
        self.path = self.source.path
        self.lines: np.ndarray = np.zeros(0, np.int64)  # CSV: each row's line number in the file

    def fail(self, loc: tuple[str | int, ...], message: str) -> SpecError:
        return SpecError([self.loaded.diagnostic(("data", self.stage, *loc), f"data.{self.stage} ({self.path}): {message}")])

    def loc(self, name: str) -> tuple[str, str]:
        return ("features" if name in self.source.features else "labels", name)

    def expected(self) -> dict[str, Wanted]:
        """Input and label name -> what its examples must look like."""
        wanted = {i.name: Wanted(i.shape[1:], "int" if i.dtype.startswith("int") else "float") for i in self.ir.inputs}
        for node in self.ir.nodes:  # ids past the table would fail inside training (CPU) or read garbage (GPU)
            if node.op == "embedding" and node.inputs[0] in wanted:
                vocab = node.params["vocab_size"]
                wanted[node.inputs[0]] = Wanted(wanted[node.inputs[0]].shape, "int", vocab,
                                                f"embedding '{node.name}' has vocab_size {vocab}")
        for term in self.training.terms:  # each term with data labels (in spec order: the first wins)
            if not term.data_labels or term.labels in wanted or term.output is None or term.labels is None:
                continue
            output = self.ir.node(self.ir.outputs[term.output])
            if term.target == "sparse":  # class indices (specgen/kinds/losses/)
                classes = output.shape[-1]
                wanted[term.labels] = Wanted((), "int", classes, f"output '{term.output}' has {classes} classes")
            else:
                wanted[term.labels] = Wanted(output.shape[1:], "float")
        return wanted

    def minimum(self) -> int:
        """Training batches are full batches only, so training needs one batch; evaluation one example."""
        train = self.training.train
        return (train.batch_size or 1) if self.stage == "train" and train is not None else 1

    def read(self) -> Source:
        if not self.path.is_file():
            raise self.fail((self.kind,), f"no such file; expected a .{self.kind} file relative to the spec's folder")
        if self.kind == "tfrecord":
            source = self._tfrecord()
        else:
            source = self._from_arrays(self._npz() if self.kind == "npz" else self._csv())
        self._enough(source.examples)
        return source

    def _enough(self, examples: int) -> None:
        need = self.minimum()
        if examples == 0:
            raise self.fail((self.kind,), f"the file holds no examples; the {self.stage} stage needs at least {need}")
        if examples < need:
            raise self.fail((self.kind,), f"{examples} examples, fewer than train.batch_size ({need}): training "
                            "uses full batches only, so no update could run; add data or lower train.batch_size")

    def _names(self) -> dict[str, tuple[str, Any]]:
        """Spec name -> (key in the source's mapping, the source's name or columns)."""
        names = {name: ("features", ref) for name, ref in self.source.features.items()}
        names.update({name: ("labels", ref) for name, ref in self.source.labels.items()})
        return names

    # npz

    def _npz(self) -> dict[str, np.ndarray]:
        try:
            npz = open_npz(self.path)
        except DataError as exc:
            raise self.fail((self.kind,), str(exc)) from None
        with npz:
            available = list(npz.files)
            arrays = {}
            for name, (section, ref) in self._names().items():
                if ref not in available:
                    raise self.fail((section, name), f"array '{ref}' not found{did_you_mean(ref, available)} "
                                    f"(arrays: {', '.join(available)})")
                try:
                    arrays[name] = npz_array(npz, ref)
                except DataError as exc:
                    raise self.fail((section, name), str(exc)) from None
        return arrays

    # csv

    def _csv(self) -> dict[str, np.ndarray]:
        """The referenced columns as float64 [rows, columns] per spec name; `self.lines` maps rows to lines."""
        header, rows, lines = self._csv_rows()
        columns: dict[str, int] = {}
        for index, column in enumerate(header):
            columns.setdefault(column, index)
        wanted: dict[str, list[str]] = {}
        for name, (section, ref) in self._names().items():
            refs = [ref] if isinstance(ref, str) else list(ref)
            for column in refs:
                if column not in columns:
                    raise self.fail((section, name), f"column '{column}' not found{did_you_mean(column, header)} "
                                    f"(columns: {', '.join(header)})")
                if header.count(column) > 1:
                    raise self.fail((section, name), f"column '{column}' appears {header.count(column)} times in "
                                    "the header; rename the copies")
            wanted[name] = refs
        self.lines = np.asarray(lines, np.int64)
        return {name: self._csv_column(name, refs, [columns[c] for c in refs], rows) for name, refs in wanted.items()}

    def _csv_rows(self) -> tuple[list[str], list[list[str]], list[int]]:
        """Header, rows (blank lines skipped) and each row's line number; ragged rows are errors."""
        raw = self.path.read_bytes()
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:  # decoded whole, so that the line number is exact
            line = raw[:exc.start].count(b"\n") + 1
            raise self.fail((self.kind,), f"line {line} is not UTF-8 text; save the CSV as UTF-8") from None
        reader = csv.reader(io.StringIO(text, newline=""))
        rows, lines = [], []
        try:
            header = [c.strip() for c in next(reader, [])]
            if not header:
                raise self.fail((self.kind,), "the file is empty; a header row naming the columns is expected")
            for fields in reader:
                if not fields or (len(fields) == 1 and not fields[0].strip() and len(header) > 1):
                    continue
                if len(fields) != len(header):
                    raise self.fail((self.kind,), f"line {reader.line_num} has {len(fields)} fields but the "
                                    f"header has {len(header)}; every row needs one value per column")
                rows.append(fields)
                lines.append(reader.line_num)
        except csv.Error as exc:
            raise self.fail((self.kind,), f"line {reader.line_num}: {exc}") from None
        return header, rows, lines

    def _csv_column(self, name: str, refs: list[str], indexes: list[int], rows: list[list[str]]) -> np.ndarray:
        values = np.empty((len(rows), len(refs)), np.float64)
        for r, fields in enumerate(rows):
            for c, index in enumerate(indexes):
                text = fields[index].strip()
                try:
                    values[r, c] = float(text)
                except ValueError:
                    what = "is empty" if not text else f"is {text[:30]!r}, not a number"
                    raise self.fail(self.loc(name), f"line {self.lines[r]}, column '{refs[c]}' {what}; features "
                                    "and labels must be numbers (fill in or drop that row)") from None
        return values

    # checks shared by every format

    def where(self, name: str, index: tuple[int, ...], flat: int) -> str:
        """An element's place in the file, as the user would look for it: CSV line and column, array row."""
        ref = self._names()[name][1]
        if self.kind == "csv":
            refs = [ref] if isinstance(ref, str) else list(ref)
            return f"line {self.lines[index[0]]}, column '{refs[flat]}'"
        return f"row {index[0]} of array '{ref}'" + (f" (element {list(index)})" if len(index) > 1 else "")

    def check_values(self, name: str, raw: np.ndarray, want: Wanted, locate: Locate) -> np.ndarray:
        """`raw` converted to what the model takes (float32 or int64), or a SpecError at the first bad value."""
        if want.kind == "int":
            return self._integers(name, raw, want, locate)
        if raw.dtype.kind not in FLOAT_KINDS + INT_KINDS:
            raise self.fail(self.loc(name), f"'{name}' has dtype {_dtype(raw.dtype)} but numbers are expected")
        with np.errstate(over="ignore"):  # an overflow becomes inf, which _finite reports with the value
            values = raw.astype(np.float32)
        self._finite(name, raw, values, locate)
        return values

    def _finite(self, name: str, raw: np.ndarray, values: np.ndarray, locate: Locate) -> None:
        """NaN and infinities, including finite float64 values that float32 cannot hold."""
        bad = ~np.isfinite(values)
        if not bad.any():
            return
        index, flat = _first(bad)
        value = raw[index]
        what = f"{float(value):g}, beyond float32's range" if np.isfinite(value) else _describe(value)
        more = f" (and {int(bad.sum()) - 1} more non-finite values)" if bad.sum() > 1 else ""
        raise self.fail(self.loc(name), f"'{name}' is {what} at {locate(name, index, flat)}{more}; features and labels "
                        "must be finite numbers (fill in or drop those rows)")

    def _integers(self, name: str, raw: np.ndarray, want: Wanted, locate: Locate) -> np.ndarray:
        if raw.dtype.kind == FLOAT_KINDS:
            self._finite(name, raw, raw, locate)
            fractional = raw != np.round(raw)
            if fractional.any():
                index, flat = _first(fractional)
                raise self.fail(self.loc(name), f"'{name}' is {_describe(raw[index])} at {locate(name, index, flat)}; "
                                "integers are expected")
        elif raw.dtype.kind not in INT_KINDS:
            raise self.fail(self.loc(name), f"'{name}' has dtype {_dtype(raw.dtype)} but integers are expected")
        if want.bound is not None:
            outside = (raw < 0) | (raw >= want.bound)
            if outside.any():
                index, flat = _first(outside)
                raise self.fail(self.loc(name), f"'{name}' is {_describe(raw[index].item())} at "
                                f"{locate(name, index, flat)}, but {want.why}: values must be integers in "
                                f"[0, {want.bound})")
        return raw.astype(np.int64)

    # in-memory formats

    def _from_arrays(self, arrays: dict[str, np.ndarray]) -> Source:
        import tensorflow as tf

        wanted, counts = self.expected(), {}
        for name, array in arrays.items():
            if name not in wanted:
                continue
            array = self._fit(name, array, wanted[name].shape)
            arrays[name] = self.check_values(name, array, wanted[name], self.where)
            counts[name] = len(array)
        if len(set(counts.values())) > 1:
            shown = ", ".join(f"'{n}' {c}" for n, c in counts.items())
            raise self.fail((self.kind,), f"features and labels have different numbers of examples ({shown}); "
                            "each needs one row per example")
        inputs = {i.name: i.dtype for i in self.ir.inputs}
        features = {n: a.astype(inputs[n]) for n, a in arrays.items() if n in inputs}
        labels = {n: a for n, a in arrays.items() if n not in inputs}
        examples = next(iter(counts.values()), 0)
        return Source(tf.data.Dataset.from_tensor_slices((features, labels)), examples)

    def _fit(self, name: str, array: np.ndarray, shape: tuple[int | None, ...]) -> np.ndarray:
        """`array` shaped [N, *shape], or a SpecError naming both shapes."""
        if array.ndim == 0:
            raise self.fail(self.loc(name), f"'{name}' is a single value (a 0-d array); one row per example is expected")
        example = tuple(array.shape[1:])
        if example == (1,) and shape == ():
            array, example = array.reshape(-1), ()
        if self.kind == "csv" and np.prod(example, dtype=int) == np.prod(shape, dtype=int):
            array, example = array.reshape((len(array), *shape)), tuple(shape)
        if example != tuple(shape):
            raise self.fail(self.loc(name), f"'{name}' has shape {_shape((None, *example))} but the spec declares "
                            f"{_shape((None, *shape))}")
        return array

    # TFRecord

    def _tfrecord(self) -> Source:
        import tensorflow as tf

        wanted, spec, names = self.expected(), {}, self._names()
        for name, (_, ref) in names.items():
            want = wanted.get(name, Wanted((), "float"))
            spec[ref] = tf.io.FixedLenFeature(list(want.shape), tf.int64 if want.kind == "int" else tf.float32)
        inputs = {i.name: i.dtype for i in self.ir.inputs}

        def parse(record: tf.Tensor) -> tuple[dict[str, tf.Tensor], dict[str, tf.Tensor]]:
            parsed = tf.io.parse_single_example(record, spec)
            features = {n: tf.cast(parsed[ref], inputs[n]) for n, (_, ref) in names.items() if n in inputs}
            labels = {n: parsed[ref] for n, (_, ref) in names.items() if n not in inputs}
            return features, labels

        dataset = tf.data.TFRecordDataset(str(self.path))
        count = self._scan_records(dataset, spec, wanted)
        return Source(dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE), count)

    def _scan_records(self, dataset: tf.data.Dataset, spec: dict[str, Any], wanted: dict[str, Wanted]) -> int:
        """Read every record once, parse and check it in chunks; the number of records.

        A full pass costs one epoch's reading, and buys what a stream cannot: a bad value or
        a bad record is reported with its record number before the first step, not mid-run.
        """
        import tensorflow as tf

        count, chunk = 0, []
        try:
            for record in dataset:
                chunk.append(record.numpy())
                if len(chunk) == SCAN_CHUNK:
                    count = self._check_chunk(chunk, count, spec, wanted)
                    chunk = []
        except tf.errors.DataLossError as exc:
            raise self.fail((self.kind,), f"cannot read record {count + len(chunk)}: {exc.message.splitlines()[0]}; "
                            "the file is damaged or not a TFRecord file") from None
        return self._check_chunk(chunk, count, spec, wanted) if chunk else count

    def _check_chunk(self, chunk: list[bytes], start: int, spec: dict[str, Any], wanted: dict[str, Wanted]) -> int:
        import tensorflow as tf

        try:
            parsed = tf.io.parse_example(tf.constant(chunk), spec)
        except tf.errors.InvalidArgumentError:
            for offset, record in enumerate(chunk):  # find the record, for the message
                try:
                    tf.io.parse_single_example(record, spec)
                except tf.errors.InvalidArgumentError as exc:
                    raise self.fail((self.kind,), f"cannot parse record {start + offset}: "
                                    f"{exc.message.splitlines()[0]}") from None
            raise self.fail((self.kind,), f"cannot parse records {start} to {start + len(chunk) - 1}") from None
        for name, (_, ref) in self._names().items():
            if name in wanted:
                self.check_values(name, parsed[ref].numpy(), wanted[name],
                                  lambda n, index, flat, ref=ref: f"record {start + index[0]}, key '{ref}'"
                                  + (f" (element {list(index[1:])})" if len(index) > 1 else ""))
        return start + len(chunk)


def read_stage(loaded: LoadedSpec, ir: ModelIR, stage: str) -> Source | None:
    """One stage's checked data; None when the spec has no source for it. `loaded` places the errors."""
    if ir.training is None or stage not in ir.training.data:
        return None
    return SourceReader(loaded, ir, stage).read()


def training_batches(source: Source, batch: int, seed: int, buffer: int) -> tf.data.Dataset:
    """Shuffled with the spec's seed, full batches only, repeated; the iterator is checkpointed."""
    return (source.dataset.shuffle(min(buffer, max(source.examples, 1)), seed=seed, reshuffle_each_iteration=True)
            .batch(batch, drop_remainder=True).repeat().prefetch(2))


def eval_batches(source: Source, batch: int) -> tf.data.Dataset:
    return source.dataset.batch(batch).prefetch(2)
