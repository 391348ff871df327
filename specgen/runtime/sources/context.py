"""`SourceContext`: what a reader knows about its stage, and the checks every kind applies to values.

Nothing a source holds is trusted: an array whose shape or dtype does not fit the declared input, a NaN
or infinite value, a class label or embedding id out of range, and too few examples are each a SpecError
at the spec's `data` entry that names the file and where the value is. There is no NaN policy to
choose: a non-finite value is always an error, because it reaches the weights silently and can survive
to an export.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from specgen.diagnostics import SpecError
from specgen.ir.model import Input, ModelIR
from specgen.kinds.ops import op_def
from specgen.kinds.sources import REGISTRY
from specgen.runtime.sources import sizes
from specgen.runtime.sources.base import (
    FLOAT_KINDS,
    INT_KINDS,
    MISSING,
    REGULAR,
    Locate,
    Source,
    Wanted,
    describe,
    dtype_text,
    file_kind,
    first,
    lossy_cast,
    shape_text,
    source_text,
)
from specgen.spec.load import LoadedSpec


def _wanted(node_input: Input) -> Wanted:
    if node_input.dtype == "uint8":  # raw pixels: an integer 0..255 or a data error, never wrapped or rounded
        return Wanted(node_input.shape[1:], "int", 256, f"input '{node_input.name}' is declared uint8 (raw pixels)")
    if node_input.dtype.startswith("int"):  # int32 or int64: every value must fit it (never wrapped)
        return Wanted(node_input.shape[1:], "int", dtype=node_input.dtype)
    return Wanted(node_input.shape[1:], "float")


def _cropped(loaded: LoadedSpec, features: Any) -> str | None:
    """The image input whose height and width a random_crop of data.train sets (None without one): its
    arrays may hold images of another size, as an images source may decode them; the crop is checked
    against them before the first step (train), or Keras' inference of it resizes them (eval), in
    runtime/augment/source.py. The entries acting at eval are exactly those that set the size."""
    from specgen.kinds.augment import at_eval, image_inputs

    if not at_eval(getattr(loaded.spec.data.train, "augment", None) if loaded.spec.data else None):
        return None
    images = image_inputs(features, loaded.spec.inputs)
    return images[0] if len(images) == 1 else None  # validate: exactly one among train's features


class SourceContext:
    """One stage's source as its reader sees it; `kind` is also the spec key its errors point at."""

    def __init__(self, loaded: LoadedSpec, ir: ModelIR, stage: str):
        assert ir.training is not None
        self.loaded, self.ir, self.stage, self.training = loaded, ir, stage, ir.training
        self.source = ir.training.data[stage]
        self.kind = self.source.kind
        self.path = self.source.path  # a list's first entry: the readers of one file open it
        self.shown = source_text(loaded, self.source)  # the source as messages name it (a list: the list)
        self.cropped = _cropped(loaded, self.source.features)

    def fail(self, loc: tuple[str | int, ...], message: str) -> SpecError:
        return SpecError([self.loaded.diagnostic(("data", self.stage, *loc), f"data.{self.stage} ({self.shown}): {message}")])

    def loc(self, name: str) -> tuple[str, str]:
        return ("features" if name in self.source.features else "labels", name)

    def require_file(self) -> None:
        """A reader of one file calls this first: a missing file, and a path that is not a regular file (a FIFO,
        which would block the read; a device such as /dev/zero, which never ends; a folder), are named before
        anything is opened."""
        what = file_kind(self.path)
        if what == MISSING:
            raise self.fail((self.kind,), f"no such file; expected {REGISTRY[self.kind].expects} relative to the "
                            "spec's folder")
        if what != REGULAR:
            raise self.fail((self.kind,), f"the path is {what}, not a regular file; expected "
                            f"{REGISTRY[self.kind].expects}")

    def names(self) -> dict[str, tuple[str, Any]]:
        """Spec name -> (key in the source's mapping, the source's name or columns)."""
        names = {name: ("features", ref) for name, ref in self.source.features.items()}
        names.update({name: ("labels", ref) for name, ref in self.source.labels.items()})
        return names

    def expected(self) -> dict[str, Wanted]:
        """Input and label name -> what its examples must look like."""
        wanted = {i.name: _wanted(i) for i in self.ir.inputs}
        for node in self.ir.nodes:  # ids past the table would fail inside training (CPU) or read garbage (GPU)
            op = op_def(node.op)
            if op.ids_checked and node.inputs[0] in wanted:  # an embedding's ids (OpDef.id_limit: vocab_size)
                vocab = node.params[op.id_limit]
                wanted[node.inputs[0]] = replace(wanted[node.inputs[0]], kind="int", bound=vocab,
                                                 why=f"{node.op} '{node.name}' has {op.id_limit} {vocab}")
        for term in self.training.terms:  # each term with data labels (in spec order: the first wins)
            if not term.data_labels or term.labels in wanted or term.output is None or term.labels is None:
                continue
            output = self.ir.node(self.ir.outputs[term.output])
            if term.target == "sparse":  # class indices (specgen/kinds/losses/)
                classes = output.shape[-1]
                if isinstance(classes, int):
                    wanted[term.labels] = Wanted((), "int", classes, f"output '{term.output}' has {classes} classes")
                else:  # a named dynamic class count: known only at run time, so no range to check the indices against
                    wanted[term.labels] = Wanted((), "int")
            else:
                wanted[term.labels] = Wanted(output.shape[1:], "float")
        return wanted

    def minimum(self) -> int:
        """Training batches are full batches only, so training needs one batch; evaluation one example."""
        train = self.training.train
        return (train.batch_size or 1) if self.stage == "train" and train is not None else 1

    def enough(self, examples: int) -> None:
        need = self.minimum()
        if examples == 0:
            raise self.fail((self.kind,), f"the file holds no examples; the {self.stage} stage needs at least {need}")
        if examples < need:
            raise self.fail((self.kind,), f"{examples} examples, fewer than train.batch_size ({need}): training "
                            "uses full batches only, so no update could run; add data or lower train.batch_size")

    def refuse_named_dims(self, name: str, shape: tuple[int | str | None, ...]) -> None:
        """An input with a named dynamic dimension, read by a kind that cannot fill one."""
        open_dims = [d for d in shape if isinstance(d, str)]  # named dynamic dimensions (kinds/dims.py)
        if open_dims and not REGISTRY[self.kind].fills_named_dims:
            fillers = " and ".join(k for k, s in REGISTRY.items() if s.fills_named_dims)
            raise self.fail(self.loc(name), f"'{name}' has the named dynamic dimension '{open_dims[0]}', which only "
                            f"{fillers} data sources fill (one length per file: pad the arrays to it)")

    def check_values(self, name: str, raw: np.ndarray, want: Wanted, locate: Locate) -> np.ndarray:
        """`raw` as the model takes it (float32 or int64; uint8 inputs are cast after), or a SpecError at the first bad one."""
        if want.kind == "int":
            return self._integers(name, raw, want, locate)
        if raw.dtype.kind not in FLOAT_KINDS + INT_KINDS:
            raise self.fail(self.loc(name), f"'{name}' has dtype {dtype_text(raw.dtype)} but numbers are expected")
        with np.errstate(over="ignore"):  # an overflow becomes inf, which _finite reports with the value
            values = raw.astype(np.float32)
        self._finite(name, raw, values, locate)
        lost = lossy_cast(raw, np.float32)
        if lost is not None:  # an id or a count past 2**24 would silently become another number
            flat = int(np.ravel_multi_index(lost[1:], raw.shape[1:])) if raw.ndim > 1 else 0
            raise self.fail(self.loc(name), f"'{name}' is {raw[lost]} at {locate(name, lost, flat)}, which float32 "
                            f"cannot hold exactly (it would be {int(values[lost])}); a float input takes integers "
                            "up to 16777216 in magnitude exactly: scale them, or store them as floats yourself")
        return values

    def _finite(self, name: str, raw: np.ndarray, values: np.ndarray, locate: Locate) -> None:
        """NaN and infinities, including finite float64 values that float32 cannot hold."""
        bad = ~np.isfinite(values)
        if not bad.any():
            return
        index, flat = first(bad)
        value = raw[index]
        what = f"{float(value):g}, beyond float32's range" if np.isfinite(value) else describe(value)
        more = f" (and {int(bad.sum()) - 1} more non-finite values)" if bad.sum() > 1 else ""
        raise self.fail(self.loc(name), f"'{name}' is {what} at {locate(name, index, flat)}{more}; features and labels "
                        "must be finite numbers (fill in or drop those rows)")

    def _integers(self, name: str, raw: np.ndarray, want: Wanted, locate: Locate) -> np.ndarray:
        """`raw` as int64, every value an integer that fits `want.dtype` (and its bound) exactly; else a SpecError
        at the first that is not: a cast would wrap it (2**32 -> 0 in int32) into a valid-looking index."""
        if raw.dtype.kind == FLOAT_KINDS:
            self._finite(name, raw, raw, locate)
            fractional = raw != np.round(raw)
            if fractional.any():
                index, flat = first(fractional)
                raise self.fail(self.loc(name), f"'{name}' is {describe(raw[index])} at {locate(name, index, flat)}; "
                                "integers are expected")
        elif raw.dtype.kind not in INT_KINDS:
            raise self.fail(self.loc(name), f"'{name}' has dtype {dtype_text(raw.dtype)} but integers are expected")
        if want.bound is not None:
            outside = (raw < 0) | (raw >= want.bound)
            if outside.any():
                index, flat = first(outside)
                raise self.fail(self.loc(name), f"'{name}' is {describe(raw[index].item())} at "
                                f"{locate(name, index, flat)}, but {want.why}: values must be integers in "
                                f"[0, {want.bound})")
        low, high = self.integer_range(want)
        wide = raw.astype(np.float64) if raw.dtype.kind == FLOAT_KINDS else raw  # float16 cannot hold the bounds
        outside = (wide < low) | (wide > high)
        if outside.any():
            index, flat = first(outside)
            raise self.out_of_range(name, describe(raw[index].item()), locate(name, index, flat), want)
        if raw.dtype.kind == FLOAT_KINDS:
            self._exact(name, raw, locate)
        return raw.astype(np.int64)

    @staticmethod
    def integer_range(want: Wanted) -> tuple[int, int]:
        """The smallest and largest value `want.dtype` holds."""
        info = np.iinfo(want.dtype)
        return int(info.min), int(info.max)

    def out_of_range(self, name: str, value: str, where: str, want: Wanted) -> SpecError:
        """A value that does not fit the integer dtype it is read as (a cast would wrap it silently)."""
        low, high = self.integer_range(want)
        is_input = any(i.name == name for i in self.ir.inputs)
        who = f"input '{name}' is declared {want.dtype}" if is_input else f"labels are read as {want.dtype}"
        wider = ", or declare the input int64" if is_input and want.dtype != "int64" else ""
        return self.fail(self.loc(name), f"'{name}' is {value} at {where}, outside {want.dtype}'s range [{low}, "
                         f"{high}]: {who}, and a value that does not fit is never wrapped; fix the value{wider}")

    def _exact(self, name: str, raw: np.ndarray, locate: Locate) -> None:
        """Integers read through a float array: beyond 2**(mantissa bits + 1) (2**53 for float64, 2**24 for float32)
        a float no longer holds every integer, so the one it stands for is not known (2**53 + 1 reads as 2**53)."""
        limit = 2 ** (np.finfo(raw.dtype).nmant + 1)
        beyond = np.abs(raw) > limit
        if beyond.any():
            index, flat = first(beyond)
            raise self.fail(self.loc(name), f"'{name}' is {describe(raw[index])} at {locate(name, index, flat)}, "
                            f"beyond 2**{np.finfo(raw.dtype).nmant + 1} ({limit:,}) in a {raw.dtype} array, where a "
                            "float no longer holds every integer, so the integer it stood for is not known; store "
                            "integers as integers (an integer array; CSV digits without a '.' or exponent)")

    def from_arrays(self, arrays: dict[str, np.ndarray], locate: Locate, flat_rows: bool = False) -> Source:
        """A Source from in-memory arrays, one row per example, each checked against what the spec expects.

        `flat_rows`: each row is the example's values flattened (CSV columns), reshaped to the input's shape.
        """
        wanted, counts = self.expected(), {}
        for name, array in arrays.items():
            # A label no loss term reads is still data the spec names: numbers, one row per example (it would
            # otherwise reach tf.data unchecked, where another length is a traceback).
            want = wanted.get(name) or Wanted(tuple(array.shape[1:]) if array.ndim else (), "float")
            array = self._fit(name, array, want.shape, flat_rows)
            if any(i.name == name for i in self.ir.inputs):  # one size per file on a named axis: the model must take it
                sizes.check(self, name, tuple(array.shape[1:]), "its examples are")
            arrays[name] = self.check_values(name, array, want, locate)
            counts[name] = len(array)
        if len(set(counts.values())) > 1:
            shown = ", ".join(f"'{n}' {c}" for n, c in counts.items())
            raise self.fail((self.kind,), f"features and labels have different numbers of examples ({shown}); "
                            "each needs one row per example")
        inputs = {i.name: i.dtype for i in self.ir.inputs}
        features = {n: a.astype(inputs[n]) for n, a in arrays.items() if n in inputs}
        labels = {n: a for n, a in arrays.items() if n not in inputs}
        examples = next(iter(counts.values()), 0)
        import tensorflow as tf  # after the checks: a bad array is reported before TensorFlow starts

        return Source(tf.data.Dataset.from_tensor_slices((features, labels)), examples)

    def _fit(self, name: str, array: np.ndarray, shape: tuple[int | str | None, ...], flat_rows: bool) -> np.ndarray:
        """`array` shaped [N, *shape], or a SpecError naming both shapes."""
        if array.ndim == 0:
            raise self.fail(self.loc(name), f"'{name}' is a single value (a 0-d array); one row per example is expected")
        example = tuple(array.shape[1:])
        if example == (1,) and shape == ():
            array, example = array.reshape(-1), ()
        self.refuse_named_dims(name, shape)  # a CSV row has no length of its own
        fixed = tuple(d for d in shape if isinstance(d, int))  # all of it where flat_rows (named dims refused above)
        if flat_rows and len(fixed) == len(shape) and np.prod(example, dtype=int) == np.prod(fixed, dtype=int):
            array, example = array.reshape((len(array), *fixed)), fixed
        if name == self.cropped and not flat_rows:
            return self._fit_cropped(name, array, shape)
        if len(example) != len(shape) or any(d != e for d, e in zip(shape, example, strict=True) if not isinstance(d, str)):
            raise self.fail(self.loc(name), f"'{name}' has shape {shape_text((None, *example))} but the spec declares "
                            f"{shape_text((None, *shape))}")
        return array

    def _fit_cropped(self, name: str, array: np.ndarray, shape: tuple[int | str | None, ...]) -> np.ndarray:
        """Images of any height and width of at least 1 pixel, with the input's channels."""
        example = tuple(array.shape[1:])
        if len(example) != 3 or example[2] != shape[2] or min(example[:2]) < 1:
            raise self.fail(self.loc(name), f"'{name}' has shape {shape_text((None, *example))}; expected images "
                            f"[N, height, width, {shape[2]}] (any height and width of at least 1: data.train's "
                            f"random_crop makes them {shape_text(shape[:2])})")
        return array
