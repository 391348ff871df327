"""A Triton-layout model repository: `REPO/<model>/config.pbtxt` and `REPO/<model>/<version>/model.onnx`.

`config.pbtxt` is read with Triton's own schema (tritonclient's `ModelConfig` through
google.protobuf's text_format) when tritonclient is installed, which rejects misspelled
fields; otherwise with `textproto`, which reads the same grammar without a schema. Both
give the same `ModelConfig`. The highest numbered version folder holding the model file is
the one served.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specgen.errors import SpecgenError
from specgen.serve import textproto

# KServe v2 datatype -> numpy dtype name, for the tensor types the onnxruntime backend here serves.
DATATYPES = {"FP32": "float32", "FP64": "float64", "INT32": "int32", "INT64": "int64", "UINT8": "uint8"}
ONNX_PLATFORMS = {"onnxruntime_onnx"}
ONNX_BACKENDS = {"onnxruntime"}


class RepositoryError(SpecgenError, ValueError):
    """A model repository, folder or config that cannot be served, naming the file."""


@dataclass(frozen=True)
class TensorConfig:
    """One `input` / `output` entry: `dims` leave the batch out when the model batches."""

    name: str
    datatype: str  # KServe name: FP32, INT64, ...
    dims: tuple[int, ...]
    reshape: tuple[int, ...] | None = None  # the model's own per-example shape when it differs from dims

    @property
    def model_dims(self) -> tuple[int, ...]:
        return self.dims if self.reshape is None else self.reshape


@dataclass(frozen=True)
class ModelConfig:
    """The fields of a Triton model configuration that serving an ONNX model needs."""

    name: str
    max_batch_size: int
    inputs: tuple[TensorConfig, ...]
    outputs: tuple[TensorConfig, ...]
    dynamic_batching: bool = False
    max_queue_delay_us: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_size: int = 0  # dynamic_batching.default_queue_policy.max_queue_size; 0: not set
    model_filename: str = "model.onnx"

    @property
    def batched(self) -> bool:
        return self.max_batch_size > 0

    def wire_shape(self, tensor: TensorConfig) -> list[int]:
        """The shape clients see: -1 for the batch dimension when the model batches."""
        return [-1, *tensor.dims] if self.batched else list(tensor.dims)


@dataclass(frozen=True)
class ModelEntry:
    """One model of the repository: its config and the version that is served."""

    name: str
    version: int
    path: Path  # the model file of that version
    config: ModelConfig


def _one(fields: Mapping[str, Any], key: str, default: Any = None) -> Any:
    value = fields.get(key, default)
    if isinstance(value, list):
        return value[-1] if value else default
    return value


def _many(fields: Mapping[str, Any], key: str) -> list[Any]:
    value = fields.get(key, [])
    return value if isinstance(value, list) else [value]


def _datatype(raw: Any, where: str) -> str:
    name = str(raw)
    datatype = name.removeprefix("TYPE_")
    if not name.startswith("TYPE_") or datatype not in DATATYPES:
        raise RepositoryError(f"{where}: data_type {name} is not served; expected one of "
                              f"{', '.join('TYPE_' + d for d in DATATYPES)}")
    return datatype


def _dims(values: list[Any], where: str) -> tuple[int, ...]:
    dims = tuple(int(v) for v in values)
    if any(d < -1 or d == 0 for d in dims):
        raise RepositoryError(f"{where}: dims {list(dims)} must be positive, or -1 for a variable size")
    return dims


def _tensor(fields: Mapping[str, Any], kind: str, source: str) -> TensorConfig:
    name = _one(fields, "name")
    if not isinstance(name, str) or not name:
        raise RepositoryError(f"{source}: an {kind} has no name")
    where = f"{source}: {kind} '{name}'"
    reshape = _one(fields, "reshape")
    return TensorConfig(
        name=name,
        datatype=_datatype(_one(fields, "data_type", "TYPE_INVALID"), where),
        dims=_dims(_many(fields, "dims"), where),
        reshape=None if reshape is None else _dims(_many(reshape, "shape"), f"{where} reshape"),
    )


def _read_fields(text: str, source: str) -> Mapping[str, Any]:
    """The config as nested dicts: through Triton's schema when tritonclient is installed."""
    try:
        from google.protobuf import json_format, text_format
        from tritonclient.grpc import model_config_pb2
    except ImportError:
        try:
            return textproto.parse(text)
        except textproto.TextProtoError as exc:
            raise RepositoryError(f"{source}: {exc}") from None
    try:
        message = text_format.Parse(text, model_config_pb2.ModelConfig())
    except text_format.ParseError as exc:
        raise RepositoryError(f"{source}: not a Triton model configuration: {exc}") from None
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def parse_config(text: str, source: str = "config.pbtxt") -> ModelConfig:
    """A `ModelConfig` from `config.pbtxt` text, or a RepositoryError naming `source` and the field."""
    fields = _read_fields(text, source)
    platform, backend = _one(fields, "platform", ""), _one(fields, "backend", "")
    if (platform or backend) and platform not in ONNX_PLATFORMS and backend not in ONNX_BACKENDS:
        raise RepositoryError(f"{source}: platform '{platform}' / backend '{backend}' is not served; "
                              "expected backend: \"onnxruntime\" or platform: \"onnxruntime_onnx\"")
    max_batch_size = int(_one(fields, "max_batch_size", 0))
    if max_batch_size < 0:
        raise RepositoryError(f"{source}: max_batch_size must be 0 or more; received {max_batch_size}")
    inputs = tuple(_tensor(f, "input", source) for f in _many(fields, "input"))
    outputs = tuple(_tensor(f, "output", source) for f in _many(fields, "output"))
    if not inputs or not outputs:
        raise RepositoryError(f"{source}: the config must list the model's inputs and outputs "
                              f"(received {len(inputs)} inputs, {len(outputs)} outputs)")
    batching = _one(fields, "dynamic_batching")
    policy = _one(batching, "default_queue_policy", {}) if batching is not None else {}
    return ModelConfig(
        name=str(_one(fields, "name", "")),
        max_batch_size=max_batch_size,
        inputs=inputs,
        outputs=outputs,
        dynamic_batching=batching is not None and max_batch_size > 0,
        max_queue_delay_us=int(_one(batching, "max_queue_delay_microseconds", 0)) if batching is not None else 0,
        preferred_batch_sizes=tuple(int(v) for v in _many(batching, "preferred_batch_size")) if batching is not None else (),
        max_queue_size=int(_one(policy, "max_queue_size", 0)),
        model_filename=str(_one(fields, "default_model_filename", "") or "model.onnx"),
    )


def _versions(folder: Path, filename: str) -> list[int]:
    return sorted(int(p.name) for p in folder.iterdir()
                  if p.is_dir() and p.name.isdigit() and (p / filename).is_file())


def read_model(folder: Path) -> ModelEntry:
    """The model in `folder`: its config and its highest version holding the model file."""
    source = folder / "config.pbtxt"
    if not source.is_file():
        raise RepositoryError(f"{folder}: no config.pbtxt (a Triton model folder holds config.pbtxt "
                              "and numbered version folders)")
    config = parse_config(source.read_text(encoding="utf-8"), str(source))
    if config.name and config.name != folder.name:
        raise RepositoryError(f"{source}: name '{config.name}' differs from the folder name '{folder.name}'; "
                              "Triton requires them to be equal")
    if not config.name:
        config = ModelConfig(**{**config.__dict__, "name": folder.name})
    versions = _versions(folder, config.model_filename)
    if not versions:
        raise RepositoryError(f"{folder}: no version folder holds {config.model_filename} "
                              f"(expected {folder}/1/{config.model_filename})")
    version = versions[-1]
    return ModelEntry(name=folder.name, version=version, path=folder / str(version) / config.model_filename, config=config)


def read_repository(repo: Path) -> list[ModelEntry]:
    """Every model of the repository, by name; a RepositoryError lists every folder that cannot be served."""
    repo = Path(repo)
    if not repo.is_dir():
        raise RepositoryError(f"{repo}: not a folder; expected a model repository REPO/<model>/config.pbtxt "
                              "(what `specgen export --triton` writes)")
    entries, problems = [], []
    for folder in sorted(p for p in repo.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            entries.append(read_model(folder))
        except RepositoryError as exc:
            problems.append(str(exc))
    if problems:
        raise RepositoryError("\n".join(problems))
    if not entries:
        raise RepositoryError(f"{repo}: no models; expected REPO/<model>/config.pbtxt and "
                              "REPO/<model>/<version>/model.onnx (what `specgen export --triton` writes)")
    return entries
