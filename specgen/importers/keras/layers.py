"""One converter per Keras class: Keras arguments -> the keys of one spec layer.

A converter returns the layer's op and keys (without `name` / `input`), or None for a layer
that computes the identity (Activation('linear'), Identity), whose readers then read its input.
`ROLES` says where a spec variable's Keras weight name differs from its role. Classes not in
`CONVERTERS` are refused by convert.py, naming the class.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specgen.importers.keras.args import Args, is_integer
from specgen.importers.keras.errors import layer_problem
from specgen.importers.keras.graph import Ref
from specgen.spec.base import MAX_INT

Shapes = list[tuple[Any, ...]]  # input shapes with the batch dimension first (None)


@dataclass
class Part:
    """One of several spec layers that together compute one Keras layer (in order; the last is named as the
    Keras layer, the others `<layer>_<suffix>`). `reads` are the Keras layer's input indexes, or the suffix
    of an earlier part."""

    keys: dict[str, Any]
    reads: list[int | str]
    suffix: str = ""


Converter = Callable[[Args, Shapes], dict[str, Any] | list[Part] | None]

# spec op -> {spec role: Keras 2 weight name} where they differ (weight keys are <layer>/<Keras name>).
# Keras 3 names every variable as specgen does (DepthwiseConv2D's is `kernel`); Keras 2 did not.
# Keras 2 keeps a recurrent layer's weights under its cell, whose name is the same in every layer.
KERAS2_ROLES = {"depthwise_conv2d": {"kernel": "depthwise_kernel"},
                **{op: {role: f"{op}_cell/{role}" for role in ("kernel", "recurrent_kernel", "bias")}
                   for op in ("lstm", "gru", "simple_rnn")}}


def _sides(a: Args, key: str, default: int) -> int | list[Any]:
    """ZeroPadding2D / Cropping2D amounts (n, (rows, cols) or ((top, bottom), (left, right))), shortest spec form."""
    value = a.get(key, default)
    pairs = [value, value] if is_integer(value, 0) else value
    flat = []
    if isinstance(pairs, list | tuple) and len(pairs) == 2:
        pairs = [[p, p] if is_integer(p, 0) else p for p in pairs]
        flat = [v for p in pairs if isinstance(p, list | tuple) and len(p) == 2 for v in p]
    if len(flat) != 4 or not all(is_integer(v, 0) for v in flat):
        raise a.wrong(key, "n, (rows, cols) or ((top, bottom), (left, right)) of integers >= 0")
    top, bottom, left, right = flat
    if top == bottom and left == right:
        return top if top == left else [top, left]
    return [[top, bottom], [left, right]]


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


def _windowed(a: Args) -> dict[str, Any]:
    a.expect("data_format", "channels_last", None, why="specgen images are channels-last")
    return {"padding": a.expect("padding", "valid", "same", why="padding 'valid' or 'same'")}


def _bias_act(a: Args, out: dict[str, Any], bias_key: str | None = "bias_initializer") -> dict[str, Any]:
    if (act := a.activation()) is not None:
        out["activation"] = act
    if not a.flag("use_bias", True):
        out["use_bias"] = False
    if bias_key and (init := a.initializer(bias_key)) not in (None, "zeros"):
        out["bias_init"] = init
    return out


def _init(a: Args, out: dict[str, Any], key: str, spec_key: str) -> None:
    if (init := a.initializer(key)) not in (None, "glorot_uniform"):
        out[spec_key] = init


def dense(a: Args, shapes: Shapes) -> dict[str, Any]:
    a.expect("lora_rank", None, why="LoRA adapters have no spec form")
    a.expect("quantization_config", None, why="quantized layers have no spec form")
    out = {"op": "dense", "units": a.integer("units")}
    _init(a, out, "kernel_initializer", "kernel_init")
    return _bias_act(a, out)


def _conv_window(a: Args, out: dict[str, Any], dilation: bool = True) -> dict[str, Any]:
    out |= {"kernel": a.pair("kernel_size")}
    if (strides := a.pair("strides", 1)) != 1:
        out["strides"] = strides
    out |= _windowed(a)
    if dilation and (rate := a.pair("dilation_rate", 1)) != 1:
        out["dilation"] = rate
    return out


def conv2d(a: Args, shapes: Shapes) -> dict[str, Any]:
    a.expect("lora_rank", None, why="LoRA adapters have no spec form")
    out = _conv_window(a, {"op": "conv2d", "filters": a.integer("filters")})
    if (groups := a.integer("groups", 1)) != 1:
        out["groups"] = groups
    _init(a, out, "kernel_initializer", "kernel_init")
    return _bias_act(a, out)


def depthwise_conv2d(a: Args, shapes: Shapes) -> dict[str, Any]:
    a.expect("groups", 1, None)  # Keras 2 keeps Conv's groups in the config
    out = _conv_window(a, {"op": "depthwise_conv2d"})
    if (mult := a.integer("depth_multiplier", 1)) != 1:
        out["depth_multiplier"] = mult
    _init(a, out, "depthwise_initializer", "kernel_init")
    return _bias_act(a, out)


def separable_conv2d(a: Args, shapes: Shapes) -> dict[str, Any]:
    a.expect("groups", 1, None)
    if a.keras2:  # tf_keras writes its base Conv's kernel_initializer, which a SeparableConv2D never uses
        a.get("kernel_initializer")
    out = _conv_window(a, {"op": "separable_conv2d", "filters": a.integer("filters")})
    if (mult := a.integer("depth_multiplier", 1)) != 1:
        out["depth_multiplier"] = mult
    _init(a, out, "depthwise_initializer", "depthwise_init")
    _init(a, out, "pointwise_initializer", "pointwise_init")
    return _bias_act(a, out)


def conv2d_transpose(a: Args, shapes: Shapes) -> dict[str, Any]:
    a.expect("dilation_rate", 1, [1, 1], why="conv2d_transpose has no dilation")
    a.expect("groups", 1, None)
    out = _conv_window(a, {"op": "conv2d_transpose", "filters": a.integer("filters")}, dilation=False)
    if a.get("output_padding") is not None:
        out["output_padding"] = a.pair("output_padding", minimum=0)
    _init(a, out, "kernel_initializer", "kernel_init")
    return _bias_act(a, out)


def pool(op: str) -> Converter:
    def convert(a: Args, shapes: Shapes) -> dict[str, Any]:
        size = a.pair("pool_size", 2)
        out = {"op": op, "size": size} | _windowed(a)
        if a.get("strides") is not None and (strides := a.pair("strides")) != size:
            out["strides"] = strides
        return out
    return convert


def global_pool(op: str) -> Converter:
    def convert(a: Args, shapes: Shapes) -> dict[str, Any]:
        a.expect("data_format", "channels_last", None, why="specgen images are channels-last")
        return {"op": op, **({"keepdims": True} if a.flag("keepdims", False) else {})}
    return convert


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


def pad(a: Args, shapes: Shapes) -> dict[str, Any]:
    a.expect("data_format", "channels_last", None, why="specgen images are channels-last")
    return {"op": "pad", "padding": _sides(a, "padding", 1)}


def crop(a: Args, shapes: Shapes) -> dict[str, Any]:
    a.expect("data_format", "channels_last", None, why="specgen images are channels-last")
    return {"op": "crop", "cropping": _sides(a, "cropping", 0)}


def upsample(a: Args, shapes: Shapes) -> dict[str, Any]:
    a.expect("data_format", "channels_last", None, why="specgen images are channels-last")
    out = {"op": "upsample", "size": a.pair("size", 2)}
    if (mode := a.expect("interpolation", "nearest", "bilinear")) != "nearest":
        out["interpolation"] = mode
    return out


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


def merge(op: str) -> Converter:
    def convert(a: Args, shapes: Shapes) -> dict[str, Any]:
        return {"op": op}
    return convert


def concat(a: Args, shapes: Shapes) -> dict[str, Any]:
    axis = a.axis("axis", -1)
    return {"op": "concat", **({"axis": axis} if axis != -1 else {})}


def rescale(a: Args, shapes: Shapes) -> dict[str, Any]:
    out = {"op": "rescale", "scale": a.numbers("scale")}
    if (offset := a.numbers("offset", 0.0)) != 0.0:
        out["offset"] = offset
    return out


def normalize(a: Args, shapes: Shapes) -> dict[str, Any]:
    _last_axis(a, "axis", len(shapes[0]))
    a.expect("invert", False, None, why="no spec form for the inverse")
    if a.get("mean") is None or a.get("variance") is None:  # adapted: the statistics are weights, set by the restore
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


RECURRENT_OPS = {"LSTM": "lstm", "GRU": "gru", "SimpleRNN": "simple_rnn"}
RECURRENT_ACTIVATIONS = ("tanh", "sigmoid", "relu", "hard_sigmoid")  # specgen/kinds/ops/recurrent.py


def _cell_activation(a: Args, key: str, default: str) -> str:
    value = a.get(key, default)
    if value not in RECURRENT_ACTIVATIONS or (a.keras2 and value == "hard_sigmoid"):
        raise a.refuse(key, "a recurrent activation: " + ", ".join(RECURRENT_ACTIVATIONS)
                       + (" (Keras 2's hard_sigmoid differs from Keras 3's)" if a.keras2 else ""))
    return str(value)


INITIAL_STATES = "_initial_states"  # how many of the layer's inputs (the last ones) are initial_state; convert.py pops it


def _initial_state(a: Args) -> dict[str, Any]:
    """Keras' `layer(x, initial_state=[...])`: the tensors follow x in KLayer.inputs (graph.py's CALL_KWARGS)."""
    states = a.layer.kwargs.get("initial_state")
    if states is None:
        return {}
    states = [states] if isinstance(states, Ref) else states  # Keras records one state as the tensor itself
    if not isinstance(states, list) or not all(isinstance(s, Ref) for s in states):
        raise layer_problem(a.layer.name, a.layer.cls, f"initial_state {str(states)[:80]} is not a list of tensors")
    return {INITIAL_STATES: len(states)}


def recurrent(a: Args, shapes: Shapes) -> dict[str, Any]:
    """LSTM / GRU / SimpleRNN: the spec keys that differ from the defaults (which are Keras')."""
    op = RECURRENT_OPS[a.layer.cls]
    for key, why in (("stateful", "specgen's recurrent layers start every batch from zeros"),
                     ("time_major", "specgen sequences are batch-major")):
        a.expect(key, False, None, why=why)
    for key in ("dropout", "recurrent_dropout"):  # it would train differently: refused, not dropped
        if a.number(key, 0.0) != 0.0:
            raise a.refuse(key, "specgen's recurrent layers have no dropout yet")
    a.expect("zero_output_for_mask", False, True, None)  # masks only, which specgen does not import yet
    a.get("unroll"), a.get("implementation")  # the same outputs whichever way Keras runs the loop
    out: dict[str, Any] = {"op": op, "units": a.integer("units"), **_initial_state(a)}
    for key in ("return_sequences", "return_state", "go_backwards"):  # states: `<layer>/state_h` ... (convert.py)
        if a.flag(key, False):
            out[key] = True
    if (act := _cell_activation(a, "activation", "tanh")) != "tanh":
        out["activation"] = act
    if op != "simple_rnn" and (rec := _cell_activation(a, "recurrent_activation", "sigmoid")) != "sigmoid":
        out["recurrent_activation"] = rec
    if op == "gru" and not a.flag("reset_after", True):
        out["reset_after"] = False
    if op == "lstm" and not a.flag("unit_forget_bias", True):
        out["unit_forget_bias"] = False
    if not a.flag("use_bias", True):
        out["use_bias"] = False
    _init(a, out, "kernel_initializer", "kernel_init")
    if (init := a.initializer("recurrent_initializer")) not in (None, {"kind": "orthogonal", "gain": 1.0}):
        out["recurrent_init"] = init
    if (init := a.initializer("bias_initializer")) not in (None, "zeros"):
        out["bias_init"] = init
    return out


def layer_scale(a: Args, shapes: Shapes) -> dict[str, Any]:
    a.get("projection_dim")  # the channel count, which the spec infers
    return {"op": "scale", "init_values": a.number("init_values")}


def custom_scale(a: Args, shapes: Shapes) -> list[Part]:
    """InceptionResNetV2's `x[0] + x[1] * scale`: Keras multiplies by the float32 constant, then adds; a rescale
    (x * scale, no offset) then an add are the same float32 operations in the same order, so bitwise equal."""
    if len(shapes) != 2:
        raise a.refuse("scale", "it adds two inputs")
    return [Part({"op": "rescale", "scale": a.number("scale")}, [1], "scaled"), Part({"op": "add"}, [0, "scaled"])]


def identity(a: Args, shapes: Shapes) -> None:
    return None


CONVERTERS: dict[str, Converter] = {
    "Dense": dense, "Conv2D": conv2d, "DepthwiseConv2D": depthwise_conv2d, "SeparableConv2D": separable_conv2d,
    "Conv2DTranspose": conv2d_transpose, "MaxPooling2D": pool("max_pool"), "AveragePooling2D": pool("avg_pool"),
    "GlobalAveragePooling2D": global_pool("global_avg_pool"), "GlobalMaxPooling2D": global_pool("global_max_pool"),
    "BatchNormalization": batch_norm, "LayerNormalization": layer_norm, "Activation": activation, "ReLU": relu,
    "LeakyReLU": leaky_relu, "ELU": elu, "Softmax": softmax, "ZeroPadding2D": pad, "Cropping2D": crop,
    "UpSampling2D": upsample, "Flatten": flatten, "Reshape": reshape, "Dropout": dropout, "Add": merge("add"),
    "Multiply": merge("multiply"), "Subtract": merge("subtract"), "Concatenate": concat, "Rescaling": rescale,
    "Normalization": normalize, "Embedding": embedding, "Identity": identity,
    **{cls: recurrent for cls in RECURRENT_OPS},
}
# Keras' own classes outside keras.layers, known by (module, class): never imported, read from their config.
APPLICATION_CLASSES: dict[tuple[str, str], Converter] = {
    ("keras.src.applications.convnext", "LayerScale"): layer_scale,
    ("keras.src.applications.inception_resnet_v2", "CustomScaleLayer"): custom_scale,
}
