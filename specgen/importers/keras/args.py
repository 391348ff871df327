"""Reading one Keras layer's arguments: every key is either mapped, dropped with a note, or refused.

`Args.finish()` refuses any key no converter looked at (unless its value is the neutral one),
so a Keras argument the importer does not know is an error naming it, never silently ignored.
What is dropped are training-only arguments (regularizers, constraints, dropout's noise shape
and seed, initializers specgen cannot write): they change no output of the imported weights,
and the written spec lists them in a comment.
"""

from __future__ import annotations

from typing import Any

from specgen.importers.keras.errors import ImportProblem, layer_problem
from specgen.importers.keras.graph import KLayer

# Keys every layer config has that say nothing about what the layer computes.
COMMON = ("name", "trainable", "dtype", "batch_input_shape", "batch_shape", "input_shape", "autocast")
# Training-only arguments dropped with a note: none changes an output of the imported weights.
TRAINING_ONLY = ("kernel_regularizer", "bias_regularizer", "activity_regularizer", "kernel_constraint",
                 "bias_constraint", "depthwise_regularizer", "depthwise_constraint", "pointwise_regularizer",
                 "pointwise_constraint", "beta_regularizer", "gamma_regularizer", "beta_constraint",
                 "gamma_constraint", "embeddings_regularizer", "embeddings_constraint", "seed", "noise_shape")
ACTIVATIONS = ("relu", "relu6", "leaky_relu", "elu", "selu", "gelu", "sigmoid", "hard_sigmoid", "tanh", "softplus",
               "swish", "silu", "hard_swish", "hard_silu", "softmax")
# Keras 2's hard_sigmoid is 0.2 * x + 0.5, clipped; specgen's is Keras 3's relu6(x + 3) / 6.
KERAS2_DIFFERENT = ("hard_sigmoid",)
INITIALIZERS = {"GlorotUniform": "glorot_uniform", "GlorotNormal": "glorot_normal", "HeNormal": "he_normal",
                "HeUniform": "he_uniform", "Zeros": "zeros", "Ones": "ones", "Constant": "constant",
                "RandomNormal": "random_normal", "TruncatedNormal": "truncated_normal",
                "RandomUniform": "random_uniform"}
# VarianceScaling (scale, mode, distribution) that one of specgen's fan-based kinds is.
SCALING = {(1.0, "fan_avg", "uniform"): "glorot_uniform", (1.0, "fan_avg", "truncated_normal"): "glorot_normal",
           (2.0, "fan_in", "truncated_normal"): "he_normal", (2.0, "fan_in", "uniform"): "he_uniform"}
FLOAT_POLICIES = ("float32",)


def _plain(value: Any) -> Any:
    """A Keras 3 serialized function ({"class_name": "function", "config": "relu"}) as its name."""
    if isinstance(value, dict) and value.get("class_name") == "function" and isinstance(value.get("config"), str):
        return value["config"]
    return value


def short(value: Any) -> str:
    """A config value for a message or a comment, one line, bounded."""
    if isinstance(value, dict) and "class_name" in value:
        inner = value.get("config") or {}
        inner = {k: v for k, v in inner.items() if v is not None} if isinstance(inner, dict) else inner
        text = f"{value['class_name']}({inner})" if inner else str(value["class_name"])
    else:
        text = str(value)
    return text if len(text) <= 100 else text[:97] + "..."


class Args:
    """One layer's config, read key by key."""

    def __init__(self, layer: KLayer, keras2: bool, notes: list[tuple[str, str]]):
        self.layer, self.config, self.keras2, self.notes = layer, layer.config, keras2, notes
        self.used: set[str] = set(COMMON)
        self._check_dtype()

    def refuse(self, key: str, expected: str) -> ImportProblem:
        value = self.config.get(key)
        return layer_problem(self.layer.name, self.layer.cls, f"argument {key}={short(value)} cannot be expressed "
                             f"in a spec ({expected})")

    def get(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        return _plain(self.config.get(key, default))

    def expect(self, key: str, *allowed: Any, why: str = "") -> Any:
        """The value of `key`, which must be one of `allowed` (a missing key counts as allowed[0])."""
        value = self.get(key, allowed[0])
        normal = list(value) if isinstance(value, tuple) else value
        if normal not in allowed and not (isinstance(normal, list) and tuple(normal) in allowed):
            raise self.refuse(key, why or f"expected {' or '.join(map(repr, allowed))}")
        return value

    def activation(self, key: str = "activation") -> str | None:
        value = self.get(key, "linear")
        if value in (None, "linear"):
            return None
        if not isinstance(value, str) or value not in ACTIVATIONS or (self.keras2 and value in KERAS2_DIFFERENT):
            raise self.refuse(key, "activation: " + ", ".join(ACTIVATIONS) + " or linear"
                              + (" (Keras 2's hard_sigmoid differs from Keras 3's)" if self.keras2 else ""))
        return value

    def initializer(self, key: str) -> str | dict[str, Any] | None:
        """The spec initializer, or None (left to specgen's default, with a note) when none matches."""
        value = _plain(self.get(key))
        if value is None:
            return None
        name, config = (value, {}) if isinstance(value, str) else (value.get("class_name"), value.get("config") or {})
        kind = INITIALIZERS.get(str(name)) or {v: v for v in INITIALIZERS.values()}.get(str(name))
        if name == "VarianceScaling":
            kind = SCALING.get((float(config.get("scale", 1.0)), config.get("mode"), config.get("distribution")))
        if kind is None:
            self.note(key, value, "not one of specgen's initializers: the spec keeps its default, and the restore "
                      "sets these weights")
            return None
        if config.get("seed") is not None:
            self.note(key, value, "seed dropped: specgen seeds initializers from train.seed")
        keys = {"constant": ("value",), "random_normal": ("mean", "stddev"), "truncated_normal": ("mean", "stddev"),
                "random_uniform": ("minval", "maxval")}.get(kind, ())
        return {"kind": kind, **{k: float(config[k]) for k in keys if k in config}} if keys else kind

    def note(self, key: str, value: Any, why: str) -> None:
        self.notes.append((self.layer.name, f"{self.layer.cls} {key}={short(value)} ({why})"))

    def _check_dtype(self) -> None:
        dtype = self.config.get("dtype", "float32")
        name = dtype if isinstance(dtype, str) or dtype is None else (dtype.get("config") or {}).get("name")
        if name not in (None, *FLOAT_POLICIES):
            raise self.refuse("dtype", "specgen layers compute in float32; mixed precision cannot be expressed")

    def finish(self) -> None:
        """Drop training-only arguments with a note; refuse every other key nobody read."""
        for key in sorted(set(self.config) - self.used):
            value = self.config[key]
            if value in (None, False, {}, []) or (key == "data_format" and value == "channels_last"):
                continue
            if key in TRAINING_ONLY:
                self.note(key, value, "training only")
                continue
            raise self.refuse(key, "the importer knows no spec form for it")
