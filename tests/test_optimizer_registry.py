"""Every registered optimizer lacks nothing: model in the union, runtime function, update call, parity test, docs.

The lists come from specgen.kinds.optimizers.REGISTRY; each failure names the kind and what it
misses, so that adding an optimizer module tells its author what else to write (docs/extending.md).
"""

from __future__ import annotations

import pytest
from kind_checks import has_own_test, literal_names, table_kinds, union_members
from test_training_numerics import OPTIMIZER_CASES

from specgen.kinds.optimizers import REGISTRY, Optimizer, UpdateCall
from specgen.kinds.pointers import resolve
from specgen.render.environment import py_literal

KINDS = sorted(REGISTRY)


def _entry(name: str) -> dict[str, object]:
    """The smallest entry of the kind: its defaults, and a learning rate when it takes one."""
    return {"kind": name, **({"learning_rate": 0.1} if REGISTRY[name].learning_rate else {})}


@pytest.mark.parametrize("name", KINDS)
def test_optimizer_has_a_spec_model_in_the_union(name: str) -> None:
    kind = REGISTRY[name]
    assert kind.spec in union_members(Optimizer), (
        f"optimizer '{name}': its spec model {kind.spec.__name__} is not in the Optimizer union")
    assert literal_names(kind.spec, "kind") == (name,), (
        f"optimizer '{name}': its spec model {kind.spec.__name__} accepts kind {literal_names(kind.spec, 'kind')}")


@pytest.mark.parametrize("name", KINDS)
def test_optimizer_points_to_a_runtime_function(name: str) -> None:
    kind = REGISTRY[name]
    assert callable(resolve(kind.runtime)), f"optimizer '{name}': runtime pointer {kind.runtime} is not a function"


@pytest.mark.parametrize("name", KINDS)
def test_optimizer_writes_its_update_and_slots_from_its_defaults(name: str) -> None:
    kind = REGISTRY[name]
    hyper = kind.hyper(kind.spec.model_validate(_entry(name)))
    slots = kind.slots(hyper)
    assert all(isinstance(s, str) and isinstance(v, float) for s, v in slots), f"optimizer '{name}': slots {slots}"
    call = kind.update(UpdateCall(kind.function, "VARS", "GRADS", "opt_x", {s: f"SLOT_{s}" for s, _ in slots},
                                  hyper, py_literal))
    assert call.startswith(f"{kind.function}(VARS, "), f"optimizer '{name}': update call {call!r}"
    for slot, _ in slots:
        assert f"SLOT_{slot}" in call, f"optimizer '{name}': slot '{slot}' is kept but its update never reads it"


@pytest.mark.parametrize("name", KINDS)
def test_optimizer_has_a_parity_test(name: str) -> None:
    covered = {entry["kind"] for entry, _, _ in OPTIMIZER_CASES.values()}
    assert name in covered or has_own_test(name), (
        f"optimizer '{name}': no case in tests/test_training_numerics.py OPTIMIZER_CASES and no tests/test_{name}.py")


@pytest.mark.parametrize("name", KINDS)
def test_optimizer_is_documented(name: str) -> None:
    assert name in table_kinds("spec.md", "## `optimizers`"), (
        f"optimizer '{name}': docs/spec.md's `optimizers` section has no table row naming it (add it to 'Keys per kind')")


def test_every_union_member_is_registered() -> None:
    for model in union_members(Optimizer):
        names = literal_names(model, "kind")
        assert all(n in REGISTRY and REGISTRY[n].spec is model for n in names), (
            f"spec model {model.__name__} accepts kind(s) {names} that no OptimizerDef owns")
