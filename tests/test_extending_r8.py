"""What a person following docs/extending.md meets (checker report rt8/extend): references that fail loudly instead
of standing in for a missing kind, completeness checks that need a real test, one golden-set rule, an empty path
and a misspelt source key told in spec words, and no metric, loss or schedule name compared outside the registries.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import test_compat_table as compat_table
from test_metric_registry import _listed
from test_source_registry import _read_by_data_tests, parts_of_tests

from specgen.cli import main
from specgen.kinds import losses, metrics, schedules

ROOT = Path(__file__).resolve().parents[1]

SPEC = """\
specgen: 1
name: e
inputs: {x: {shape: [3]}}
outputs: {y: out}
layers: [{name: out, op: dense, units: 1}]
loss: {kind: mean_squared_error, predictions: y, labels: t}
optimizers: {all: {kind: sgd, learning_rate: 0.1, clip: CLIP}}
train: {batch_size: 4}
collections: {c: PATTERNS}
data: {train: SOURCE}
"""
CSV = "{csv: t.csv, features: {x: [a, b, c]}, labels: {t: d}}"


def validate(tmp_path: Path, capsys: pytest.CaptureFixture[str], **parts: str) -> list[str]:
    """`specgen validate` on SPEC with its CLIP, PATTERNS and SOURCE placeholders replaced: its stdout and stderr."""
    text = SPEC
    for key, value in {"CLIP": "{global_norm: 1.0}", "PATTERNS": "[out/*]", "SOURCE": CSV, **parts}.items():
        text = text.replace(key, value)
    (tmp_path / "e.yaml").write_text(text)
    main(["validate", str(tmp_path / "e.yaml")])
    out, err = capsys.readouterr()
    return (out + err).splitlines()


# --- finding 5: an empty string is told in spec words ----------------------------------------------------------


@pytest.mark.parametrize(("source", "key", "column"), [
    ('{csv: "", features: {x: [a, b, c]}, labels: {t: d}}', "csv", 21),
    ('{npz: "", features: {x: x}, labels: {t: t}}', "npz", 21),
    ('{images: "", image_size: [3, 1]}', "images", 24),
    ('{tfrecord: "", features: {x: a}, labels: {t: d}}', "tfrecord", 26),  # was "expected a list, received '' (str)"
])
def test_an_empty_path_is_received_as_an_empty_string_where_a_path_is_expected(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str, key: str, column: int) -> None:
    """Before: `csv: String should have at least 1 character; received '' (str)` (pydantic's words, Python's type)."""
    assert validate(tmp_path, capsys, SOURCE=source) == [
        f"{tmp_path / 'e.yaml'}:10:{column}: error: {key}: received '' (an empty string), expected a path",
        "1 error found"]


def test_an_empty_pattern_is_received_as_an_empty_string(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Any other string of min_length 1 (a collection pattern) says what it expects, not pydantic's sentence."""
    assert validate(tmp_path, capsys, PATTERNS='["out/*", ""]') == [
        f"{tmp_path / 'e.yaml'}:9:28: error: c[1]: received '' (an empty string), expected a non-empty string",
        "1 error found"]


# --- finding 6: a misspelt key of a union picked by key gets a did-you-mean -------------------------------------


@pytest.mark.parametrize(("parts", "line", "column", "key", "meant", "expected"), [
    ({"SOURCE": CSV.replace("{csv:", "{cvs:")}, 10, 16, "cvs", "csv",
     "a data source with exactly one of the keys 'npz', 'csv', 'tfrecord' or 'images'"),
    ({"SOURCE": CSV.replace("{csv:", "{CSV:")}, 10, 16, "CSV", "csv",
     "a data source with exactly one of the keys 'npz', 'csv', 'tfrecord' or 'images'"),
    ({"CLIP": "{global_nrom: 1.0}"}, 7, 58, "global_nrom", "global_norm",
     "a mapping with exactly one of 'global_norm' or 'value'"),
])
def test_a_misspelt_kind_key_gets_a_did_you_mean(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 parts: dict[str, str], line: int, column: int, key: str, meant: str,
                                                 expected: str) -> None:
    """Before: `train: expected a data source with exactly one of the keys ..., received {cvs: ...} (a mapping)`, at
    the mapping: a misspelt loss, schedule or metric kind got `did you mean`, a misspelt source key did not."""
    assert validate(tmp_path, capsys, **parts) == [
        f"{tmp_path / 'e.yaml'}:{line}:{column}: error: unknown key '{key}'; did you mean '{meant}'? (expected "
        f"{expected})", "1 error found"]


def test_a_mapping_with_no_key_near_any_keeps_the_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = "{parquet: t.parquet, features: {x: [a, b, c]}, labels: {t: d}}"
    assert validate(tmp_path, capsys, SOURCE=source) == [
        f"{tmp_path / 'e.yaml'}:10:15: error: train: expected a data source with exactly one of the keys 'npz', "
        "'csv', 'tfrecord' or 'images', received {parquet: t.parquet, features: {x: [a, b, c]}, labels: {t: d}} "
        "(a mapping)", "1 error found"]


# --- finding 1: a schedule without references fails, naming what to add --------------------------------------


def test_a_schedule_kind_without_references_fails_naming_them() -> None:
    """Before: closed_form ended in `assert kind == "piecewise_constant"` and keras_schedule returned a constant
    `initial` for any kind it did not know: a schedule that stays at `initial` passed against that."""
    numerics = pytest.importorskip("test_training_numerics")
    case = {"schedule": "inverse_time_decay", "initial": 0.1, "decay_steps": 3, "decay_rate": 0.5}
    expected = ("schedule 'inverse_time_decay': no entry in SCHEDULE_REFERENCES of tests/test_training_numerics.py; "
                "add ScheduleReference(<its rate at step t in float64>, <its Keras schedule, e.g. "
                "keras.optimizers.schedules.InverseTimeDecay(...)>) (docs/extending.md, Schedules, step 2)")
    for reference in (lambda: numerics.closed_form(case, 1), lambda: numerics.keras_schedule(case)):
        with pytest.raises(pytest.fail.Exception) as failed:
            reference()
        assert str(failed.value) == expected


def test_every_schedule_case_has_its_references() -> None:
    numerics = pytest.importorskip("test_training_numerics")
    kinds = {case["schedule"] for case in numerics.SCHEDULES.values()}
    assert kinds <= set(numerics.SCHEDULE_REFERENCES), sorted(kinds - set(numerics.SCHEDULE_REFERENCES))
    assert set(numerics.SCHEDULE_REFERENCES) <= set(schedules.REGISTRY)


# --- finding 4: "has a test" means a test function ---------------------------------------------------------------

FAKE_TESTS = '''\
# "metrics": ["mean_absolute_error"]   and a source {jsonl: t.jsonl, ...}
"""A module docstring: "metrics": ["recall"] {jsonl: t.jsonl}"""
LOSS = {"kind": "mean_absolute_error", "predictions": "y", "labels": "t"}


def test_regression(tmp_path):
    """{jsonl: t.jsonl} in a docstring is no test of it."""
    doc = spec_doc("r", loss={"kind": "mean_absolute_error"}, train={"metrics": ["mean_loss", {"kind": "auc"}]})
    read(tmp_path, "{npz: t.npz, features: {x: x}}")
'''


def test_a_comment_docstring_or_loss_of_the_same_name_is_no_test(tmp_path: Path) -> None:
    """Before: the metric check took any `"metrics": [...]` text of the file (a comment too), the source check any
    `{<kind>: ` text; a loss named like a metric (mean_absolute_error) is no test of the metric either."""
    path = tmp_path / "test_fake.py"
    path.write_text(FAKE_TESTS)
    assert set().union(*map(_listed, parts_of_tests(path))) == {"mean_loss", "auc"}
    assert _read_by_data_tests(path) == {"npz"}


def test_every_kind_today_has_a_real_test() -> None:
    from test_metric_registry import _tested_metrics

    from specgen.kinds import sources

    assert _tested_metrics() == {"accuracy", "mean_loss", "precision", "recall", "auc"}  # top_k_accuracy: own file
    assert _read_by_data_tests() == set(sources.REGISTRY)


# --- finding 2: one golden-set rule, and the failure points at it ----------------------------------------------


def test_a_new_source_kind_needs_no_golden_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(compat_table.REGISTERED, "data_source", (*compat_table.REGISTERED["data_source"], "jsonl"))
    compat_table.test_every_registered_kind_is_in_the_golden_set("data_source")


def test_a_new_metric_kind_outside_the_golden_set_is_named_with_the_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(compat_table.REGISTERED, "metric", (*compat_table.REGISTERED["metric"], "mean_absolute_error"))
    with pytest.raises(AssertionError) as failed:
        compat_table.test_every_registered_kind_is_in_the_golden_set("metric")
    assert str(failed.value).splitlines()[0] == (
        "metric kind 'mean_absolute_error': not in the golden set; add its name in AXES['metric'] of "
        "tests/golden/pairs.py (how a spec shows it) (docs/extending.md, 'Rules every registry keeps': which new "
        "kinds extend the golden set)")


# --- finding 7: metric, loss and schedule names are compared only in the registries ------------------------------

# Files outside the registries where a kind's name is a word of another meaning, and that meaning.
OTHER_SENSES = {
    ("specgen/pictures/export_json.py", "precision"): "export.json's key path ('precision', 'accuracy'), no metric",
    ("specgen/pictures/export_json.py", "accuracy"): "export.json's key path ('precision', 'accuracy'), no metric",
    ("specgen/ir/collections.py", "constant"): "a variable kind (weight, update, constant), no schedule",
}
# The registries, and the Keras importer, which reads Keras' own names (docs/extending.md's rule).
ALLOWED = ("specgen/kinds/", "specgen/importers/keras/")


def _compared(tree: ast.AST, names: set[str]) -> set[str]:
    """Kind names compared with a value (`name == "top_k_accuracy"`, `in ("l1", "l2")`) or listed two or more in a
    tuple, list or set (a kind switch)."""
    def named(node: ast.AST) -> set[str]:
        return {node.value} & names if isinstance(node, ast.Constant) and isinstance(node.value, str) else set()

    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                found |= named(side).union(*(named(e) for e in getattr(side, "elts", [])))
        elif isinstance(node, ast.Tuple | ast.List | ast.Set) and len(set().union(*map(named, node.elts))) > 1:
            found |= set().union(*map(named, node.elts))
    return found


@pytest.mark.parametrize("registry", [metrics, losses, schedules], ids=["metrics", "losses", "schedules"])
def test_only_the_registries_compare_against_kind_names(registry: Any) -> None:
    """Before: specgen/ir/lints.py compared a metric's name with "top_k_accuracy" (now MetricDef.ranks_key)."""
    found = {}
    for path in sorted((ROOT / "specgen").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith(ALLOWED):
            continue
        names = {n for n in _compared(ast.parse(path.read_text()), set(registry.REGISTRY))
                 if (relative, n) not in OTHER_SENSES}
        if names:
            found[relative] = sorted(names)
    assert found == {}, (f"{registry.__name__} kind names compared outside the registries (file: names); ask the "
                         f"kind's Def instead (docs/extending.md, 'Rules every registry keeps'): {found}")


def test_the_ranking_key_is_the_metrics_own() -> None:
    assert {name: kind.ranks_key for name, kind in metrics.REGISTRY.items() if kind.ranks_key} == {
        "top_k_accuracy": "k"}


# --- finding 2's class: a checklist step no test demanded --------------------------------------------------------


def test_every_augmentation_has_its_keras_parity_entry() -> None:
    """docs/extending.md asks a new augmentation for an entry in tests/test_augment_parity.py's ITEMS; before, a
    kind without one passed every test (the checker's experiment: a dummy kind, 15 parity tests passed)."""
    from test_augment_parity import ITEMS

    from specgen.kinds import augment

    missing = sorted(set(augment.REGISTRY) - {next(iter(item)) for item in ITEMS})
    assert missing == [], (f"augmentations without an entry in ITEMS of tests/test_augment_parity.py (compared with "
                           f"the Keras layer bitwise; docs/extending.md, Augmentations): {missing}")
