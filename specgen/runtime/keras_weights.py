"""Keras weight files as restore sources: Keras 3 `.weights.h5` and `.keras`, legacy Keras 2 `.h5`.

A weight is addressed as `<layer>/<weight>` (`conv1_conv/kernel`, `bn1/moving_mean`), a layer of
a nested model as `<model>/<layer>/<weight>`; the top model's own name is never part of a key.
Legacy `.h5` files store names (`layer_names`, then each layer's `weight_names`): the key is the
stored name without its `:0`, the layer's own name in front once. Keras 3 files store each
layer's variables by index (`layers/<path>/vars/<i>`, the layer's name in the `vars` group's
`name` attribute); the index becomes a name through the class's variable order (VARIABLES),
its class and options read from a `.keras` archive's config.json as plain JSON (never
deserialized: no custom objects or Lambda code run). A bare `.weights.h5` has no config: the
class comes from the group name Keras derives from it (`batch_normalization_1`), the options
from the variable count; where that does not decide (a BatchNormalization with 3 variables
has lost gamma or beta) or the class is unknown, the keys are `<layer>/vars/<i>`, with a hint
in the plan. With a config, an unknown class or a count that does not fit is an error: a
wrong name would put a value into the wrong variable.

Keras 3 stores a bfloat16 weight (a model built with `dtype="bfloat16"`, as many KerasHub presets
are) as opaque 2-byte values (`|V2`) with the attribute `dtype: bfloat16`: planned as bfloat16 and
read as the float32 each value stands for (exact: bfloat16 is float32's top 16 bits), as Keras' own
load_weights puts them into a float32 model.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from specgen.errors import SpecgenError
from specgen.paths import shown
from specgen.runtime import keras_files
from specgen.runtime.keras_files import READ_ERRORS
from specgen.runtime.sources.base import MISSING, REGULAR, file_kind

MODELS = ("Functional", "Sequential", "Model")
Option = Callable[[dict[str, Any]], bool]
OPTIONS: dict[str, Option] = {  # config key -> whether the weights it governs exist
    "use_bias": lambda c: bool(c.get("use_bias", True)),
    "center": lambda c: bool(c.get("center", True)),
    "scale": lambda c: bool(c.get("scale", True)),
    "adapted": lambda c: c.get("mean") is None,  # Normalization given mean/variance keeps them as constants
}
_CONV = (("kernel", None), ("bias", "use_bias"))
_SEPARABLE = (("depthwise_kernel", None), ("pointwise_kernel", None), ("bias", "use_bias"))
_AFFINE = (("gamma", "scale"), ("beta", "center"))
# Keras 3's save order (trainable, then non-trainable, each in creation order) with the option
# that decides each weight's presence. LayerScale's variable is unnamed in Keras ('variable');
# it is `gamma` here, the attribute Keras keeps it in and the name of specgen's `scale` weight.
VARIABLES: dict[str, tuple[tuple[str, str | None], ...]] = {
    **{c: _CONV for c in ("Dense", "Conv1D", "Conv2D", "Conv3D", "Conv1DTranspose", "Conv2DTranspose",
                          "Conv3DTranspose", "DepthwiseConv1D", "DepthwiseConv2D")},
    "SeparableConv1D": _SEPARABLE, "SeparableConv2D": _SEPARABLE,
    "BatchNormalization": (*_AFFINE, ("moving_mean", None), ("moving_variance", None)),
    "LayerNormalization": _AFFINE, "GroupNormalization": _AFFINE,
    "Normalization": (("mean", "adapted"), ("variance", "adapted"), ("count", "adapted")),
    "Embedding": (("embeddings", None),), "PReLU": (("alpha", None),), "LayerScale": (("gamma", None),),
    "RMSNormalization": (("scale", None),),
    # Recurrent layers keep their variables in their cell (`<layer>/cell/vars/<i>`); keyed `<layer>/<weight>`
    # like specgen's lstm/gru/simple_rnn, so they restore by identity.
    **{c: (("kernel", None), ("recurrent_kernel", None), ("bias", "use_bias")) for c in ("LSTM", "GRU", "SimpleRNN")},
}
CELLS = ("LSTM", "GRU", "SimpleRNN")  # their own variables are in the `cell` sub-object
# MultiHeadAttention keeps each projection in an EinsumDense sub-object (kernel, bias when use_bias), keyed
# `<layer>/<role>/...` like specgen's multi_head_attention (specgen/kinds/ops/attention.py).
ATTENTION_PARTS = {"query_dense": "query", "key_dense": "key", "value_dense": "value",
                   "output_dense": "attention_output"}
# Bidirectional keeps each direction's recurrent layer in a sub-object (its config entry under that key, the
# backward one under `layer` when Keras made it as a copy); keyed `<layer>/forward/<weight>` and
# `<layer>/backward/<weight>` like specgen's bidirectional (specgen/kinds/ops/bidirectional.py).
HALVES = (("forward", "forward_layer", "layer"), ("backward", "backward_layer", "backward_layer"))


@dataclass(frozen=True)
class Weight:
    """One stored weight: its dataset in the HDF5 file, shape, dtype name, and a note for the plan."""

    dataset: str
    shape: tuple[int, ...]
    dtype: str
    hint: str = ""


def snake(name: str) -> str:
    """Keras' `naming.to_snake_case`: the group name Keras 3 gives a layer of that class."""
    name = re.sub(r"\W+", "", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)).lower()


CLASS_OF_GROUP = {snake(c): c for c in (*VARIABLES, "Bidirectional")}


class KerasFileError(SpecgenError, ValueError):
    """A Keras weight file that cannot be read, as one line naming it."""


def _fail(path: Path, why: str) -> KerasFileError:
    return KerasFileError(f"cannot read Keras weight file {shown(path)}: {why}")


@contextmanager
def open_h5(path: Path, declared: int | None = None) -> Iterator[tuple[h5py.File, dict[str, Any] | None]]:
    """The weights' HDF5 file, checked by keras_files (nothing stored or linked outside it), and, for a
    `.keras` archive, its config.json as plain JSON. `declared`: the bytes of the variables the spec
    declares, which bound what model.weights.h5 may inflate to (IMPORT_WEIGHTS_CAP without a spec)."""
    if (kind := file_kind(path)) != REGULAR:  # checked when the values are read too (Reader)
        raise _fail(path, "no such file" if kind == MISSING else f"the path is {kind}, not a regular file")
    if declared is None:
        cap, why = keras_files.IMPORT_WEIGHTS_CAP, " (the cap without a spec)"
    else:
        cap = keras_files.weights_cap(declared)
        why = (f" ({keras_files.SLOTS} x the {keras_files.size_text(declared)} of variables the spec declares "
               f"+ {keras_files.OVERHEAD // 2**20} MiB)")
    with ExitStack() as stack:
        try:
            h5, config, _ = stack.enter_context(keras_files.open_keras(path, cap, why))
        except keras_files.UnsafeKerasFile as exc:
            raise _fail(path, str(exc)) from None
        except READ_ERRORS as exc:
            raise _fail(path, f"damaged ({_first_line(exc)})") from None
        if config is not None and not isinstance(config, dict):
            raise _fail(path, "config.json is not a JSON object")
        yield h5, config


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def read_weights(path: Path, declared: int | None = None) -> dict[str, Weight]:
    """Key -> stored weight of a Keras weight file; ValueError (one line naming the file) when it cannot be read
    or is refused (keras_files). `declared`: as open_h5's."""
    with open_h5(path, declared) as (h5, config):
        try:
            if "layer_names" in h5.attrs or "layer_names0" in h5.attrs:
                return _legacy(h5)
            if isinstance(h5.get("model_weights"), h5py.Group):
                return _legacy(h5["model_weights"])
            if "layers" in h5 or "vars" in h5:
                found: dict[str, Weight] = {}
                # A KerasHub backbone's config.json holds its constructor's arguments, not its layers: its
                # weights are read as a bare .weights.h5's, keyed by their Keras paths (importers/keras/keras_hub.py).
                hub = config is not None and str(config.get("module", "")).startswith("keras_hub.")
                _object(h5, None if hub else config, "", found, top=True)
                return found
        except READ_ERRORS as exc:
            if isinstance(exc, KerasFileError):
                raise
            raise _fail(path, _first_line(exc)) from None
    raise _fail(path, "an HDF5 file without Keras weights (no 'layer_names' attribute, no 'layers' group)")


class Reader:
    """`get_tensor(dataset)` over an open Keras weight file, as tf.train.load_checkpoint's reader offers it."""

    def __init__(self, path: Path, declared: int | None = None):
        self.path = path
        self._open = open_h5(path, declared)
        self.h5, _ = self._open.__enter__()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self._open.__exit__(None, None, None)

    def get_tensor(self, dataset: str) -> np.ndarray:
        """The stored array exactly as Keras holds it (ValueError naming the file when it cannot be read)."""
        try:
            return _array(self.h5[dataset])
        except READ_ERRORS as exc:
            raise _fail(self.path, f"damaged ({_first_line(exc)})") from None


def _array(dataset: Any) -> np.ndarray:
    if not isinstance(dataset, h5py.Dataset):
        raise ValueError(f"'{dataset.name}' is not a dataset")
    value = np.asarray(dataset[()])
    if _bfloat16(dataset):  # bfloat16 is float32's top 16 bits: shifted back into place, the float32 it stands for
        return (value.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return value


def _bfloat16(dataset: h5py.Dataset) -> bool:
    """Whether the dataset is Keras 3's bfloat16: 2-byte opaque values with the attribute `dtype: bfloat16`."""
    tag = dataset.attrs.get("dtype")
    tag = tag.decode("utf8", "replace") if isinstance(tag, bytes) else tag
    return bool(dataset.dtype.kind == "V" and dataset.dtype.itemsize == 2 and tag == "bfloat16")


def _weight(dataset: Any, hint: str = "") -> Weight:
    if not isinstance(dataset, h5py.Dataset):
        raise ValueError(f"'{dataset.name}' is a group where a weight should be")
    if _bfloat16(dataset):
        return Weight(dataset.name, tuple(int(d) for d in dataset.shape), "bfloat16", hint)
    if dataset.dtype.kind not in "fiub":
        tag = dataset.attrs.get("dtype")
        said = f" tagged dtype {tag!r}" if tag is not None else ""
        raise ValueError(f"'{dataset.name}' holds {dataset.dtype} values{said}, not numbers specgen reads (numbers, "
                         "or Keras' bfloat16: 2-byte values tagged dtype 'bfloat16'); save the weights as float32")
    return Weight(dataset.name, tuple(int(d) for d in dataset.shape), dataset.dtype.name, hint)


def _strings(group: h5py.Group, name: str) -> list[str]:
    """A legacy list attribute, also when Keras split it into `name0`, `name1`, ... (HDF5 header limit)."""
    chunks = [group.attrs[name]] if name in group.attrs else []
    while f"{name}{len(chunks)}" in group.attrs:
        chunks.append(group.attrs[f"{name}{len(chunks)}"])
    return [n.decode("utf8") if isinstance(n, bytes) else str(n) for chunk in chunks for n in np.atleast_1d(chunk)]


def _legacy(group: h5py.Group) -> dict[str, Weight]:
    """Keras 2 (and Keras 3's legacy writer): `<layer>/<stored name>` per `layer_names` and `weight_names`."""
    found: dict[str, Weight] = {}
    for layer in _strings(group, "layer_names"):
        if not isinstance(group.get(layer), h5py.Group):
            raise ValueError(f"layer '{layer}' is listed in layer_names but has no group")
        for stored in _strings(group[layer], "weight_names"):
            dataset = group[layer].get(stored)
            if dataset is None:
                raise ValueError(f"layer '{layer}': weight '{stored}' is listed in weight_names but missing")
            name = re.sub(r":\d+$", "", stored)  # TensorFlow 1 variable names end in an output index
            parts = name.split("/")
            if len(parts) > 2 and parts[1] == layer:  # Keras 3's legacy writer: `<model>/<layer>/<weight>` in a
                name = "/".join(parts[1:])  # Sequential (the variable's path), where the key has no model name
            key = f"{layer}/{name.removeprefix(layer + '/')}"
            if key in found:
                raise ValueError(f"layer '{layer}': two weights are named '{key}'")
            found[key] = _weight(dataset)
    return found


def _name(group: h5py.Group) -> str:
    """The layer's own name (Keras 3 writes it on `vars`); the group name in files that lack it."""
    vars_ = group.get("vars")
    name = vars_.attrs.get("name") if isinstance(vars_, h5py.Group) else None
    name = name.decode("utf8") if isinstance(name, bytes) else name
    return name if isinstance(name, str) and name else group.name.rsplit("/", 1)[-1]


def _orders(cls: str, config: dict[str, Any] | None) -> list[list[str]]:
    """The variable names a layer of `cls` can have: one list from its config, every option combination without."""
    spec = VARIABLES[cls]
    options = sorted({o for _, o in spec if o is not None})
    settings = ([{o: OPTIONS[o](config) for o in options}] if config is not None else
                [dict(zip(options, values, strict=True)) for values in product((True, False), repeat=len(options))])
    orders = [[n for n, o in spec if o is None or s[o]] for s in settings]
    return [list(x) for x in dict.fromkeys(tuple(o) for o in orders)]


def _own(group: h5py.Group, path: str, cls: str | None, config: dict[str, Any] | None, strict: bool,
         found: dict[str, Weight]) -> None:
    """Name the layer's own variables (`vars/0`, `vars/1`, ...) by its class's variable order."""
    vars_ = group.get("vars")
    count = len(vars_) if isinstance(vars_, h5py.Group) else 0
    if count == 0 or vars_ is None:
        return
    if sorted(vars_, key=lambda k: (len(k), k)) != [str(i) for i in range(count)]:
        raise ValueError(f"layer '{path}': its variables are not numbered 0 to {count - 1}")
    what = f"layer '{path}' ({cls or 'class unknown'})"
    known = _orders(cls, config) if cls in VARIABLES else []
    orders = [o for o in known if len(o) == count]
    if cls not in VARIABLES and strict:
        raise ValueError(f"{what} has {count} variables, and specgen does not know the variable order of {cls}")
    if known and not orders:
        expected = " or ".join(f"{len(o)} ({', '.join(o)})" for o in known)
        raise ValueError(f"{what} has {count} variables in the file, but {'its config' if strict else 'that class'} "
                         f"gives {expected}")
    names = orders[0] if len(orders) == 1 else [f"vars/{i}" for i in range(count)]
    hint = "" if len(orders) == 1 else (
        f"variable {{i}} of {what}: the file alone does not say which of "
        + " / ".join(", ".join(o) for o in orders) + " it holds; map it by name" if orders
        else f"variable {{i}} of {what}; map it by name")
    for i, name in enumerate(names):
        found[f"{path}/{name}"] = _weight(vars_[str(i)], hint.replace("{i}", str(i)))


def _bidirectional(group: h5py.Group, path: str, config: dict[str, Any] | None, strict: bool,
                   found: dict[str, Weight]) -> tuple[str, ...]:
    """Both directions' cell variables (HALVES); returns the sub-objects read. Without a config (a bare
    .weights.h5) the cell's class is unknown, but LSTM, GRU and SimpleRNN store the same order."""
    for half, attribute, key in HALVES:
        sub = group.get(attribute)
        if not isinstance(sub, h5py.Group):
            continue
        entry = (config.get(key) or config.get("layer")) if config is not None else None
        cls = str(entry.get("class_name")) if isinstance(entry, dict) else "LSTM"
        inner = entry.get("config") if isinstance(entry, dict) else None
        cell = sub.get("cell")
        _own(cell if isinstance(cell, h5py.Group) else sub, f"{path}/{half}", cls,
             inner if isinstance(inner, dict) else None, strict, found)
    return tuple(attribute for _, attribute, _ in HALVES)


def _holds_weights(group: h5py.Group) -> bool:
    flag: list[bool] = []
    group.visititems(lambda _, obj: flag.append(True) if isinstance(obj, h5py.Dataset) else None)
    return bool(flag)


def _children(layers: h5py.Group, config: dict[str, Any] | None, where: str
              ) -> list[tuple[h5py.Group, dict[str, Any] | None]]:
    """The layer groups under `layers/`, each with its entry of the model config (matched by name)."""
    groups = [layers[k] for k in layers]
    if config is None:
        return [(g, None) for g in groups]
    entries = [e for e in (config.get("config") or {}).get("layers") or [] if isinstance(e, dict)]
    by_name = {str((e.get("config") or {}).get("name", e.get("name"))): e for e in entries}
    used: dict[str, int] = {}
    for e in entries:  # Keras' own group names, for files that do not record the layer name
        base = snake(str(e.get("class_name", "")))
        used[base] = used.get(base, -1) + 1
        by_name.setdefault("\0" + (base if used[base] == 0 else f"{base}_{used[base]}"), e)
    out: list[tuple[h5py.Group, dict[str, Any] | None]] = []
    for group in groups:
        name = _name(group)
        entry = by_name.get(name) or by_name.get("\0" + group.name.rsplit("/", 1)[-1])
        if entry is None:
            raise ValueError(f"weights group '{group.name}' (layer '{name}') matches no layer of '{where}' "
                             "in config.json")
        out.append((group, entry))
    matched = {id(e) for _, e in out}
    # Sequential omits its InputLayer's group, so only layers that hold weights must have one.
    for lost in (e for e in entries if id(e) not in matched and e.get("class_name") in (*VARIABLES, *MODELS)):
        raise ValueError(f"layer '{(lost.get('config') or {}).get('name', lost.get('name'))}' "
                         f"({lost.get('class_name')}) of '{where}' in config.json has no weights group")
    return out


def _object(group: h5py.Group, entry: dict[str, Any] | None, prefix: str, found: dict[str, Weight],
            top: bool = False) -> None:
    """One saved layer or model and what it holds, its keys under `prefix` (a top model adds nothing to it)."""
    strict = entry is not None
    if entry is not None:
        cls: str | None = str(entry.get("class_name"))
    else:  # a bare .weights.h5: Keras named the group after the class (`conv2d_1`)
        cls = None if top else CLASS_OF_GROUP.get(re.sub(r"_\d+$", "", group.name.rsplit("/", 1)[-1]))
    config = entry.get("config") if entry is not None else None
    config = config if isinstance(config, dict) or config is None else {}
    path = prefix + _name(group)
    inner = prefix if top else f"{path}/"
    cell = cls in CELLS and isinstance(group.get("cell"), h5py.Group)
    _own(group["cell"] if cell else group, path, cls, config, strict, found)
    parts = ATTENTION_PARTS if cls == "MultiHeadAttention" else {}
    for attribute, role in parts.items():
        if isinstance(group.get(attribute), h5py.Group):
            _own(group[attribute], f"{path}/{role}", "Dense", config, strict, found)
    halves = _bidirectional(group, path, config, strict, found) if cls == "Bidirectional" else ()
    if isinstance(group.get("layers"), h5py.Group):
        for child, child_entry in _children(group["layers"], entry, path):
            _object(child, child_entry, inner, found)
    for attribute in (k for k in group if k not in ("vars", "layers", *(("cell",) if cell else ()), *parts, *halves)
                      and not (top and k == "optimizer")):
        sub = group[attribute]
        if not isinstance(sub, h5py.Group) or not _holds_weights(sub):
            continue
        if strict:
            raise ValueError(f"layer '{path}' ({cls}) keeps weights in a sub-object '{attribute}', "
                             "which specgen does not name")
        _object(sub, None, inner, found)
