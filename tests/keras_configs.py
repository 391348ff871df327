"""Keras model configs built as plain JSON, for the importer's hostile and size tests (no Keras needed).

The shapes follow what Keras 3 writes into a `.keras` file's config.json (`model.get_config()`,
checked against keras 3 by tests/test_import_keras_hostile.py) and what tf_keras writes into a
legacy `.h5` file's `model_config`. Hostile inputs are made from these at test time, never
committed as files. A written file also holds zero weights for the variables the config gives (the import
refuses a file that lacks any; issue 28).
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import h5py
import numpy as np

POLICY = {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": None}


def tensor(layer: str, node: int = 0, index: int = 0) -> dict[str, Any]:
    """A Keras 3 `__keras_tensor__` argument (the shape is informative only; the importer infers its own)."""
    return {"class_name": "__keras_tensor__", "config": {"shape": [None], "dtype": "float32",
                                                         "keras_history": [layer, node, index]}}


def input_layer(name: str, shape: list[Any]) -> dict[str, Any]:
    return {"module": "keras.layers", "class_name": "InputLayer", "name": name, "registered_name": None,
            "config": {"batch_shape": [None, *shape], "dtype": "float32", "sparse": False, "name": name},
            "inbound_nodes": []}


def layer(cls: str, name: str, config: dict[str, Any], *inputs: str) -> dict[str, Any]:
    """A Keras 3 layer entry called once on the outputs of `inputs` (a list of tensors when several)."""
    args: list[Any] = [tensor(i) for i in inputs]
    return {"module": "keras.layers", "class_name": cls, "name": name, "registered_name": None,
            "config": {"name": name, "trainable": True, "dtype": POLICY, **config},
            "inbound_nodes": [{"args": args if len(args) == 1 else [args], "kwargs": {}}]}


def functional(name: str, layers: list[dict[str, Any]], inputs: list[str], outputs: list[str]) -> dict[str, Any]:
    return {"module": "keras.src.models.functional", "class_name": "Functional",
            "config": {"name": name, "trainable": True, "layers": layers,
                       "input_layers": [[i, 0, 0] for i in inputs], "output_layers": [[o, 0, 0] for o in outputs]}}


def sequential(name: str, layers: list[dict[str, Any]], shape: list[int] | None = None) -> dict[str, Any]:
    """A Sequential model; with `shape`, its InputLayer comes first (a top-level model needs one)."""
    first = [{"module": "keras.layers", "class_name": "InputLayer", "registered_name": None,
              "config": {"batch_shape": [None, *shape], "dtype": "float32", "name": f"{name}_input"}}] if shape else []
    plain = [{k: v for k, v in entry.items() if k not in ("inbound_nodes", "name")} for entry in layers]
    return {"module": "keras", "class_name": "Sequential", "config": {"name": name, "trainable": True,
                                                                      "layers": first + plain}}


def dense(name: str, units: Any, *inputs: str) -> dict[str, Any]:
    return layer("Dense", name, {"units": units, "activation": "linear", "use_bias": True,
                                 "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform",
                                                        "config": {"seed": None}, "registered_name": None},
                                 "bias_initializer": {"module": "keras.initializers", "class_name": "Zeros",
                                                      "config": {}, "registered_name": None}}, *inputs)


def tiny() -> dict[str, Any]:
    """image (8, 8, 3) -> conv -> bn -> relu -> pool -> nested Sequential head (flatten, dense): 8 variables."""
    conv = layer("Conv2D", "conv", {"filters": 4, "kernel_size": [3, 3], "strides": [1, 1], "padding": "same",
                                    "data_format": "channels_last", "dilation_rate": [1, 1], "groups": 1,
                                    "activation": "linear", "use_bias": True}, "image")
    bn = layer("BatchNormalization", "bn", {"axis": -1, "momentum": 0.99, "epsilon": 0.001, "center": True,
                                            "scale": True}, "conv")
    relu = layer("ReLU", "relu", {"max_value": None, "negative_slope": 0.0, "threshold": 0.0}, "bn")
    pool = layer("MaxPooling2D", "pool", {"pool_size": [2, 2], "strides": [2, 2], "padding": "valid"}, "relu")
    head = sequential("head", [layer("Flatten", "flat", {}), dense("fc", 5)])
    head |= {"name": "head", "inbound_nodes": [{"args": [tensor("pool")], "kwargs": {}}]}
    return functional("tiny", [input_layer("image", [8, 8, 3]), conv, bn, relu, pool, head], ["image"], ["head"])


def keras2_layer(cls: str, name: str, config: dict[str, Any], *inputs: tuple[str, int]) -> dict[str, Any]:
    """A Keras 2 (tf_keras `.h5` model_config) layer entry: inbound nodes are [[layer, node, tensor, kwargs]]."""
    return {"class_name": cls, "name": name, "config": {"name": name, "trainable": True, "dtype": "float32", **config},
            "inbound_nodes": [[[i, node, 0, {}] for i, node in inputs]]}


def keras2_tiny() -> dict[str, Any]:
    """What tf_keras writes for image (8, 8, 3) -> SeparableConv2D -> bn -> nested Sequential head.

    tf_keras writes Conv's `kernel_initializer` for a SeparableConv2D, which never uses it, and counts the
    nodes of a nested model built on its own Input from 1 (node 0 is that Input's call, left out of the config).
    """
    glorot = {"module": "keras.initializers", "class_name": "GlorotUniform", "config": {"seed": None},
              "registered_name": None}
    image = {"class_name": "InputLayer", "name": "image", "inbound_nodes": [],
             "config": {"batch_input_shape": [None, 8, 8, 3], "dtype": "float32", "sparse": False, "name": "image"}}
    sep = keras2_layer("SeparableConv2D", "sep", {
        "filters": 4, "kernel_size": [3, 3], "strides": [1, 1], "padding": "same", "data_format": "channels_last",
        "dilation_rate": [1, 1], "groups": 1, "activation": "linear", "use_bias": True, "kernel_initializer": glorot,
        "depth_multiplier": 1, "depthwise_initializer": glorot, "pointwise_initializer": glorot}, ("image", 0))
    bn = keras2_layer("BatchNormalization", "bn", {"axis": [3], "momentum": 0.99, "epsilon": 0.001, "center": True,
                                                   "scale": True}, ("sep", 0))
    head_layers = [{"class_name": "InputLayer", "config": {"batch_input_shape": [None, 8, 8, 4], "dtype": "float32",
                                                           "name": "gap_input"}},
                   {"class_name": "GlobalAveragePooling2D", "config": {"name": "gap", "data_format": "channels_last"}},
                   {"class_name": "Dense", "config": {"name": "fc", "units": 3, "activation": "linear",
                                                      "use_bias": True, "kernel_initializer": glorot}}]
    head = {"class_name": "Sequential", "name": "head", "config": {"name": "head", "layers": head_layers},
            "inbound_nodes": [[["bn", 0, 0, {}]]]}
    return {"class_name": "Functional", "config": {"name": "tiny2", "layers": [image, sep, bn, head],
                                                   "input_layers": [["image", 0, 0]],
                                                   "output_layers": [["head", 1, 0]]}}


def wide() -> dict[str, Any]:
    """Many of the classes the importer reads, with their arguments: a seed for the fuzz test."""
    conv = {"kernel_size": [3, 3], "strides": [1, 1], "padding": "same", "data_format": "channels_last",
            "dilation_rate": [1, 1], "activation": "relu", "use_bias": True}
    layers = [
        input_layer("image", [8, 8, 3]), input_layer("vec", [6]),
        layer("Rescaling", "scale", {"scale": 0.5, "offset": [0.0, 1.0, 2.0]}, "image"),
        layer("ZeroPadding2D", "pad", {"padding": [[1, 0], [0, 1]], "data_format": "channels_last"}, "scale"),
        layer("DepthwiseConv2D", "dw", {**conv, "depth_multiplier": 2}, "pad"),
        layer("Conv2DTranspose", "up", {**conv, "filters": 4, "output_padding": None}, "dw"),
        layer("Cropping2D", "crop", {"cropping": [[1, 0], [0, 1]], "data_format": "channels_last"}, "up"),
        layer("AveragePooling2D", "avg", {"pool_size": [2, 2], "strides": None, "padding": "valid"}, "crop"),
        layer("UpSampling2D", "ups", {"size": [2, 2], "interpolation": "bilinear", "data_format": "channels_last"},
              "avg"),
        layer("LayerNormalization", "ln", {"axis": -1, "epsilon": 0.001, "center": True, "scale": True}, "ups"),
        layer("GlobalMaxPooling2D", "gmp", {"keepdims": False, "data_format": "channels_last"}, "ln"),
        layer("Dropout", "drop", {"rate": 0.25, "noise_shape": None, "seed": None}, "vec"),
        layer("LeakyReLU", "leaky", {"negative_slope": 0.2}, "drop"),
        dense("proj", 4, "leaky"),
        layer("Concatenate", "cat", {"axis": -1}, "gmp", "proj"),
        layer("Softmax", "soft", {"axis": -1}, "cat"),
        layer("Reshape", "rs", {"target_shape": [2, 4]}, "soft"),
        layer("Activation", "act", {"activation": "tanh"}, "rs"),
        layer("Add", "sum", {}, "gmp", "proj"),
        layer("ELU", "elu", {"alpha": 1.0}, "sum"),
    ]
    return functional("wide", layers, ["image", "vec"], ["act", "elu"])


def chain(n: int) -> dict[str, Any]:
    """A functional model of `n` ReLU layers, each reading the previous one (the import-size test case)."""
    layers = [input_layer("x", [4])]
    for i in range(n):
        layers.append(layer("ReLU", f"r{i}", {}, layers[-1]["name"]))
    return functional("chain", layers, ["x"], [layers[-1]["name"]])


def nested_sequentials(depth: int) -> dict[str, Any]:
    """`depth` Sequential models, each the only layer of the one around it, a Dense in the innermost."""
    model = sequential(f"s{depth}", [dense("fc", 2)])
    for level in range(depth - 1, 0, -1):
        model = sequential(f"s{level}", [model], shape=[3] if level == 1 else None)
    return model


def write_keras(path: Path, config: dict[str, Any] | str, weights: bool = True) -> Path:
    """A `.keras` zip holding config.json and, where the importer can convert the config, a model.weights.h5 with
    a zero array for each of its variables (the import refuses a file that lacks any)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("config.json", config if isinstance(config, str) else json.dumps(config))
        stored = weights_for(config) if weights and isinstance(config, dict) else None
        if stored is not None:
            buffer = io.BytesIO()
            with h5py.File(buffer, "w") as h5:
                write_weights(h5, stored)
            archive.writestr("model.weights.h5", buffer.getvalue())
    return path


def weights_for(config: dict[str, Any], keras2: bool = False) -> dict[str, tuple[int, ...]] | None:
    """Keras weight key -> shape of the variables the importer gives `config` (None when it refuses the config):
    a fixture maker only, so that tests about configs import files that hold their weights."""
    from specgen.importers.keras.convert import convert
    from specgen.importers.keras.errors import ImportProblem
    from specgen.importers.keras.graph import flatten

    try:
        imp = convert(flatten(config), keras2)
    except (ImportProblem, RecursionError):
        return None
    return {key: imp.shapes[path] for path, key in imp.keys.items()}


def write_weights(h5: Any, stored: dict[str, tuple[int, ...]]) -> None:
    """Keras' legacy weight layout (`layer_names`, each group's `weight_names`), which runtime/keras_weights.py reads
    in any HDF5 weights file: key `<layer>/<rest>` is dataset `<layer>/<rest>` of group `<layer>`."""
    layers: dict[str, list[str]] = {}
    for key in stored:
        layer, rest = key.split("/", 1)
        layers.setdefault(layer, []).append(rest)
    h5.attrs["layer_names"] = [name.encode("utf-8", "surrogatepass") for name in layers]
    for layer, names in layers.items():
        group = h5.create_group(layer)
        group.attrs["weight_names"] = [n.encode("utf-8", "surrogatepass") for n in names]
        for name in names:
            group[name] = np.zeros(stored[f"{layer}/{name}"], np.float32)
