"""Every registered initializer lacks nothing: model in the union, runtime function, moments, Keras class, docs.

The lists come from specgen.kinds.initializers.REGISTRY; each failure names the kind and what it
misses, so that adding an initializer module tells its author what else to write (docs/extending.md).
"""

from __future__ import annotations

import inspect
import math
from typing import Any, get_args

import numpy as np
import pytest
from kind_checks import literal_names, table_kinds, union_members
from pydantic import TypeAdapter, ValidationError
from test_registry_roundtrip import round_trip

from specgen.kinds.initializers import REGISTRY, Initializer, InitializerName, InitializerSpec
from specgen.kinds.pointers import resolve

KINDS = sorted(REGISTRY)
SPEC_KINDS = sorted(name for name, kind in REGISTRY.items() if kind.spec is not None)
# One entry of each kind, its keys away from their defaults; `unit_forget_bias` is the IR's (no spec key takes it).
EXAMPLES: dict[str, dict[str, Any]] = {
    "zeros": {}, "ones": {}, "constant": {"value": -0.25}, "random_normal": {"mean": 0.1, "stddev": 0.2},
    "truncated_normal": {"mean": -0.1, "stddev": 0.3}, "random_uniform": {"minval": -0.1, "maxval": 0.3},
    "glorot_uniform": {}, "glorot_normal": {}, "he_normal": {}, "he_uniform": {}, "orthogonal": {"gain": 1.5},
    "unit_forget_bias": {"value": 0.5},
}
# A kernel of 2**16 weights: fans 128 and 512 tell the fan-based kinds apart, and the sample moments of a draw are
# within 5 standard errors of the exact ones (below) with odds far beyond a flaky run.
SHAPE = (128, 512)
BIAS_SHAPE = (4 * 2**14,)  # unit_forget_bias: a bias of four gates


def _example(name: str) -> dict[str, Any]:
    """The keys a kind is drawn with; a kind without an entry fails saying where to add one (not a KeyError)."""
    if name not in EXAMPLES:
        pytest.fail(f"initializer '{name}': no entry in EXAMPLES of tests/test_initializer_registry.py (the keys it is "
                    "drawn with, {} for none; docs/extending.md, Initializers)")
    return EXAMPLES[name]


def _shape(name: str) -> tuple[int, ...]:
    return BIAS_SHAPE if name == "unit_forget_bias" else SHAPE


def _close(drawn: np.ndarray, expected: tuple[float, float], what: str) -> None:
    """The draw's mean and E[w^2] are the declared moments, within 5 standard errors: the standard error of a
    sample mean of n values is std/sqrt(n), and of E[w^2] at most sqrt(Var(w^2)/n), which is sqrt(2/n) E[w^2]
    for a normal (the largest ratio among the kinds' distributions: a uniform's is sqrt(0.8/n))."""
    values = drawn.astype(np.float64).ravel()
    n, (mean, square) = values.size, expected
    std = math.sqrt(max(square - mean * mean, 0.0))
    assert abs(values.mean() - mean) <= 5 * std / math.sqrt(n) + 1e-6, f"{what}: mean {values.mean()} != {mean}"
    assert abs(np.mean(values * values) - square) <= 5 * math.sqrt(2 / n) * square + 1e-6, (
        f"{what}: E[w^2] {np.mean(values * values)} != {square}")


@pytest.mark.parametrize("name", SPEC_KINDS)
def test_initializer_has_a_spec_model_in_the_union(name: str) -> None:
    kind = REGISTRY[name]
    assert kind.spec in union_members(Initializer), (
        f"initializer '{name}': its spec model {kind.spec.__name__} is not in the Initializer union")
    assert name in literal_names(kind.spec, "kind"), (
        f"initializer '{name}': its spec model {kind.spec.__name__} accepts kind {literal_names(kind.spec, 'kind')}")


def test_every_union_member_is_registered() -> None:
    for model in union_members(Initializer):
        names = literal_names(model, "kind")
        assert all(n in REGISTRY and REGISTRY[n].spec is model for n in names), (
            f"spec model {model.__name__} accepts kind(s) {names} that no InitializerDef owns")


def test_a_bare_name_is_every_kind_whose_keys_all_have_defaults() -> None:
    adapter = TypeAdapter(InitializerSpec)
    assert set(get_args(InitializerName)) == {"zeros", "ones", "random_normal", "truncated_normal", "random_uniform",
                                              "glorot_uniform", "glorot_normal", "he_normal", "he_uniform",
                                              "orthogonal"}, (
        "the bare names (InitializerName) changed: a new kind whose keys all have defaults joins this set (add it "
        "here: the published schema's enum grows by it); one with a required key stays out")
    for name in get_args(InitializerName):
        assert adapter.validate_python(name) == name
    for name in ("constant", "unit_forget_bias"):  # needs `value`; the IR's own
        with pytest.raises(ValidationError):
            adapter.validate_python(name)


@pytest.mark.parametrize("name", SPEC_KINDS)
def test_an_initializer_round_trips(name: str) -> None:
    first, again = round_trip(REGISTRY[name].spec, {"kind": name, **_example(name)})
    assert first == again, f"initializer '{name}': {first!r} reads back as {again!r}"


@pytest.mark.parametrize("name", KINDS)
def test_initializer_runtime_function_takes_its_keys_and_seed(name: str) -> None:
    kind = REGISTRY[name]
    function = resolve(kind.runtime)
    assert callable(function), f"initializer '{name}': runtime pointer {kind.runtime} is not a function"
    parameters = inspect.signature(function).parameters
    keys = tuple(_example(name)) if kind.spec is None else kind.keys
    assert tuple(parameters)[1:] == (*keys, *(("seed",) if kind.seeded else ())), (
        f"initializer '{name}': {kind.runtime}{inspect.signature(function)} does not take (shape, {keys}"
        f"{', seed' if kind.seeded else ''}), the call render/tf_plan.py writes")


@pytest.mark.parametrize("name", KINDS)
def test_initializer_moments_are_its_runtime_draw(name: str) -> None:
    """The moments the init-scale lint uses (ir/gains.py) are those of what generated code draws."""
    kind, args, shape = REGISTRY[name], _example(name), _shape(name)
    drawn = resolve(kind.runtime)(list(shape), **args, **({"seed": (3, 7)} if kind.seeded else {}))
    _close(np.asarray(drawn), kind.moments(args, shape), f"initializer '{name}' drawn by {kind.runtime}")


@pytest.mark.parametrize(("name", "cls"), [(n, c) for n in KINDS for c in REGISTRY[n].keras])
def test_keras_class_is_the_same_distribution_and_imports_as_the_kind(name: str, cls: str) -> None:
    """InitializerDef.keras: Keras' class with the same keys draws what the kind's moments say, and the importer
    writes the kind with those keys."""
    import keras

    from specgen.importers.keras.args import Args
    from specgen.importers.keras.dag import KLayer

    kind, args = REGISTRY[name], _example(name)
    drawn = keras.ops.convert_to_numpy(getattr(keras.initializers, cls)(**args, **(
        {"seed": 1} if kind.seeded else {}))(SHAPE))  # the kind's Def says whether it draws, not a list of names
    _close(drawn, kind.moments(args, SHAPE), f"initializer '{name}' drawn by keras.initializers.{cls}")
    layer = KLayer("x", "Dense", "keras.layers", {"kernel_initializer": {"class_name": cls, "config": args}}, [])
    read = Args(layer, False, []).initializer("kernel_initializer")
    assert read == ({"kind": name, **args} if kind.keys else name), f"Keras {cls} imports as {read!r}, not '{name}'"


@pytest.mark.parametrize("name", [n for n in KINDS if REGISTRY[n].scaling is not None])
def test_variance_scaling_arguments_import_as_the_kind(name: str) -> None:
    from specgen.importers.keras.args import Args
    from specgen.importers.keras.dag import KLayer

    scale, mode, distribution = REGISTRY[name].scaling
    config = {"scale": scale, "mode": mode, "distribution": distribution}
    layer = KLayer("x", "Dense", "keras.layers", {"kernel_initializer": {"class_name": "VarianceScaling",
                                                                          "config": config}}, [])
    assert Args(layer, False, []).initializer("kernel_initializer") == name


@pytest.mark.parametrize("name", SPEC_KINDS)
def test_initializer_is_documented(name: str) -> None:
    assert name in table_kinds("spec.md", "### Initializers"), (
        f"initializer '{name}': docs/spec.md's `### Initializers` table has no row naming it")
