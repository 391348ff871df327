"""Where a model's structure comes from: a `.keras` zip, a legacy `.h5` file, or a constructor name.

User files are read as data only: config.json from the zip, the `model_config` attribute from
the HDF5 file, both opened through specgen.runtime.keras_files (config.json read in bounded chunks up
to MAX_CONFIG whatever the zip header claims; an HDF5 file walked for external storage and links
before any read). `keras.models.load_model` is never called on them (it can run a Lambda's code or
import custom objects). A constructor name builds `keras.applications.<Name>(weights=None, ...)`:
that runs Keras' own code only, and its weights are drawn with a fixed seed.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specgen.importers.keras.errors import ImportProblem
from specgen.runtime.keras_files import MAX_CONFIG, READ_ERRORS, UnsafeKerasFile, load_json, open_hdf5, open_zip, read_config

SEED = 0


@dataclass
class Source:
    config: dict[str, Any]  # {"class_name": ..., "config": {...}}
    keras2: bool  # the Keras 2 meaning of names that changed (hard_sigmoid)
    weights: Path | None  # the file holding the weights (the model file itself), if any
    weights_bytes: bytes | None = None  # constructor weights, written beside the spec
    label: str = ""  # how the header names the source


def _config(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict) or "class_name" not in value:
        raise ImportProblem(f"{where} holds no Keras model config")
    return value


def read_keras_zip(path: Path) -> Source:
    try:
        with open_zip(path) as archive:
            if "config.json" not in archive.namelist():
                raise ImportProblem(f"{path} is not a Keras 3 .keras file (a zip with config.json)")
            config = read_config(archive)
    except UnsafeKerasFile as exc:
        raise ImportProblem(f"{path}: {exc}") from None
    except READ_ERRORS as exc:
        raise ImportProblem(f"{path} is not a Keras 3 .keras file (a zip with config.json): "
                            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    return Source(_config(config, f"config.json in {path}"), keras2=False, weights=path, label=path.name)


def read_h5(path: Path) -> Source:
    try:
        with open_hdf5(path) as f:
            raw = f.attrs.get("model_config")
            version = f.attrs.get("keras_version", b"")
    except UnsafeKerasFile as exc:
        raise ImportProblem(f"{path}: {exc}") from None
    except READ_ERRORS as exc:
        raise ImportProblem(f"{path} is not an HDF5 file: {str(exc).splitlines()[0]}") from None
    if raw is None:
        raise ImportProblem(f"{path} holds weights only (no model_config): import the model file, or a constructor "
                            "name with --weights")
    version = version.decode(errors="replace") if isinstance(version, bytes) else str(version)
    if not isinstance(raw, (bytes, str)):
        raise ImportProblem(f"model_config of {path} is {type(raw).__name__}, not a JSON string")
    if len(raw) > MAX_CONFIG:
        raise ImportProblem(f"model_config of {path} is over {MAX_CONFIG // 2**20} MiB")
    try:
        config = load_json(raw, f"model_config of {path}")  # bytes: json decodes UTF-8 (a bad byte is an error)
    except UnsafeKerasFile as exc:
        raise ImportProblem(str(exc)) from None
    return Source(_config(config, f"model_config of {path}"), keras2=not version.startswith("3"), weights=path,
                  label=path.name)


def build_constructor(name: str, input_shape: tuple[int, ...] | None, classes: int | None) -> Source:
    """keras.applications.<name>(weights=None, ...): its config and seeded weights as bytes."""
    if not name[:1].isupper():  # no constructor starts lower-case: refused before Keras loads
        raise _unknown(name)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    build = getattr(keras.applications, name, None)
    if not callable(build):
        raise _unknown(name)
    kwargs: dict[str, Any] = {"weights": None}
    if input_shape is not None:
        kwargs["input_shape"] = input_shape
    if classes is not None:
        kwargs["classes"] = classes
    keras.backend.clear_session()  # automatic names (input_layer, conv2d_3) restart: the same spec every time
    keras.utils.set_random_seed(SEED)
    try:
        model = build(**kwargs)
    except (ValueError, TypeError) as exc:
        raise ImportProblem(f"keras.applications.{name}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())}) "
                            f"failed: {exc}") from None
    # A .keras archive, not a bare .weights.h5: its config.json says each weight group's class and options
    # (BatchNormalization(scale=False) has no gamma), so the reader never guesses them from group names.
    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / "model.keras"
        model.save(target)
        data = target.read_bytes()
    config = {"class_name": "Functional", "config": model.get_config()}
    return Source(config, keras2=False, weights=None, weights_bytes=data, label=f"keras.applications.{name}")


# A KerasHub preset name (bert_base_en) or handle (kaggle://..., hf://...): what from_preset downloads.
PRESET = re.compile(r"(kaggle|hf)://[\w./-]{1,200}|[a-z][a-z0-9_]{0,99}")


def _unknown(name: str) -> ImportProblem:
    """Neither a file nor a constructor; a preset-like name is told that presets are not fetched, and what to do."""
    hint = ""
    if PRESET.fullmatch(name):
        hint = (f"; KerasHub presets are not downloaded: save the backbone with model.save() first "
                f"(keras_hub.models.Backbone.from_preset('{name}').save('backbone.keras')) and import that file")
    return ImportProblem(f"'{name}' is neither a .keras/.h5 file nor a keras.applications constructor "
                         f"(e.g. ResNet50, MobileNetV3Small, EfficientNetB0){hint}")


def _require_file(path: Path) -> None:
    """A model file is a regular file: a FIFO would block the reader, a folder is no model (the message is printed
    after the source's name, so it does not repeat it)."""
    from specgen.runtime.sources.base import MISSING, REGULAR, file_kind

    kind = file_kind(path)
    if kind == MISSING:
        raise ImportProblem("no such file")
    if kind != REGULAR:
        raise ImportProblem(f"the path is {kind}, not a regular file; expected a .keras or .h5 model file")


def read_source(source: str, input_shape: tuple[int, ...] | None, classes: int | None) -> Source:
    path = Path(source)
    suffix = path.suffix.lower()
    if suffix in (".keras", ".h5", ".hdf5"):
        if input_shape is not None or classes is not None:
            raise ImportProblem("--input-shape and --classes apply to constructor names only, not to model files")
        _require_file(path)
        return read_keras_zip(path) if suffix == ".keras" else read_h5(path)
    if path.exists():
        raise ImportProblem(f"{source}: expected a .keras or .h5 model file")
    return build_constructor(source, input_shape, classes)
