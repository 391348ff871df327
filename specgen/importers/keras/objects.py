"""Keras initializers, regularizers and constraints in a layer config, read whole before anything uses them.

A layer config names them by string (`"he_normal"`) or as a serialized object (`{"class_name": "VarianceScaling",
"config": {"scale": 2.0, ...}}`). The importer maps an initializer to the spec's where one matches and drops
regularizers and constraints (training only, with a note), but it reads every argument of a class Keras ships
first, with the types Keras' constructor takes (keras/src/initializers, regularizers, constraints; their
`get_config()` keys and constructor arguments, which tests/test_import_keras_objects.py compares with
Keras'): a malformed config
(`VarianceScaling(scale="x")`, an argument the class does not take) is refused, never skipped unread. A class
Keras does not ship (a custom object) is never run: it is dropped with a note saying its arguments were not read.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from specgen.fields.base import FLOAT32_BOUND, MAX_INT

Check = Callable[[Any], bool]


def finite(value: Any) -> float | None:
    """A JSON number as a float within float32's finite range; None for anything else (booleans, strings,
    NaN, infinities, 1e39, integers too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) and abs(number) <= FLOAT32_BOUND else None  # as a spec's floats


def is_integer(value: Any, minimum: int) -> bool:
    """An integer (not a boolean) from `minimum` to MAX_INT."""
    return isinstance(value, int) and not isinstance(value, bool) and minimum <= value <= MAX_INT


INT64 = 2**63 - 1


def _number(value: Any) -> bool:
    return finite(value) is not None


def _at_least_zero(value: Any) -> bool:
    number = finite(value)
    return number is not None and number >= 0


def _positive(value: Any) -> bool:
    number = finite(value)
    return number is not None and number > 0


def _seed(value: Any) -> bool:
    """An integer, null, or a serialized keras.random.SeedGenerator (the seed is dropped: never read further)."""
    if isinstance(value, dict):
        return value.get("class_name") == "SeedGenerator"
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and -INT64 <= value <= INT64)


def _axes(value: Any) -> bool:
    """An axis, a list of them, or None (Keras' default)."""
    items = value if isinstance(value, list) else [value]
    return value is None or (bool(items) and all(is_integer(a, -32) and a < 32 for a in items))


def _one_of(*allowed: Any) -> Check:
    def check(value: Any) -> bool:
        return any(value == a and type(value) is type(a) for a in allowed)

    check.__doc__ = " or ".join(repr(a) for a in allowed)
    return check


def _flag(value: Any) -> bool:
    return isinstance(value, bool)


def _window(value: Any) -> bool:
    return value is None or isinstance(value, str) or (isinstance(value, list) and all(map(_number, value)))


EXPECTED: dict[Check, str] = {_number: "a finite number within float32's range", _at_least_zero: "a number from 0",
            _positive: "a number above 0", _seed: "an integer or null", _axes: "an axis, a list of axes, or null",
            _flag: "true or false", _window: "a window name, a list of numbers, or null"}
_FAN: dict[str, Check] = {"seed": _seed, "input_axes": _axes, "output_axes": _axes}
_NORMAL: dict[str, Check] = {"seed": _seed, "mean": _number, "stddev": _at_least_zero}
INITIALIZERS: dict[str, dict[str, Check]] = {
    "Zeros": {}, "Ones": {}, "Constant": {"value": _number},
    "Identity": {"gain": _number}, "IdentityInitializer": {"gain": _number},
    "RandomNormal": _NORMAL, "TruncatedNormal": _NORMAL,
    "RandomUniform": {"seed": _seed, "minval": _number, "maxval": _number},
    "VarianceScaling": {**_FAN, "scale": _positive, "mode": _one_of("fan_in", "fan_out", "fan_avg"),
                        "distribution": _one_of("truncated_normal", "untruncated_normal", "uniform", "normal")},
    **{c: _FAN for c in ("GlorotNormal", "GlorotUniform", "HeNormal", "HeUniform", "LecunNormal", "LecunUniform")},
    "Orthogonal": {"seed": _seed, "gain": _number}, "OrthogonalInitializer": {"seed": _seed, "gain": _number},
    **{c: {"side": _one_of("real", "imag"), "window": _window, "periodic": _flag,
           "scaling": _one_of("density", "spectrum", None)} for c in ("STFT", "STFTInitializer")},
}
REGULARIZERS: dict[str, dict[str, Check]] = {
    "L1": {"l1": _at_least_zero}, "L2": {"l2": _at_least_zero}, "L1L2": {"l1": _at_least_zero, "l2": _at_least_zero},
    "OrthogonalRegularizer": {"factor": _at_least_zero, "mode": _one_of("rows", "columns")},
}
CONSTRAINTS: dict[str, dict[str, Check]] = {
    "MaxNorm": {"max_value": _positive, "axis": _axes}, "NonNeg": {}, "UnitNorm": {"axis": _axes},
    "MinMaxNorm": {"min_value": _at_least_zero, "max_value": _at_least_zero, "rate": _at_least_zero, "axis": _axes},
}
# The names Keras' `get()` takes for each (the snake-case keys of keras/src/*/__init__.py's ALL_OBJECTS_DICT).
NAMES = {"initializer": {"zeros", "zero", "ones", "one", "constant", "identity", "random_normal", "normal",
                         "truncated_normal", "random_uniform", "uniform", "variance_scaling", "glorot_normal",
                         "glorot_uniform", "he_normal", "he_uniform", "lecun_normal", "lecun_uniform", "orthogonal",
                         "stft"},
         "regularizer": {"l1", "l2", "l1l2", "orthogonal_regularizer"},
         "constraint": {"max_norm", "non_neg", "unit_norm", "min_max_norm"}}
TABLES = {"initializer": INITIALIZERS, "regularizer": REGULARIZERS, "constraint": CONSTRAINTS}


def kind_of(key: str) -> str | None:
    """Which table a layer argument's value is read with (`kernel_initializer` -> initializer), if any."""
    return next((kind for kind in TABLES if key.endswith(f"_{kind}")), None)


def problem(kind: str, value: Any) -> str | None:
    """Why `value` is not a well-formed Keras `kind` (None, a name, or a serialized object), or None when it is.
    An object of a class Keras does not ship is well-formed: its arguments are never read (`known` says so)."""
    if value is None or (isinstance(value, str) and (value in NAMES[kind] or value in TABLES[kind])):
        return None
    if isinstance(value, str):
        return f"the name of a Keras {kind} ({', '.join(sorted(NAMES[kind]))})"
    if not isinstance(value, dict) or not isinstance(value.get("class_name"), str):
        return f"a Keras {kind}: a name, or {{class_name, config}}"
    config = value.get("config")
    config = {} if config is None else config
    if not isinstance(config, dict):
        return f"a Keras {kind} whose config is a mapping of its arguments"
    accepted = TABLES[kind].get(value["class_name"])
    if accepted is None:
        return None
    unknown = sorted(set(config) - set(accepted))
    if unknown:
        return f"only the arguments Keras' {value['class_name']} takes ({', '.join(accepted) or 'none'})"
    for name, check in accepted.items():
        if name in config and not (config[name] is None and name in ("seed", "input_axes", "output_axes", "axis")) \
                and not check(config[name]):
            return f"{value['class_name']} with {name} {EXPECTED.get(check) or check.__doc__}"
    return None


def known(kind: str, value: Any) -> bool:
    """Whether a well-formed `value` is a class Keras ships (its arguments were read), not a custom object."""
    name = value.get("class_name") if isinstance(value, dict) else value
    return value is None or name in TABLES[kind] or name in NAMES[kind]
