"""Loading a repository's model versions into onnxruntime (through `Predictor`), checked against their configs and warmed.

A version is served only after three checks, at start and on every live load alike: onnxruntime
loads it, its graph's inputs and outputs are the config's (names, dtypes, shapes), and one
inference at the config's shapes (batch 1, zeros; 1 for a variable dimension) gives every output
with the config's dtype and batch. The warm-up also pays onnxruntime's first-run costs (memory
arena, kernel selection) before the version takes requests. Where the config has a variable
dimension other than the batch, 1 is a guess and the model may refuse it (a convolution wider than
one step), so there a failed warm-up is logged and not held against the version.

A version folder holding a precision variant with its gate files (`variant.json`, written by
`specgen export --precision ... --triton`) is gated first, on the provider onnxruntime actually gives
(runtime/precision/verify.py `check_version`): a variant that fails its kernel, accuracy or speed gate
is not served, its float32 reference beside it is, with one warning line (`variant_checked`).

The file served is also read for nodes that couple the rows of a run (coupling.py: a dynamically quantized
int8 variant computes one activation scale over every row): such a version's `rows_coupled` says why, and its
batcher runs each request alone whatever the config asks (registry.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specgen.paths import shown
from specgen.runtime.model_file import unloadable
from specgen.runtime.predictor import DTYPES, InputError, Predictor
from specgen.runtime.sources.base import MISSING, file_kind
from specgen.serve import coupling
from specgen.serve.errors import ProtocolError
from specgen.serve.model_config import DATATYPES, ModelConfig, RepositoryError, TensorConfig, quoted
from specgen.serve.repository import ModelEntry, confine_version, file_stamp, not_regular, scan_repository

Arrays = dict[str, np.ndarray]
log = logging.getLogger("specgen.serve")
# runtime/precision/verify.py's INFO_FILE, looked for before that module is imported (1.2 s: onnxruntime's quantizer)
VARIANT_INFO = "variant.json"


@dataclass(frozen=True)
class ServedModel:
    """A loaded version: `run` takes model-shaped arrays (batch first) and returns every output by name."""

    name: str
    version: int
    config: ModelConfig
    provider: str
    run: Callable[[Arrays], Arrays]
    # Why a request's input is longer than a positional embedding's max_length (runtime/lengths.py), or None:
    # checked before batching, so one such request gets a 400 and never fails a batch.
    out_of_range: Callable[[Arrays], str | None] = lambda arrays: None
    path: Path | None = None  # the model file, and what said it changed (file_stamp) when it was loaded
    stamp: tuple[int, int, int, int] | None = None
    # Why the rows of one run are not independent (coupling.py), or None: then requests are never joined.
    rows_coupled: str | None = None

    def metadata(self, versions: Sequence[int] | None = None) -> dict[str, Any]:
        """The Open Inference Protocol model metadata (`versions`: those served), plus the onnxruntime provider."""
        def tensors(items: Sequence[TensorConfig]) -> list[dict[str, Any]]:
            return [{"name": t.name, "datatype": t.datatype, "shape": self.config.wire_shape(t)} for t in items]

        return {"name": self.name, "versions": [str(v) for v in versions or [self.version]], "platform": "onnxruntime_onnx",
                "inputs": tensors(self.config.inputs), "outputs": tensors(self.config.outputs), "provider": self.provider}


def _fits(model_shape: Sequence[Any], config: ModelConfig, tensor: TensorConfig) -> bool:
    """Whether the ONNX graph's shape (ints, names or None for dynamic dims) accepts the config's tensor. A size the
    graph fixes must be the config's own (-1 there would let a client send another, which only onnxruntime would
    then refuse, and the metadata would say any size goes), as Triton requires; a dimension the graph leaves open
    takes -1 or any size (model_config.py bounds what one example may take)."""
    graph = list(model_shape)
    if config.batched:
        if not graph:
            return False
        graph = graph[1:]  # the batch: the config leaves it out and sizes it per request
    dims = list(tensor.model_dims)
    return len(graph) == len(dims) and all(not isinstance(m, int) or m == d for m, d in zip(graph, dims, strict=True))


def check_signature(where: str, config: ModelConfig, inputs: dict[str, tuple[Any, Any]],
                    outputs: dict[str, tuple[Any, Any]]) -> None:
    """Raise RepositoryError unless the graph's inputs and outputs are the config's, with its dtypes and shapes."""
    for kind, tensors, graph in (("input", config.inputs, inputs), ("output", config.outputs, outputs)):
        names = [t.name for t in tensors]
        if sorted(names) != sorted(graph):
            raise RepositoryError(f"{where}: the graph's {kind}s are {sorted(graph)}; config.pbtxt declares {sorted(names)}")
        for tensor in tensors:
            shape, dtype = graph[tensor.name]
            if np.dtype(dtype) != np.dtype(DATATYPES[tensor.datatype]):
                raise RepositoryError(f"{where}: {kind} {quoted(tensor.name)} is {np.dtype(dtype).name} in the graph; "
                                      f"config.pbtxt declares {tensor.datatype}")
            if not _fits(shape, config, tensor):
                raise RepositoryError(f"{where}: {kind} {quoted(tensor.name)} has shape {list(shape)} in the graph; "
                                      f"config.pbtxt declares {config.wire_shape(tensor)}"
                                      + (f" (reshape {list(tensor.reshape)})" if tensor.reshape is not None else "")
                                      + "; expected the graph's rank and sizes (-1 only where the graph names a "
                                      "dimension)")


def warm_inputs(config: ModelConfig) -> Arrays:
    """Zeros at the config's shapes: one example (batch 1 when the model batches), 1 for a variable dimension."""
    def shape(tensor: TensorConfig) -> tuple[int, ...]:
        dims = tuple(1 if d < 0 else d for d in tensor.model_dims)
        return (1, *dims) if config.batched else dims

    return {t.name: np.zeros(shape(t), DATATYPES[t.datatype]) for t in config.inputs}


def warm_up(model: ServedModel) -> None:
    """One inference at the config's shapes; a RepositoryError unless it gives every output as the config says."""
    config, where = model.config, f"{shown(model.path or model.name)}"
    guessed = any(d < 0 for t in config.inputs for d in t.model_dims)
    try:
        outputs = model.run(warm_inputs(config))
        for tensor in config.outputs:
            value = outputs.get(tensor.name)
            if value is None:
                raise RepositoryError(f"{where}: warm-up inference gave no output {quoted(tensor.name)}")
            if value.dtype != np.dtype(DATATYPES[tensor.datatype]):
                raise RepositoryError(f"{where}: warm-up output {quoted(tensor.name)} is {value.dtype}; "
                                      f"config.pbtxt declares {tensor.datatype}")
            if config.batched and (value.ndim == 0 or value.shape[0] != 1):
                raise RepositoryError(f"{where}: warm-up output {quoted(tensor.name)} has shape {list(value.shape)} for a "
                                      "batch of 1; expected the batch first")
    except Exception as exc:
        message = str(exc) if isinstance(exc, RepositoryError) else f"{where}: warm-up inference failed: {exc}"
        if not guessed:
            raise RepositoryError(message) from None
        log.warning("warm-up failed at a guessed size", extra={"fields": {
            "event": "warm_up_skipped", "model": model.name, "version": model.version, "error": message}})


def _gated(name: str, version: int, path: Path, provider: str, threads: int, graphs: dict[str, Any]
           ) -> tuple[Predictor, Path] | None:
    """A precision variant's gates (None where the folder holds no variant): the file to serve, loaded."""
    if file_kind(path.parent / VARIANT_INFO) == MISSING:  # a FIFO or folder there is refused by read_info
        return None
    from specgen.runtime.precision.verify import VariantFileError, check_version

    try:
        check = check_version(path.parent, path.name, provider, threads=threads, **graphs)
    except VariantFileError as exc:
        raise RepositoryError(str(exc)) from None
    if check is None:  # a variant.json left beside another model
        return None
    log.log(logging.INFO if check.passed else logging.WARNING, "precision variant checked", extra={"fields": {
        "event": "variant_checked", "model": name, "version": version, "passed": check.passed,
        "serving": shown(check.serve), "provider": check.provider, "line": check.line}})
    return check.predictor or Predictor(check.serve, provider=provider, threads=threads, **graphs), check.serve


def load_version(name: str, version: int, path: Path, config: ModelConfig, provider: str = "auto",
                 threads: int = 0, warm: bool = True, cuda_graphs: bool = False) -> ServedModel:
    """An onnxruntime session for one version's model file (or, for a precision variant that fails its gates,
    its float32 reference), checked against `config` and warmed up.

    `cuda_graphs` (`specgen serve --cuda-graphs`): on the CUDA provider, one captured graph per batch bucket up to
    the config's max_batch_size (runtime/predictor.py, runtime/buckets.py); elsewhere the Predictor says why not
    in one line, logged here, and runs as without it."""
    confine_version(path)
    if (problem := not_regular(path, "the version's ONNX model")) is not None:
        raise problem
    stamp = file_stamp(path)
    graphs: dict[str, Any] = {"cuda_graphs": True, "max_batch_size": config.max_batch_size} if cuda_graphs else {}
    try:
        gated = _gated(name, version, path, provider, threads, graphs)
        predictor, served = gated if gated is not None else (
            Predictor(path, provider=provider, threads=threads, **graphs), path)
    except (InputError, RepositoryError):  # the provider (unknown, or CUDA asked for and missing), a damaged variant
        raise
    except Exception as exc:  # onnxruntime raises its own exception types for unreadable models
        raise RepositoryError(f"{shown(path)}: {unloadable(path, exc, arguments=False)}") from None
    if cuda_graphs and predictor.graph_note:
        log.info("no CUDA graphs", extra={"fields": {"event": "cuda_graphs_off", "model": name, "version": version,
                                                    "reason": predictor.graph_note}})
    outputs = {o.name: (tuple(o.shape), DTYPES.get(o.type, np.void)) for o in predictor.session.get_outputs()}
    check_signature(shown(served), config, predictor.inputs, outputs)
    model = ServedModel(name=name, version=version, config=config, provider=predictor.provider, run=values_checked(predictor),
                        out_of_range=predictor.out_of_range, path=served, stamp=stamp, rows_coupled=coupling.rows_coupled(served))
    if warm:
        warm_up(model)
    for field_name, why in config.notes:  # accepted, changing only order or speed: said once per version loaded
        log.warning("config field not honoured", extra={"fields": {
            "event": "config_field_ignored", "model": name, "version": version, "field": field_name, "reason": why}})
    return model


def values_checked(predictor: Predictor) -> Callable[[Arrays], Arrays]:
    """`predictor` as a served model's run. onnxruntime's INVALID_ARGUMENT, raised past every check of a request's
    names, datatypes and shapes, is about its values (a token id past the vocabulary) or a length the model's
    kernels refuse (a sequence shorter than a convolution's kernel): the client's to mend, so a ProtocolError (400,
    INVALID_ARGUMENT over gRPC) for that request. A batch that raises it is retried one request at a time
    (batcher.py), so only the request that holds such values gets it."""
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

    def run(arrays: Arrays) -> Arrays:
        try:
            return predictor(arrays)
        except InvalidArgument as exc:
            reason = str(exc).removeprefix("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : ")
            raise ProtocolError(f"the model refused this request's values: {reason}") from None
        except InputError as exc:  # the Predictor's own checks of the arrays (a shape the graph does not take)
            raise ProtocolError(f"the model refused this request: {exc}") from None

    return run


def load_model(entry: ModelEntry, problems: list[str], provider: str = "auto", threads: int = 0,
               cuda_graphs: bool = False) -> list[ServedModel]:
    """Every version of `entry` that its version_policy serves and that loads, ascending; a line in `problems` for
    each that does not."""
    models = []
    for version, path in sorted(entry.versions.items()):
        try:
            models.append(load_version(entry.name, version, path, entry.config, provider, threads,
                                       cuda_graphs=cuda_graphs))
        except RepositoryError as exc:
            problems.append(str(exc))
    return models


def load_repository(repo: Path, provider: str = "auto", threads: int = 0, cuda_graphs: bool = False
                    ) -> list[ServedModel]:
    """Every served version of every model of a Triton-layout repository, loaded; or a RepositoryError listing every
    problem at once: each folder that does not read, and each version of the others that does not load."""
    entries, problems = scan_repository(repo)
    models = [model for entry in entries for model in load_model(entry, problems, provider, threads, cuda_graphs)]
    if problems:
        raise RepositoryError("\n".join(problems))
    return models
