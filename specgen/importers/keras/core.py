"""Keras' core layers as spec layers: dense, normalizations, activations, reshapes, merges, preprocessing,
embedding, and the two Keras application classes specgen reads from their config (LayerScale, CustomScaleLayer).
"""

from __future__ import annotations

from typing import Any

from specgen.fields.base import MAX_INT
from specgen.importers.keras.args import Args
from specgen.importers.keras.base import KERAS_OPS, Part, Shapes, _bias_act, _init
from specgen.importers.keras.objects import is_integer


def _axes(a: Args, key: str) -> list[int]:
    """One axis or a list of them (Keras 2 writes BatchNormalization's axis as [3])."""
    value = a.get(key, -1)
    axes = value if isinstance(value, list | tuple) else [value]
    if not axes or not all(is_integer(v, -MAX_INT) for v in axes):
        raise a.wrong(key, "an integer or a list of integers")
    return list(axes)


def _last_axis(a: Args, key: str, rank: int) -> None:
    """Keras normalizations over one axis: specgen's run over the last one only."""
    axes = _axes(a, key)
    if len(axes) != 1 or axes[0] not in (-1, rank - 1):
        raise a.refuse(key, "specgen normalizes over the last (channel) axis only")


def dense(a: Args, shapes: Shapes) -> dict[str, Any]:
    a.expect("lora_rank", None, why="LoRA adapters have no spec form")
    a.expect("quantization_config", None, why="quantized layers have no spec form")
    out = {"op": "dense", "units": a.integer("units")}
    _init(a, out, "kernel_initializer", "kernel_init")
    return _bias_act(a, out)


def batch_norm(a: Args, shapes: Shapes) -> dict[str, Any]:
    _last_axis(a, "axis", len(shapes[0]))
    for key in ("renorm", "virtual_batch_size"):
        a.expect(key, None, False, why="no spec form")
    a.get("renorm_clipping"), a.get("renorm_momentum"), a.get("fused"), a.get("adjustment")  # meaningless without renorm
    synchronized = a.flag("synchronized", False)
    out: dict[str, Any] = {"op": "batch_norm", "momentum": a.number("momentum", 0.99),
                           "epsilon": a.number("epsilon", 1e-3)}
    for key, default in (("center", True), ("scale", True)):
        if not a.flag(key, default):
            out[key] = False
    if synchronized:
        out["sync"] = True
    for key, fixed in (("beta_initializer", "zeros"), ("gamma_initializer", "ones"),
                       ("moving_mean_initializer", "zeros"), ("moving_variance_initializer", "ones")):
        if (init := a.initializer(key)) not in (None, fixed):
            a.note(key, init, "batch_norm's initializers are fixed; the restore sets these values")
    return out


def layer_norm(a: Args, shapes: Shapes) -> dict[str, Any]:
    _last_axis(a, "axis", len(shapes[0]))
    for key in ("center", "scale"):
        a.expect(key, True, why="layer_norm always has gamma and beta")
    a.expect("rms_scaling", False, None, why="no spec form for RMS scaling")
    for key in ("beta_initializer", "gamma_initializer"):
        a.initializer(key)  # fixed in the spec; the restore sets the values
    return {"op": "layer_norm", "epsilon": a.number("epsilon", 1e-3)}


def activation(a: Args, shapes: Shapes) -> dict[str, Any] | None:
    act = a.activation()
    return None if act is None else {"op": act}


def relu(a: Args, shapes: Shapes) -> dict[str, Any]:
    max_value = None if a.get("max_value") is None else a.number("max_value")
    slope = _slope(a, 0.0)
    if a.get("threshold") is not None and a.number("threshold") != 0.0:
        raise a.refuse("threshold", "specgen's relu has no threshold")
    if slope and max_value is not None:
        raise a.refuse("negative_slope", "a slope together with max_value has no spec form")
    if slope:
        return {"op": "leaky_relu", "alpha": slope}
    if max_value is None:
        return {"op": "relu"}
    return {"op": "relu6"} if max_value == 6.0 else {"op": "relu", "max_value": max_value}


def _slope(a: Args, default: float) -> float:
    """Keras 3's negative_slope, Keras 2's alpha (None in a ReLU means no slope)."""
    a.get("alpha")
    key = "negative_slope" if "negative_slope" in a.config or "alpha" not in a.config else "alpha"
    return default if a.get(key) is None else a.number(key)


def leaky_relu(a: Args, shapes: Shapes) -> dict[str, Any]:
    return {"op": "leaky_relu", "alpha": _slope(a, 0.3)}


def elu(a: Args, shapes: Shapes) -> dict[str, Any]:
    return {"op": "elu", "alpha": a.number("alpha", 1.0)}


def softmax(a: Args, shapes: Shapes) -> dict[str, Any]:
    axes = _axes(a, "axis")
    if len(axes) != 1:
        raise a.refuse("axis", "softmax over one axis")
    return {"op": "softmax", **({"axis": axes[0]} if axes[0] != -1 else {})}


def flatten(a: Args, shapes: Shapes) -> dict[str, Any]:
    if a.get("data_format") == "channels_first" and len(shapes[0]) > 2:
        raise a.refuse("data_format", "specgen flattens channels-last")
    return {"op": "flatten"}


def reshape(a: Args, shapes: Shapes) -> dict[str, Any]:
    shape = a.get("target_shape")
    if not isinstance(shape, list | tuple) or not all(is_integer(d, -1) for d in shape):
        raise a.wrong("target_shape", "a list of integers (-1 for the one inferred size)")
    return {"op": "reshape", "shape": list(shape)}


def dropout(a: Args, shapes: Shapes) -> dict[str, Any]:
    return {"op": "dropout", "rate": a.number("rate")}


def merge(a: Args, shapes: Shapes) -> dict[str, Any]:
    """Add, Multiply, Subtract: the op their class imports as (OpDef.keras)."""
    return {"op": KERAS_OPS[a.layer.cls]}


def concat(a: Args, shapes: Shapes) -> dict[str, Any]:
    axis = a.axis("axis", -1)
    return {"op": "concat", **({"axis": axis} if axis != -1 else {})}


def rescale(a: Args, shapes: Shapes) -> dict[str, Any]:
    out = {"op": "rescale", "scale": a.numbers("scale")}
    if (offset := a.numbers("offset", 0.0)) != 0.0:
        out["offset"] = offset
    return out


def normalize(a: Args, shapes: Shapes) -> dict[str, Any]:
    """Keras' Normalization over the last axis, or over none (axis=None, saved as []: one mean and one variance
    for every element). axis=None with fixed mean= and variance= (numbers: Keras refuses more for no axis) is the
    spec's scalar mean / variance, the same (x - mean) / max(sqrt(variance), 1e-7); an adapted axis=None layer
    keeps them as weights of shape (), which the spec's per-channel `mean` / `variance` variables cannot restore."""
    a.expect("invert", False, None, why="no spec form for the inverse")
    fixed = a.get("mean") is not None and a.get("variance") is not None
    if a.get("axis", -1) in ([], ()):
        if not fixed:
            raise a.refuse("axis", "axis=None (one mean and variance for every element) imports only with fixed "
                           "mean= and variance= numbers; an adapted layer keeps them as scalar weights, which the "
                           "spec's per-channel variables cannot restore: adapt it with axis=-1, or pass the adapted "
                           "values as mean= and variance=")
        for key in ("mean", "variance"):
            if isinstance(a.get(key), list | tuple):
                raise a.wrong(key, "one number (axis=None)")
    else:
        _last_axis(a, "axis", len(shapes[0]))
    if not fixed:  # adapted: the statistics are weights, set by the restore
        return {"op": "normalize"}
    return {"op": "normalize", "mean": a.numbers("mean"), "variance": a.numbers("variance")}


def _mask_zero(a: Args) -> dict[str, Any]:
    """Keras' mask_zero as the spec's: `specgen validate` then follows the mask as Keras does (ir/masks.py) and
    refuses the imported layers that cannot take it, by name."""
    return {"mask_zero": True} if a.expect("mask_zero", False, True, None) else {}


def embedding(a: Args, shapes: Shapes) -> dict[str, Any]:
    a.expect("lora_rank", None, why="LoRA adapters have no spec form")
    a.get("input_length")  # Keras 2: a shape check only
    out = {"op": "embedding", "vocab_size": a.integer("input_dim"), "dim": a.integer("output_dim"), **_mask_zero(a)}
    if (init := a.initializer("embeddings_initializer")) not in (None, "random_uniform"):
        out["embeddings_init"] = init
    return out


def identity(a: Args, shapes: Shapes) -> None:
    return None


def layer_scale(a: Args, shapes: Shapes) -> dict[str, Any]:
    a.get("projection_dim")  # the channel count, which the spec infers
    return {"op": "scale", "init_values": a.number("init_values")}


def custom_scale(a: Args, shapes: Shapes) -> list[Part]:
    """InceptionResNetV2's `x[0] + x[1] * scale`: Keras multiplies by the float32 constant, then adds; a rescale
    (x * scale, no offset) then an add are the same float32 operations in the same order, so bitwise equal."""
    if len(shapes) != 2:
        raise a.refuse("scale", "it adds two inputs")
    return [Part({"op": "rescale", "scale": a.number("scale")}, [1], "scaled"), Part({"op": "add"}, [0, "scaled"])]
