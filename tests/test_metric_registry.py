"""Every registered metric lacks nothing: its name in `train.metrics`, its runtime class and state, a test, docs.

The lists come from specgen.kinds.metrics.REGISTRY; each failure names the metric and what it
misses (docs/extending.md).
"""

from __future__ import annotations

import ast
from typing import get_args

import pytest
from kind_checks import ROOT, has_own_test, table_kinds
from test_source_registry import parts_of_tests

from specgen.kinds.losses import REGISTRY as LOSSES
from specgen.kinds.metrics import REGISTRY, MetricName, args_of, name_of
from specgen.kinds.pointers import resolve
from specgen.spec.training import Train

KINDS = sorted(REGISTRY)


def _listed(node: ast.AST) -> set[str]:
    """The metric names of the `"metrics": [...]` lists under `node`: plain names and `{"kind": <name>}` items (a
    loss term's `"kind"` elsewhere is no metric)."""
    lists = [value for found in ast.walk(node) if isinstance(found, ast.Dict)
             for key, value in zip(found.keys, found.values, strict=True)
             if isinstance(key, ast.Constant) and key.value == "metrics" and isinstance(value, ast.List)]
    return {name for items in lists for item in items.elts if (name := _metric_name(item))}


def _metric_name(item: ast.expr) -> str | None:
    if isinstance(item, ast.Dict):  # {"kind": "top_k_accuracy", "k": 2}
        item = next((v for k, v in zip(item.keys, item.values, strict=True)
                     if isinstance(k, ast.Constant) and k.value == "kind"), item)
    return item.value if isinstance(item, ast.Constant) and isinstance(item.value, str) else None


def _tested_metrics() -> set[str]:
    """Metrics a test function of tests/test_training_numerics.py trains and checks: listed in a spec's
    `"metrics": [...]` in its body. A comment or docstring naming one, or a loss of the same name, is no test of it."""
    return {name for part in parts_of_tests(ROOT / "tests" / "test_training_numerics.py") for name in _listed(part)
            if name in REGISTRY}


def test_train_metrics_takes_exactly_the_registered_names() -> None:
    assert get_args(MetricName) == tuple(REGISTRY), f"MetricName {get_args(MetricName)} is not the registry {tuple(REGISTRY)}"


@pytest.mark.parametrize("name", KINDS)
def test_metric_runtime_class_keeps_the_declared_state(name: str) -> None:
    kind = REGISTRY[name]
    cls = resolve(kind.runtime)
    declared = tuple((acc, cls.shape) for acc in cls.accumulators)
    assert declared == kind.state, (
        f"metric '{name}': {kind.runtime} keeps {declared}, the kind declares {kind.state} (collections.yaml's)")
    assert callable(getattr(cls, "update", None)) and callable(getattr(cls, "result", None)), (
        f"metric '{name}': {kind.runtime} lacks update() or result()")


@pytest.mark.parametrize("name", KINDS)
def test_metric_reads_some_loss(name: str) -> None:
    fits = [k for k, loss in LOSSES.items() if not loss.regularizer and REGISTRY[name].refuse(k, loss.target) is None]
    assert fits, f"metric '{name}': its refusal refuses every loss kind"


@pytest.mark.parametrize("name", KINDS)
def test_metric_has_a_test(name: str) -> None:
    assert name in _tested_metrics() or has_own_test(name), (
        f"metric '{name}': no test function of tests/test_training_numerics.py lists it in a spec's \"metrics\" "
        f"(a comment or docstring is no test), and no tests/test_{name}.py")


@pytest.mark.parametrize("name", KINDS)
def test_metric_is_documented(name: str) -> None:
    assert name in table_kinds("training.md", "## Evaluation and metrics"), (
        f"metric '{name}': docs/training.md's 'Evaluation and metrics' table has no row naming it")
    row = next((line for line in (ROOT / "docs" / "spec.md").read_text().splitlines() if line.startswith("| `metrics`")),
               "")
    assert f"`{name}`" in row, f"metric '{name}': docs/spec.md's `train` table row `metrics` does not list it"


@pytest.mark.parametrize("name", KINDS)
def test_metric_takes_its_name_and_its_mapping_form_alike(name: str) -> None:
    train = Train.model_validate({"batch_size": 1, "metrics": [name, {"kind": name}]})
    assert [name_of(m) for m in train.metrics] == [name, name]
    assert args_of(train.metrics[0]) == args_of(train.metrics[1]), (
        f"metric '{name}': a plain name must mean its mapping form with every key at its default")
