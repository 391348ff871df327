"""Loading a repository's models into onnxruntime (through `Predictor`) and checking them against their configs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specgen.runtime.predictor import DTYPES, InputError, Predictor
from specgen.serve.repository import DATATYPES, ModelConfig, ModelEntry, RepositoryError, TensorConfig, read_repository

Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class ServedModel:
    """A loaded model: `run` takes model-shaped arrays (batch first) and returns every output by name."""

    name: str
    version: int
    config: ModelConfig
    provider: str
    run: Callable[[Arrays], Arrays]
    # Why a request's input is longer than a positional embedding's max_length (runtime/lengths.py), or None:
    # checked before batching, so one such request gets a 400 and never fails a batch.
    too_long: Callable[[Arrays], str | None] = lambda arrays: None

    def metadata(self) -> dict[str, Any]:
        """The Open Inference Protocol model metadata, plus the onnxruntime provider that runs it."""
        def tensors(items: Sequence[TensorConfig]) -> list[dict[str, Any]]:
            return [{"name": t.name, "datatype": t.datatype, "shape": self.config.wire_shape(t)} for t in items]

        return {"name": self.name, "versions": [str(self.version)], "platform": "onnxruntime_onnx",
                "inputs": tensors(self.config.inputs), "outputs": tensors(self.config.outputs), "provider": self.provider}


def _fits(model_shape: Sequence[Any], config: ModelConfig, tensor: TensorConfig) -> bool:
    """Whether the ONNX graph's shape (ints, names or None for dynamic dims) accepts the config's tensor."""
    expected = [-1, *tensor.model_dims] if config.batched else list(tensor.model_dims)
    if len(model_shape) != len(expected):
        return False
    return all(not isinstance(m, int) or e == -1 or m == e for m, e in zip(model_shape, expected, strict=True))


def check_signature(entry: ModelEntry, inputs: dict[str, tuple[Any, Any]], outputs: dict[str, tuple[Any, Any]]) -> None:
    """Raise RepositoryError unless the graph's inputs and outputs are the config's, with its dtypes and shapes."""
    config = entry.config
    for kind, tensors, graph in (("input", config.inputs, inputs), ("output", config.outputs, outputs)):
        names = [t.name for t in tensors]
        if sorted(names) != sorted(graph):
            raise RepositoryError(f"{entry.path}: the graph's {kind}s are {sorted(graph)}; config.pbtxt declares {sorted(names)}")
        for tensor in tensors:
            shape, dtype = graph[tensor.name]
            if np.dtype(dtype) != np.dtype(DATATYPES[tensor.datatype]):
                raise RepositoryError(f"{entry.path}: {kind} '{tensor.name}' is {np.dtype(dtype).name} in the graph; "
                                      f"config.pbtxt declares {tensor.datatype}")
            if not _fits(shape, config, tensor):
                raise RepositoryError(f"{entry.path}: {kind} '{tensor.name}' has shape {list(shape)} in the graph; "
                                      f"config.pbtxt declares {config.wire_shape(tensor)}"
                                      + (f" (reshape {list(tensor.reshape)})" if tensor.reshape is not None else ""))


def load_model(entry: ModelEntry, provider: str = "auto", threads: int = 0) -> ServedModel:
    """An onnxruntime session for `entry`, checked against its config."""
    try:
        predictor = Predictor(entry.path, provider=provider, threads=threads)
    except InputError:  # the provider (unknown, or CUDA asked for and missing): its message says what to do
        raise
    except Exception as exc:  # onnxruntime raises its own exception types for unreadable models
        raise RepositoryError(f"{entry.path}: onnxruntime cannot load the model: {exc}") from None
    outputs = {o.name: (tuple(o.shape), DTYPES.get(o.type, np.void)) for o in predictor.session.get_outputs()}
    check_signature(entry, predictor.inputs, outputs)
    return ServedModel(name=entry.name, version=entry.version, config=entry.config, provider=predictor.provider, run=predictor,
                       too_long=predictor.too_long)


def load_repository(repo: Path, provider: str = "auto", threads: int = 0) -> list[ServedModel]:
    """Every model of a Triton-layout repository, loaded; errors name the folder or file."""
    return [load_model(entry, provider, threads) for entry in read_repository(repo)]
