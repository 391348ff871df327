"""Datasets from the spec's `data` section through tf.data, checked before training starts.

npz and csv sources are read into memory (they are meant for small and medium
data); TFRecord files stream. A missing file, array or column, or an array whose
shape or dtype does not fit the declared input, is a SpecError naming the source,
the array and both shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from specgen.diagnostics import SpecError, did_you_mean
from specgen.ir.model import ModelIR
from specgen.spec.load import LoadedSpec

FLOAT_KINDS = "f"
INT_KINDS = "iu"


@dataclass
class Source:
    """One stage's data: a dataset of (features, labels) examples and its size."""

    dataset: tf.data.Dataset
    examples: int


def _shape(shape: tuple[int | None, ...]) -> str:
    return "[" + ", ".join("N" if d is None else str(d) for d in shape) + "]"


class SourceReader:
    def __init__(self, loaded: LoadedSpec, ir: ModelIR, stage: str):
        self.loaded, self.ir, self.stage = loaded, ir, stage
        self.source = getattr(loaded.spec.data, stage)
        self.kind = next(k for k in ("npz", "csv", "tfrecord") if hasattr(self.source, k))
        self.path = loaded.folder / getattr(self.source, self.kind)

    def fail(self, loc: tuple[str | int, ...], message: str) -> SpecError:
        return SpecError([self.loaded.diagnostic(("data", self.stage, *loc), f"data.{self.stage} ({self.path}): {message}")])

    def expected(self) -> dict[str, tuple[tuple[int | None, ...], str]]:
        """Input and label name -> (example shape, dtype kind 'float'/'int')."""
        wanted = {i.name: (i.shape[1:], "int" if i.dtype.startswith("int") else "float") for i in self.ir.inputs}
        loss = self.loaded.spec.loss
        if loss is not None:
            output = self.ir.node(self.ir.outputs[getattr(loss, "logits", None) or loss.predictions])
            if loss.kind == "sparse_softmax_cross_entropy":
                wanted[loss.labels] = ((), "int")
            else:
                wanted[loss.labels] = (output.shape[1:], "float")
        return wanted

    def read(self) -> Source:
        if not self.path.is_file():
            raise self.fail((self.kind,), f"no such file; expected a .{self.kind} file relative to the spec's folder")
        if self.kind == "tfrecord":
            return self._tfrecord()
        arrays = self._npz() if self.kind == "npz" else self._csv()
        return self._from_arrays(arrays)

    def _names(self) -> dict[str, tuple[str, Any]]:
        """Spec name -> (key in the source's mapping, the source's name or columns)."""
        names = {name: ("features", ref) for name, ref in self.source.features.items()}
        names.update({name: ("labels", ref) for name, ref in self.source.labels.items()})
        return names

    def _npz(self) -> dict[str, np.ndarray]:
        with np.load(self.path, allow_pickle=False) as npz:
            available = list(npz.files)
            arrays = {}
            for name, (section, ref) in self._names().items():
                if ref not in available:
                    raise self.fail((section, name), f"array '{ref}' not found{did_you_mean(ref, available)} "
                                    f"(arrays: {', '.join(available)})")
                arrays[name] = npz[ref]
        return arrays

    def _csv(self) -> dict[str, np.ndarray]:
        table = np.genfromtxt(self.path, delimiter=",", names=True, dtype=np.float64, encoding="utf-8")
        columns = list(table.dtype.names or ())
        arrays = {}
        for name, (section, ref) in self._names().items():
            refs = [ref] if isinstance(ref, str) else list(ref)
            for column in refs:
                if column not in columns:
                    raise self.fail((section, name), f"column '{column}' not found{did_you_mean(column, columns)} "
                                    f"(columns: {', '.join(columns)})")
            arrays[name] = np.stack([np.atleast_1d(table[c]) for c in refs], axis=-1)
        return arrays

    def _from_arrays(self, arrays: dict[str, np.ndarray]) -> Source:
        wanted, counts = self.expected(), set()
        for name, array in arrays.items():
            if name not in wanted:
                continue
            shape, kind = wanted[name]
            array = self._fit(name, array, shape, kind)
            arrays[name] = array
            counts.add(len(array))
        if len(counts) > 1:
            raise self.fail((), f"arrays have different numbers of examples: {sorted(counts)}")
        inputs = {i.name: i.dtype for i in self.ir.inputs}
        features = {n: a.astype(inputs[n]) for n, a in arrays.items() if n in inputs}
        labels = {n: a for n, a in arrays.items() if n not in inputs}
        return Source(tf.data.Dataset.from_tensor_slices((features, labels)), counts.pop() if counts else 0)

    def _fit(self, name: str, array: np.ndarray, shape: tuple[int | None, ...], kind: str) -> np.ndarray:
        section = "features" if name in self.source.features else "labels"
        example = tuple(array.shape[1:])
        if kind == "int" and example in ((1,),) and shape == ():
            array, example = array.reshape(-1), ()
        if self.kind == "csv" and np.prod(example, dtype=int) == np.prod(shape, dtype=int):
            array, example = array.reshape((len(array), *shape)), tuple(shape)
        if example != tuple(shape):
            raise self.fail((section, name), f"'{name}' has shape {_shape((None, *example))} but the spec declares "
                            f"{_shape((None, *shape))}")
        if kind == "int":
            if array.dtype.kind not in INT_KINDS and not (array.dtype.kind == FLOAT_KINDS and np.all(array == np.round(array))):
                raise self.fail((section, name), f"'{name}' has dtype {array.dtype} but integers are expected")
            return array.astype(np.int64)
        if array.dtype.kind not in FLOAT_KINDS + INT_KINDS:
            raise self.fail((section, name), f"'{name}' has dtype {array.dtype} but numbers are expected")
        return array.astype(np.float32)

    def _tfrecord(self) -> Source:
        wanted, spec = self.expected(), {}
        for name, (_, ref) in self._names().items():
            shape, kind = wanted.get(name, ((), "float"))
            spec[ref] = tf.io.FixedLenFeature(list(shape), tf.int64 if kind == "int" else tf.float32)
        inputs = {i.name: i.dtype for i in self.ir.inputs}
        names = self._names()

        def parse(record: tf.Tensor) -> tuple[dict[str, tf.Tensor], dict[str, tf.Tensor]]:
            parsed = tf.io.parse_single_example(record, spec)
            features = {n: tf.cast(parsed[ref], inputs[n]) for n, (_, ref) in names.items() if n in inputs}
            labels = {n: parsed[ref] for n, (_, ref) in names.items() if n not in inputs}
            return features, labels

        dataset = tf.data.TFRecordDataset(str(self.path))
        count = 0
        try:
            for record in dataset:
                if count == 0:
                    parse(record)  # a missing key or wrong shape fails here, before training
                count += 1
        except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as exc:
            raise self.fail((), f"cannot parse record {count}: {exc.message.splitlines()[0]}") from None
        return Source(dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE), count)


def read_stage(loaded: LoadedSpec, ir: ModelIR, stage: str) -> Source | None:
    if loaded.spec.data is None or getattr(loaded.spec.data, stage) is None:
        return None
    return SourceReader(loaded, ir, stage).read()


def training_batches(source: Source, batch: int, seed: int, buffer: int) -> tf.data.Dataset:
    """Shuffled with the spec's seed, full batches only, repeated; the iterator is checkpointed."""
    return (source.dataset.shuffle(min(buffer, max(source.examples, 1)), seed=seed, reshuffle_each_iteration=True)
            .batch(batch, drop_remainder=True).repeat().prefetch(2))


def eval_batches(source: Source, batch: int) -> tf.data.Dataset:
    return source.dataset.batch(batch).prefetch(2)
