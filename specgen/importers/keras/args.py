"""Reading one Keras layer's arguments: every key is either mapped, dropped with a note, or refused.

`Args.finish()` refuses any key no converter looked at (unless its value is the neutral one),
so a Keras argument the importer does not know is an error naming it, never silently ignored.
What is dropped are training-only arguments (regularizers, constraints, dropout's noise shape
and seed, initializers specgen cannot write): they change no output of the imported weights,
and the written spec lists them in a comment.
"""

from __future__ import annotations

from typing import Any

from specgen.diagnostics import safe_repr, shown
from specgen.fields.base import MAX_INT
from specgen.importers.keras.dag import KLayer
from specgen.importers.keras.errors import ImportProblem, layer_problem
from specgen.importers.keras.objects import finite, is_integer, kind_of, known, problem
from specgen.kinds.initializers import REGISTRY as INITIALIZER_KINDS
from specgen.kinds.ops import REGISTRY

# Keys every layer config has that say nothing about what the layer computes.
COMMON = ("name", "trainable", "dtype", "batch_input_shape", "batch_shape", "input_shape", "autocast")
# Training-only arguments dropped with a note: none changes an output of the imported weights.
TRAINING_ONLY = ("kernel_regularizer", "bias_regularizer", "activity_regularizer", "kernel_constraint",
                 "bias_constraint", "depthwise_regularizer", "depthwise_constraint", "pointwise_regularizer",
                 "pointwise_constraint", "beta_regularizer", "gamma_regularizer", "beta_constraint",
                 "gamma_constraint", "embeddings_regularizer", "embeddings_constraint", "seed", "noise_shape",
                 "recurrent_regularizer", "recurrent_constraint")
# Keras' activation names the importer reads: the ops whose AsActivation says Keras has one of that name.
ACTIVATIONS = tuple(name for name, op in REGISTRY.items() if op.as_activation is not None and op.as_activation.keras)
# Keras initializer class (or its snake-case name) -> specgen's kind, as each kind declares (specgen/kinds/initializers).
INITIALIZERS = {cls: kind.name for kind in INITIALIZER_KINDS.values() for cls in kind.keras} | {
    kind.name: kind.name for kind in INITIALIZER_KINDS.values() if kind.keras}
# VarianceScaling (scale, mode, distribution) that one of specgen's fan-based kinds is.
SCALING = {kind.scaling: kind.name for kind in INITIALIZER_KINDS.values() if kind.scaling is not None}
FLOAT_POLICIES = ("float32",)
_MISSING: Any = object()  # the default of a required argument


def _plain(value: Any) -> Any:
    """A Keras 3 serialized function ({"class_name": "function", "config": "relu"}) as its name."""
    if isinstance(value, dict) and value.get("class_name") == "function" and isinstance(value.get("config"), str):
        return value["config"]
    return value


def short(value: Any) -> str:
    """A config value for a message or a comment, one line, bounded."""
    if isinstance(value, dict) and isinstance(value.get("class_name"), str):
        inner = value.get("config") or {}
        inner = {k: v for k, v in inner.items() if v is not None} if isinstance(inner, dict) else inner
        text = f"{value['class_name']}({safe_repr(inner)})" if inner else value["class_name"]
    else:
        text = value if isinstance(value, str) else safe_repr(value)  # bounded: never the whole of a huge value
    return shown(text, 100)


def keras2_differs(activation: str) -> bool:
    """Keras 2's activation of this name is another function than specgen's (AsActivation.keras2): Keras 2's
    hard_sigmoid is 0.2 * x + 0.5, clipped; specgen's is Keras 3's relu6(x + 3) / 6."""
    use = REGISTRY[activation].as_activation
    return use is not None and not use.keras2


def activation_refusal(value: Any, keras2: bool, accepted: tuple[str, ...], what: str) -> str:
    """Why an activation cannot be imported. Keras 2's hard_sigmoid gets its own reason: the name is in the
    accepted list, so listing it again would read as a contradiction, and the fix is not another spelling."""
    if keras2 and isinstance(value, str) and value in accepted and keras2_differs(value):
        return (f"Keras 2's {value} is clip(0.2 x + 0.5, 0, 1), specgen's is Keras 3's relu6(x + 3) / 6, so the "
                "trained weights would compute other numbers; retrain the model with Keras 3, or change the "
                "activation before importing")
    return f"{what}: " + ", ".join(accepted[:-1]) + f" or {accepted[-1]}"


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

    def wrong(self, key: str, expected: str) -> ImportProblem:
        """A value of the wrong type or range: what was received and what was expected."""
        received = short(self.config[key]) if key in self.config else "nothing (the key is missing)"
        return layer_problem(self.layer.name, self.layer.cls, f"argument {key}: received {received}, "
                             f"expected {expected}")

    def integer(self, key: str, default: Any = _MISSING, minimum: int = 1) -> int:
        value = self.get(key, default)
        if not is_integer(value, minimum):
            raise self.wrong(key, "an integer" if minimum < 0 else f"an integer from {minimum} to {MAX_INT}")
        return int(value)

    def axis(self, key: str, default: Any = _MISSING) -> int:
        """An axis (negative counts from the end); whether the tensor has it is the spec's shape check."""
        return self.integer(key, default, minimum=-MAX_INT)

    def number(self, key: str, default: Any = _MISSING) -> float:
        value = finite(self.get(key, default))
        if value is None:
            raise self.wrong(key, "a finite number within float32's range")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self.wrong(key, "true or false")
        return value

    def pair(self, key: str, default: Any = _MISSING, minimum: int = 1) -> int | list[int]:
        """A Keras size: one integer or a pair, as a spec size (one integer when both agree)."""
        value = self.get(key, default)
        values = list(value) if isinstance(value, list | tuple) else [value] * 2
        if len(values) != 2 or not all(is_integer(v, minimum) for v in values):
            raise self.wrong(key, f"an integer from {minimum} to {MAX_INT}, or a pair of them")
        return values[0] if values[0] == values[1] else values

    def numbers(self, key: str, default: Any = _MISSING) -> float | list[float]:
        """One number, or one per channel."""
        value = self.get(key, default)
        values = [finite(v) for v in value] if isinstance(value, list | tuple) else [finite(value)]
        if not values or None in values:
            raise self.wrong(key, "a finite number within float32's range, or a list of them")
        return values if isinstance(value, list | tuple) else values[0]  # type: ignore[return-value]

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
        if not isinstance(value, str) or value not in ACTIVATIONS or (self.keras2 and keras2_differs(value)):
            raise self.refuse(key, activation_refusal(value, self.keras2, (*ACTIVATIONS, "linear"), "activation"))
        return value

    def initializer(self, key: str) -> str | dict[str, Any] | None:
        """The spec initializer, or None (left to specgen's default, with a note) when none matches. The value is
        read whole first (objects.py): a malformed one is refused, never left unread."""
        value = _plain(self.get(key))
        self._check_object(key, value)
        if value is None:
            return None
        name, config = (value, {}) if isinstance(value, str) else (value["class_name"], value.get("config") or {})
        kind = INITIALIZERS.get(name)
        if config.get("input_axes") is not None or config.get("output_axes") is not None:
            kind = None  # fans over other axes than specgen's kinds take
        elif name == "VarianceScaling":  # Keras' defaults; "normal" is its old name of truncated_normal
            distribution = config.get("distribution", "truncated_normal")
            kind = SCALING.get((float(config.get("scale", 1.0)), config.get("mode", "fan_in"),
                                "truncated_normal" if distribution == "normal" else distribution))
        if kind is None:
            self.note(key, value, "not one of specgen's initializers: the spec keeps its default, and the restore "
                      "sets these weights")
            return None
        if config.get("seed") is not None:
            self.note(key, value, "seed dropped: specgen seeds initializers from train.seed")
        keys = INITIALIZER_KINDS[kind].keys  # its spec keys, which Keras' config names alike
        values = {k: finite(config[k]) for k in keys if k in config}
        return {"kind": kind, **values} if keys else kind

    def _check_object(self, key: str, value: Any) -> None:
        """A Keras initializer, regularizer or constraint, read whole (objects.py); a custom class gets a note."""
        kind = kind_of(key)
        if kind is None:
            return
        if (why := problem(kind, value)) is not None:
            raise self.wrong(key, why)
        if not known(kind, value):
            self.note(key, value, f"a {kind} class Keras does not ship: specgen never runs a model's own code, and "
                      "its arguments were not read")

    def note(self, key: str, value: Any, why: str) -> None:
        self.notes.append((self.layer.name, f"{self.layer.cls} {key}={short(value)} ({why})"))

    def _check_dtype(self) -> None:
        dtype = self.config.get("dtype", "float32")
        name = dtype  # a string, or Keras 3's DTypePolicy {"config": {"name": ...}}
        if isinstance(dtype, dict) and isinstance(dtype.get("config"), dict):
            name = dtype["config"].get("name")
        if name not in (None, *FLOAT_POLICIES):
            raise self.refuse("dtype", "specgen layers compute in float32; mixed precision cannot be expressed")

    def finish(self) -> None:
        """Drop training-only arguments with a note; refuse every other key nobody read."""
        for key in sorted(set(self.config) - self.used):
            value = self.config[key]
            if value in (None, False, {}, []) or (key == "data_format" and value == "channels_last"):
                continue
            if key in TRAINING_ONLY:
                self._training_only(key, value)
                continue
            raise self.refuse(key, "the importer knows no spec form for it")

    def _training_only(self, key: str, value: Any) -> None:
        """Dropped with a note, once read: a regularizer or constraint whole (objects.py; a custom class has its
        own note), a seed or a noise shape by type."""
        kind = kind_of(key)
        if kind is not None:
            self._check_object(key, value)
            if not known(kind, value):
                return
        elif key == "seed" and not is_integer(value, -MAX_INT):
            raise self.wrong(key, "an integer or null")
        elif key == "noise_shape" and not (isinstance(value, list | tuple) and
                                           all(v is None or is_integer(v, 1) for v in value)):
            raise self.wrong(key, "a list of sizes or nulls, or null")
        self.note(key, value, "training only")
