"""Every registered learning-rate schedule lacks nothing: model in the union, runtime function, call, parity, docs.

The lists come from specgen.kinds.schedules.REGISTRY; each failure names the schedule and what it
misses (docs/extending.md).
"""

from __future__ import annotations

import pytest
from kind_checks import has_own_test, literal_names, table_kinds, union_members
from test_training_numerics import SCHEDULES

from specgen.kinds.pointers import resolve
from specgen.kinds.schedules import REGISTRY, WARMUP, Schedule
from specgen.render.environment import py_literal

KINDS = sorted(REGISTRY)


@pytest.mark.parametrize("name", KINDS)
def test_schedule_has_a_spec_model_in_the_union(name: str) -> None:
    kind = REGISTRY[name]
    assert kind.spec in union_members(Schedule), (
        f"schedule '{name}': its spec model {kind.spec.__name__} is not in the Schedule union")
    assert literal_names(kind.spec, "schedule") == (name,), (
        f"schedule '{name}': its model accepts schedule {literal_names(kind.spec, 'schedule')}")
    assert "warmup_steps" in kind.spec.model_fields, f"schedule '{name}': its model does not take warmup_steps"


@pytest.mark.parametrize("name", [*KINDS, "warmup"])
def test_schedule_points_to_a_runtime_function(name: str) -> None:
    pointer = WARMUP if name == "warmup" else REGISTRY[name].runtime
    assert callable(resolve(pointer)), f"schedule '{name}': runtime pointer {pointer} is not a function"


@pytest.mark.parametrize("name", KINDS)
def test_schedule_call_builds_a_rate_function(name: str) -> None:
    """The call the generated trainer makes, evaluated against the runtime module: a function of the step."""
    kind = REGISTRY[name]
    case = next((c for c in SCHEDULES.values() if c["schedule"] == name), None)
    if case is None:
        pytest.skip(f"schedule '{name}': no case in SCHEDULES (test_schedule_has_a_parity_test names it)")
    rate = kind.spec.model_validate(case)
    call = kind.render(kind.args(rate), py_literal)
    module = resolve(kind.runtime.rsplit(".", 1)[0])
    function = eval(call, {module.__name__.rsplit(".", 1)[1]: module})  # the rendered call, as generated code runs it
    assert abs(float(function(0)) - kind.first(rate)) <= 1e-7 * max(1.0, kind.first(rate)), (
        f"schedule '{name}': {call} at step 0 is not its first rate {kind.first(rate)}")


@pytest.mark.parametrize("name", KINDS)
def test_schedule_has_a_parity_test(name: str) -> None:
    covered = {case["schedule"] for case in SCHEDULES.values()}
    assert name in covered or has_own_test(name), (
        f"schedule '{name}': no case in tests/test_training_numerics.py SCHEDULES and no tests/test_{name}.py")


@pytest.mark.parametrize("name", KINDS)
def test_schedule_is_documented(name: str) -> None:
    assert name in table_kinds("spec.md", "### Learning-rate schedules"), (
        f"schedule '{name}': docs/spec.md's 'Learning-rate schedules' table has no row naming it")
    assert name in table_kinds("training.md", "### Learning rates"), (
        f"schedule '{name}': docs/training.md's 'Learning rates' table has no row naming it (its rate at step t)")


def test_every_union_member_is_registered() -> None:
    for model in union_members(Schedule):
        names = literal_names(model, "schedule")
        assert all(n in REGISTRY and REGISTRY[n].spec is model for n in names), (
            f"spec model {model.__name__} accepts schedule(s) {names} that no ScheduleDef owns")
