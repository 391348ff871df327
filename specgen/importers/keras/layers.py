"""One converter per Keras class: Keras arguments -> the keys of one spec layer.

A converter returns the layer's op and keys (without `name` / `input`), or None for a layer
that computes the identity (Activation('linear'), Identity), whose readers then read its input.
`ROLES` says where a spec variable's Keras weight name differs from its role. Classes not in
`CONVERTERS` are refused by convert.py, naming the class.

This module is the table; the converters live by family: core.py (dense, normalizations,
activations, reshapes, merges, preprocessing, embedding), convolution.py (2-D convolutions, pools,
padding), recurrent.py (LSTM / GRU / SimpleRNN), layers1d.py (1-D convolutions and pools),
attention.py (MultiHeadAttention), bidirectional.py (Bidirectional), with base.py's shared types and keys.
"""

from __future__ import annotations

from typing import Any

from specgen.importers.keras.attention import CONVERTERS_ATTENTION
from specgen.importers.keras.base import Converter
from specgen.importers.keras.bidirectional import CONVERTERS_BIDIRECTIONAL
from specgen.importers.keras.convolution import (
    conv2d,
    conv2d_transpose,
    crop,
    depthwise_conv2d,
    global_pool,
    pad,
    pool,
    separable_conv2d,
    upsample,
)
from specgen.importers.keras.core import (
    activation,
    batch_norm,
    concat,
    custom_scale,
    dense,
    dropout,
    elu,
    embedding,
    flatten,
    identity,
    layer_norm,
    layer_scale,
    leaky_relu,
    merge,
    normalize,
    relu,
    rescale,
    reshape,
    softmax,
)
from specgen.importers.keras.layers1d import CONVERTERS_1D
from specgen.importers.keras.recurrent import KERAS2_CELLS, RECURRENT_CLASSES, recurrent

# Keras class -> {spec role: Keras 2 weight name} where they differ (weight keys are <layer>/<Keras name>).
# Keras 3 names every variable as specgen does (DepthwiseConv2D's is `kernel`); Keras 2 did not.
# Keras 2 keeps a recurrent layer's weights under its cell, whose name is the same in every layer.
KERAS2_ROLES = {"DepthwiseConv2D": {"kernel": "depthwise_kernel"},
                **{cls: {role: f"{cell}/{role}" for role in ("kernel", "recurrent_kernel", "bias")}
                   for cls, cell in KERAS2_CELLS.items()}}


def legacy_roles(cls: str, config: dict[str, Any]) -> dict[str, str]:
    """{spec role: weight name} in the legacy HDF5 layout, which Keras 2 and Keras 3's `model.save("x.h5")` both
    write (the variables' paths: `lstm_cell/kernel`; a Bidirectional's `forward_lstm/lstm_cell/kernel`). Which
    layout a file holds is told by the names in it (importers/keras/__init__.py), not by the Keras version."""
    if cls != "Bidirectional":
        return KERAS2_ROLES.get(cls, {})
    halves: dict[str, str] = {}
    for half, key in (("forward", "layer"), ("backward", "backward_layer")):
        wrapped = config.get(key)
        inner = wrapped.get("config") if isinstance(wrapped, dict) else None
        name = inner.get("name") if isinstance(inner, dict) else None
        if half == "backward" and not isinstance(name, str):  # Keras makes the copy: backward_<layer>
            forward = config.get("layer", {}).get("config", {}).get("name")
            name = f"backward_{forward.removeprefix('forward_')}" if isinstance(forward, str) else None
        elif half == "forward" and isinstance(name, str) and not name.startswith("forward_"):
            name = f"forward_{name}"
        cell = KERAS2_CELLS.get(str(wrapped.get("class_name"))) if isinstance(wrapped, dict) else None
        if isinstance(name, str) and cell is not None:
            halves |= {f"{half}/{role}": f"{name}/{cell}/{role}" for role in ("kernel", "recurrent_kernel", "bias")}
    return halves


CONVERTERS: dict[str, Converter] = {
    "Dense": dense, "Conv2D": conv2d, "DepthwiseConv2D": depthwise_conv2d, "SeparableConv2D": separable_conv2d,
    "Conv2DTranspose": conv2d_transpose, "MaxPooling2D": pool, "AveragePooling2D": pool,
    "GlobalAveragePooling2D": global_pool, "GlobalMaxPooling2D": global_pool,
    "BatchNormalization": batch_norm, "LayerNormalization": layer_norm, "Activation": activation, "ReLU": relu,
    "LeakyReLU": leaky_relu, "ELU": elu, "Softmax": softmax, "ZeroPadding2D": pad, "Cropping2D": crop,
    "UpSampling2D": upsample, "Flatten": flatten, "Reshape": reshape, "Dropout": dropout, "Add": merge,
    "Multiply": merge, "Subtract": merge, "Concatenate": concat, "Rescaling": rescale,
    "Normalization": normalize, "Embedding": embedding, "Identity": identity,
    **{cls: recurrent for cls in RECURRENT_CLASSES},
    # the families with modules of their own; last, so that they win as convert.py's lookup order had them
    **CONVERTERS_1D, **CONVERTERS_ATTENTION, **CONVERTERS_BIDIRECTIONAL,
}


# Keras' own classes outside keras.layers, known by (module, class): never imported, read from their config.
APPLICATION_CLASSES: dict[tuple[str, str], Converter] = {
    ("keras.src.applications.convnext", "LayerScale"): layer_scale,
    ("keras.src.applications.inception_resnet_v2", "CustomScaleLayer"): custom_scale,
}
