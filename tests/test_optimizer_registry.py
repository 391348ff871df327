"""Every registered optimizer lacks nothing: model in the union, runtime function, update call, parity test, docs.

The lists come from specgen.kinds.optimizers.REGISTRY; each failure names the kind and what it
misses, so that adding an optimizer module tells its author what else to write (docs/extending.md).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kind_checks import ROOT, has_own_test, literal_names, own_test_problem, table_kinds, union_members
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
    assert name in table_kinds("training.md", "## Optimizers") | _training_headings(), (
        f"optimizer '{name}': docs/training.md's 'Optimizers' table has no row naming it (its keys with their "
        "defaults, and its slots), and no heading of training.md names `kind: {name}`")


def _training_headings() -> set[str]:
    """Kinds with a section of their own in docs/training.md: "## Levenberg-Marquardt (`kind: levenberg_marquardt`)"."""
    text = (ROOT / "docs" / "training.md").read_text(encoding="utf-8")
    return set(re.findall(r"^#+ .*`kind: ([a-z0-9_]+)`", text, re.M))


def test_the_kind_row_lists_every_kind() -> None:
    """docs/spec.md's `kind` row of the keys every optimizer has names the kinds one by one, in prose."""
    text = (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")
    section = text.split("\n## `optimizers`\n", 1)[1]
    row = next(line for line in section.splitlines() if line.startswith("| `kind` | yes |"))
    listed = re.findall(r"`([a-z0-9_]+)`", row.split("|")[4].split("(")[0])
    assert sorted(listed) == sorted(REGISTRY), (
        f"docs/spec.md, `optimizers`: the `kind` row lists {listed}, the registry has {sorted(REGISTRY)}: "
        "name each kind there")


def test_own_test_must_define_a_test_naming_the_kind(tmp_path: Path) -> None:
    """tests/test_<kind>.py counts as a kind's own parity test only when a test function in it names the kind."""
    files = {
        "placeholder": '"""adamax: its parity test comes later."""\n',
        "other_kind": 'def test_adam_matches_keras() -> None:\n    assert run("adam")\n',
        "docstring_only": 'def test_it() -> None:\n    """adamax."""\n    assert True\n',
        "by_name": 'def test_adamax_matches_keras() -> None:\n    assert True\n',
        "by_constant": 'KIND = {"kind": "adamax"}\n\n\ndef test_matches_keras() -> None:\n    assert KIND\n',
        "by_parameter": ('import pytest\n\n\n@pytest.mark.parametrize("kind", ["adamax"])\n'
                         'def test_matches_keras(kind: str) -> None:\n    assert kind\n'),
        "in_a_class": 'class TestSteps:\n    def test_three(self) -> None:\n        assert run("kind: adamax")\n',
    }
    found = {}
    for case, text in files.items():
        path = tmp_path / f"{case}.py"
        path.write_text(text)
        found[case] = own_test_problem(path, "adamax")
    none_naming = ("no test function names 'adamax' (in its name, its parameters or its body): write the kind's "
                   "parity test there, or delete the file and add a case where the completeness test says")
    assert found == {
        "placeholder": "defines no test function (test_*): a file of its own must hold the kind's parity test",
        "other_kind": none_naming, "docstring_only": none_naming,
        "by_name": None, "by_constant": None, "by_parameter": None, "in_a_class": None,
    }


def test_every_union_member_is_registered() -> None:
    for model in union_members(Optimizer):
        names = literal_names(model, "kind")
        assert all(n in REGISTRY and REGISTRY[n].spec is model for n in names), (
            f"spec model {model.__name__} accepts kind(s) {names} that no OptimizerDef owns")
