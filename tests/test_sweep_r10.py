"""Round 10 of the sweep checks: what `--emit katib` writes is what Katib really runs, stepped ranges draw the
declared grid exactly (locally and in Katib), and a range's `step` errors name `step` (no TensorFlow, no trial).

Katib's behaviour is taken from its source (kubeflow/katib, v1beta1), cited at each test and in
specgen/sweep/katib_limits.py.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_helpers import run_cli
from test_sweep_checks import BASE, refused, write

from specgen.spec.yaml_source import parse_value

pytest.importorskip("optuna")

DROPOUT = BASE.replace("  - {name: out, op: dense, units: 10}",
                       "  - {name: drop, op: dropout, rate: 0.1}\n  - {name: out, op: dense, units: 10}")


def sweep_spec(tmp_path: Path, section: str, base: str = DROPOUT) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(base + section)
    return spec


def emit(tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: Path, *flags: str) -> tuple[str, dict[str, Any]]:
    code, out, err = run_cli(["sweep", spec.name, "--emit", "katib", "--image", "r/s:1", "-o", "k.yaml", *flags],
                             capsys, tmp_path)
    assert (code, err) == (0, ""), err
    return out, yaml.safe_load((tmp_path / "k.yaml").read_text())


def section(space: str, extra: str = "", metric: str = "eval/accuracy") -> str:
    return f"sweep:\n  metric: {metric}\n  direction: maximize\n  trials: 2\n{extra}  space:\n{space}\n"


# ---- F1, F8: a range's errors name the right key, at it, and say truthfully what was received ------------------


def test_a_bad_step_is_named_step_at_the_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The union's tag (`int`) equals a key of the mapping holding a list: the error was put at the list, as `int:`."""
    spec = write(tmp_path, "    layers[hidden].units: {int: [8, 64], step: 0}\n"
                           "    optimizers.all.beta_1: {uniform: [0.1, 0.3], step: -0.1}\n"
                           "    train.batch_size: {int: [8, 64], step: 2.0}")
    assert refused(tmp_path, capsys, spec) == [
        "spec.yaml:21:48: error: step: received 0, expected a value > 0",
        "spec.yaml:22:56: error: step: received -0.1, expected a value > 0.0",
        "spec.yaml:23:44: error: step: expected an integer, received 2.0 (float)",
        "3 errors found"]


def test_text_in_a_range_is_text_not_a_quoted_string(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write(tmp_path, "    optimizers.all.learning_rate: {log_uniform: [a, 1.0e-1]}\n"
                           "    layers[hidden].units: {int: [x, 64]}\n"
                           "    optimizers.all.beta_1: {uniform: ['0.1', 0.3]}")
    assert refused(tmp_path, capsys, spec) == [
        "spec.yaml:21:50: error: log_uniform[0]: expected a number, received 'a' (text)",
        "spec.yaml:22:34: error: int[0]: expected an integer, received 'x' (text)",
        "spec.yaml:23:39: error: uniform[0]: expected a number, received '0.1' (a quoted string); write the number "
        "without quotes",
        "3 errors found"]


def test_a_yaml_1_2_exponent_with_a_dot_is_a_number_as_everywhere_in_a_spec(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """PyYAML reads `1.0e3` (no sign in the exponent) as text; the rest of a spec takes it as 1000.0."""
    spec = write(tmp_path, "    optimizers.all.learning_rate: {log_uniform: [1.0e-4, 1.0e0]}\n"
                           "    layers[hidden].units: {choice: [16, 32]}")
    _, manifest = emit(tmp_path, capsys, spec)
    assert manifest["spec"]["parameters"][0]["feasibleSpace"]["max"] == "1.0"


# ---- F2: a pruner cannot run in Katib ---------------------------------------------------------------------------


def test_a_pruner_is_refused_for_katib_and_none_is_one_set_away(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Katib's TensorFlowEvent collector takes no early-stopping rules (cmd/metricscollector/v1beta1/
    tfevent-metricscollector/main.py), so medianstop never stopped a trial."""
    spec = sweep_spec(tmp_path, section("    layers[hidden].units: {choice: [16, 32]}",
                                        "  pruner: {kind: median, startup_trials: 2}\n"))
    assert refused(tmp_path, capsys, spec, "--emit", "katib", "--image", "r/s:1", "-o", "k.yaml") == [
        "spec.yaml:21:11: error: pruner median cannot run in Katib: Katib's early stopping works only with its StdOut "
        "and File metrics collectors, and it reads the trials' metric from their TensorBoard events (the "
        "TensorFlowEvent collector, which takes no early-stopping rules); expected pruner: none with --emit katib "
        "(--set sweep.pruner=none), or a local specgen sweep",
        "1 error found"]
    _, manifest = emit(tmp_path, capsys, spec, "--set", "sweep.pruner=none")
    assert "earlyStopping" not in manifest["spec"]


# ---- F7: only a metric Katib's collector isolates ---------------------------------------------------------------


def _should_consider(tag: str, metric_name: str, tfefile: str) -> bool:
    """Katib's own rule, verbatim (pkg/metricscollector/v1beta1/tfevent-metricscollector/tfevent_loader.py)."""
    tfefile_parent_dir = (os.path.dirname(metric_name) if len(metric_name.split("/")) >= 2
                          else os.path.dirname(tfefile))
    basedir_name = os.path.dirname(tfefile)
    return tag.startswith(metric_name.split("/")[-1]) and basedir_name.endswith(tfefile_parent_dir)


def test_collected_is_katibs_rule() -> None:
    from specgen.sweep.katib_limits import collected

    logged = ["train/loss", "train/loss/logits", "train/learning_rate/all", "train/accuracy", "train/mean_loss",
              "eval/accuracy", "eval/mean_loss"]
    for metric in [*logged, "eval/acc", "train/learning_rate"]:
        katib = [name for name in logged if _should_consider(
            name.partition("/")[2], metric, f"/specgen/run/tensorboard/{name.partition('/')[0]}/events.out.x")]
        assert collected(metric, logged) == katib, metric


@pytest.mark.parametrize(("metric", "line"), [
    ("train/loss", "spec.yaml:18:11: error: 'train/loss' cannot be Katib's objective: its TensorFlowEvent collector "
     "reports every tag of folder 'train' that starts with 'loss' as 'train/loss' (here train/loss, "
     "train/loss/logits), so the objective could be another series; expected a metric it collects alone "
     "(train/accuracy, eval/accuracy), or a local specgen sweep"),
    ("train/learning_rate/all", "spec.yaml:18:11: error: 'train/learning_rate/all' cannot be Katib's objective: its "
     "TensorFlowEvent collector looks for a tag starting with 'all' in a folder ending with 'train/learning_rate', "
     "and the run writes tag 'learning_rate/all' in folder 'train', so every trial would report it unavailable; "
     "expected a metric it collects alone (train/accuracy, eval/accuracy), or a local specgen sweep"),
])
def test_a_metric_katib_cannot_isolate_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], metric: str,
                                                  line: str) -> None:
    spec = sweep_spec(tmp_path, section("    layers[hidden].units: {choice: [16, 32]}", metric=metric))
    assert refused(tmp_path, capsys, spec, "--emit", "katib", "--image", "r/s:1", "-o", "k.yaml") == [
        line, "1 error found"]


# ---- F3: choices survive Katib's text substitution --------------------------------------------------------------

CHOICES = ["it's", 'a"b', "back\\slash", "tab\there", "${trialParameters.layers-hidden-units}", "x=y, z", "'32'",
           "é"]


def test_every_choice_reaches_the_trial_exactly_through_katibs_substitution(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Katib fills a trial in as text: the trialSpec as JSON, each placeholder replaced, the text parsed as JSON
    (pkg/controller.v1beta1/experiment/manifest/generator.go applyParameters). A raw `"` or backslash broke it."""
    from specgen.sweep.katib import check_manifest
    from specgen.sweep.katib_limits import fill

    listed = "[" + ", ".join(yaml.safe_dump(c, default_style='"').strip() for c in CHOICES) + "]"
    spec = sweep_spec(tmp_path, section(f"    layers[hidden].units: {{choice: [16, 32]}}\n    doc: {{choice: {listed}}}"))
    _, manifest = emit(tmp_path, capsys, spec)
    assert check_manifest(manifest) == []
    spec_ = manifest["spec"]
    texts = spec_["parameters"][1]["feasibleSpace"]["list"]
    units = spec_["parameters"][0]["feasibleSpace"]["list"][0]
    for choice, text in zip(CHOICES, texts, strict=True):
        # Go's map order: the units placeholder replaced before and after this value, the same result either way
        for order in ({"doc": text, "layers-hidden-units": units}, {"layers-hidden-units": units, "doc": text}):
            job = fill(spec_["trialTemplate"]["trialSpec"], order)
            command = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"]
            given = next(c for c in command if c.startswith("doc="))
            assert parse_value(given.removeprefix("doc="), "test") == choice, (choice, text, given)


def test_a_value_katib_cannot_substitute_fails_the_manifest_check(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from specgen.sweep.katib import check_manifest

    spec = sweep_spec(tmp_path, section("    doc: {choice: [plain, other]}"))
    _, manifest = emit(tmp_path, capsys, spec)
    manifest["spec"]["parameters"][0]["feasibleSpace"]["list"][0] = 'a"b'
    assert check_manifest(manifest) == [
        "spec.parameters: doc's value 'a\"b', filled into the trialSpec as Katib fills it, is no JSON"]


# ---- F4, F6: a stepped range is its declared grid, exactly, locally and in Katib ---------------------------------

STEPPED = ("    train.batch_size: {int: [3, 43], step: 10}\n"
           "    layers[drop].rate: {uniform: [0.05, 0.45], step: 0.1}\n"
           "    layers[hidden].units: {int: [8, 64], step: 10}\n"
           "    optimizers.all.beta_1: {uniform: [0.1, 0.7], step: 0.1}\n"
           "    optimizers.all.beta_2: {uniform: [0.9, 0.99], step: 0.01}\n"
           "    train.epochs: {int: [2, 9], step: 2}")
GRIDS = {"train.batch_size": [3, 13, 23, 33, 43], "layers[drop].rate": [0.05, 0.15, 0.25, 0.35, 0.45],
         "layers[hidden].units": [8, 18, 28, 38, 48, 58], "optimizers.all.beta_1": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7],
         "optimizers.all.beta_2": [0.9, 0.91, 0.92, 0.93, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99],
         "train.epochs": [2, 4, 6, 8]}


def test_katib_gets_exactly_the_declared_grid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Katib's tpe and random (hyperopt's quniform) draw multiples of the step from 0, its grid floats by numpy's
    arange: a range off that is listed (`discrete`); an int range from a multiple of its step keeps its step, with
    its last grid point as max (quniform would round past a max off the grid)."""
    _, manifest = emit(tmp_path, capsys, sweep_spec(tmp_path, section(STEPPED)))
    spaces = {p["name"]: (p["parameterType"], p["feasibleSpace"]) for p in manifest["spec"]["parameters"]}
    assert spaces["train-epochs"] == ("int", {"min": "2", "max": "8", "step": "2", "distribution": "uniform"})
    for key, grid in GRIDS.items():
        if key == "train.epochs":
            continue
        name = key.lower().replace("[", "-").replace("].", "-").replace(".", "-").replace("_", "-")
        kind, space = spaces[name]
        assert kind == "discrete" and [parse_value(v, "t") for v in space["list"]] == grid, (key, space)
        assert space["list"] == [str(v) for v in grid]


@pytest.mark.parametrize("sampler", ["random", "tpe", "grid"])
def test_local_draws_are_the_grid_without_optuna_warnings(tmp_path: Path, sampler: str) -> None:
    """Optuna's binary `low + k * step` gave 0.30000000000000004 and warned twice with site-packages paths."""
    import optuna

    from specgen.spec.overrides import load_with_overrides
    from specgen.sweep.plan import Plan
    from specgen.sweep.space import parameters
    from specgen.sweep.study import quiet_optuna, seeded

    spec = sweep_spec(tmp_path, section(STEPPED))
    loaded = load_with_overrides(spec, [f"sweep.sampler={sampler}"])
    params = parameters(loaded, [])
    assert loaded.spec.sweep is not None
    plan = Plan(loaded, loaded.spec.sweep, params, tmp_path, "", 200, 1)
    seen: dict[str, set[Any]] = {p.key: set() for p in params}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet_optuna()
        study = optuna.create_study(sampler=seeded(plan), direction="maximize")
        distributions = {p.key: p.distribution() for p in params}
        for _ in range(plan.budget()):
            trial = study.ask(distributions)
            for key, value in trial.params.items():
                seen[key].add(value)
            study.tell(trial, 0.5)
    for key, values in seen.items():
        assert values <= set(GRIDS[key]), (key, sorted(values))
        assert all(type(v) is type(GRIDS[key][0]) for v in values)
    if sampler == "grid":
        assert seen == {k: set(v) for k, v in GRIDS.items()}


def test_the_grid_values_are_as_the_spec_writes_them() -> None:
    from specgen.sweep.spec import UniformRange, grid_values

    assert grid_values(UniformRange(uniform=[0.0, 0.7], step=0.1)) == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
    assert grid_values(UniformRange(uniform=[0.1, 0.3], step=0.2)) == [0.1, 0.3]
    assert grid_values(UniformRange(uniform=[1e-3, 3e-3], step=2e-3)) == [0.001, 0.003]


def test_a_stepped_range_too_long_to_list_is_refused_for_katib(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    spec = sweep_spec(tmp_path, section("    layers[drop].rate: {uniform: [0.0, 0.5], step: 0.001}"))
    assert refused(tmp_path, capsys, spec, "--emit", "katib", "--image", "r/s:1", "-o", "k.yaml") == [
        "spec.yaml:22:5: error: 'layers[drop].rate': Katib draws a stepped range as multiples of its step from 0 (its "
        "tpe and random) or in binary floats (its grid), so --emit katib lists its values, and this one has 501; "
        "expected a step that leaves at most 256 values, or a local specgen sweep",
        "1 error found"]


# ---- F5: a grid runs its points, no more --------------------------------------------------------------------------


def test_a_grid_experiment_has_at_most_its_points(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Katib's grid refuses maxTrialCount above its combinations (pkg/suggestion/v1beta1/optuna/service.py
    _validate_grid_setting); the local sweep runs the grid's 6 points (study.Plan.budget)."""
    from specgen.sweep.katib import check_manifest

    text = ("sweep:\n  metric: eval/accuracy\n  direction: maximize\n  sampler: grid\n  space:\n"
            "    layers[hidden].units: {choice: [16, 32]}\n    layers[drop].rate: {uniform: [0.1, 0.3], step: 0.1}\n")
    out, manifest = emit(tmp_path, capsys, sweep_spec(tmp_path, text), "--parallel", "8")
    assert out == ("wrote k.yaml: a Katib Experiment of 6 trial(s) of eval/accuracy for sweep_mlp, each a TFJob of 1 "
                   "worker(s)\n")
    assert [manifest["spec"][k] for k in ("maxTrialCount", "parallelTrialCount", "maxFailedTrialCount")] == [6, 6, 6]
    manifest["spec"]["maxTrialCount"] = manifest["spec"]["maxFailedTrialCount"] = 10
    assert check_manifest(manifest) == ["spec.maxTrialCount: 10 is more than the grid's 6 combinations"]
