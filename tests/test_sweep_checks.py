"""`specgen sweep`'s refusals before any trial, its `--set` texts and its Katib manifest (no TensorFlow, no trial).

Every bad input is one positioned line and leaves nothing on disk: an unknown searched key (with a did-you-mean
over the resolved spec's keys), a value the key cannot take, an empty or reversed range, a metric the run never
logs, a storage that cannot be opened.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import yaml
from cli_helpers import run_cli

from specgen.cli import main

pytest.importorskip("optuna")

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"
BASE = f"""\
specgen: 1
name: sweep_mlp
inputs: {{image: {{shape: [8, 8, 1]}}}}
outputs: {{logits: out}}
layers:
  - {{name: flat, op: flatten}}
  - {{name: hidden, op: dense, units: 32, activation: relu}}
  - {{name: out, op: dense, units: 10}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers:
  all: {{variables: ["*"], kind: adam, learning_rate: 0.003}}
train: {{batch_size: 64, epochs: 1, metrics: [accuracy], seed: 1}}
data:
  train: {{npz: {DIGITS}, features: {{image: x_train}}, labels: {{label: y_train}}}}
  eval: {{npz: {DIGITS}, features: {{image: x_test}}, labels: {{label: y_test}}}}
"""
SWEEP = """\
sweep:
  metric: {metric}
  direction: maximize
  trials: 2
  space:
{space}
"""
GOOD = ("    optimizers.all.learning_rate: {log_uniform: [1.0e-3, 1.0e-1]}\n"
        "    layers[hidden].units: {choice: [16, 32]}")


def write(tmp_path: Path, space: str = GOOD, metric: str = "eval/accuracy", base: str = BASE) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(base + SWEEP.format(metric=metric, space=space))
    return spec


def refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: Path, *flags: str) -> list[str]:
    before = sorted(p.name for p in tmp_path.iterdir())
    code, out, err = run_cli(["sweep", spec.name, *flags], capsys, tmp_path)
    assert code == 1 and out == "", (out, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing made: no sweep folder, no study
    return err.splitlines()


def test_an_unknown_key_is_one_line_at_the_key_with_a_did_you_mean(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    spec = write(tmp_path, "    layers[hiden].units: {choice: [16, 32]}\n    train.batch_sise: {choice: [32]}")
    assert refused(tmp_path, capsys, spec) == [
        "spec.yaml:21:5: error: no key 'layers[hiden].units' in the resolved spec; did you mean 'layers[hidden].units'?",
        "spec.yaml:22:5: error: no key 'train.batch_sise' in the resolved spec; did you mean 'train.batch_size'?",
        "2 errors found"]
    # The suggestion is a key of the model, never the sweep's own key: with long layer names the closest key to
    # 'layers.6.units' was 'sweep.space.layers.6.units', itself.
    long = BASE.replace("name: hidden,", "name: hidden_projection_of_the_pixels,").replace(
        "name: out,", "name: class_scores_before_softmax,").replace("logits: out}", "logits: class_scores_before_softmax}")
    spec = write(tmp_path, "    layers.6.units: {choice: [16, 32]}", base=long)
    assert refused(tmp_path, capsys, spec)[0] == ("spec.yaml:21:5: error: no key 'layers.6.units' in the resolved "
                                                  "spec; did you mean 'layers'?")


def test_a_value_the_key_cannot_take_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every choice and both ends of a range are tried as --set; a float range on an integer key fails at its low
    end, 16.0: an integer key refuses floats, whole ones too (fields/base.py not_whole_float), as its draws would;
    the advice is the integer range to write, not the spec's "write 16" for a written float."""
    spec = write(tmp_path, "    train.batch_size: {choice: [0, 32]}\n    layers[hidden].units: {uniform: [16, 64]}\n"
                           "    checkpoint.dir: {choice: [elsewhere]}")
    assert refused(tmp_path, capsys, spec) == [
        "spec.yaml:21:5: error: 'train.batch_size' cannot take 0: batch_size: received 0, expected a value > 0",
        "spec.yaml:22:5: error: 'layers[hidden].units' cannot take 16.0 (a value of its range): units: "
        "expected an integer, received 16.0 (a float) (in layer 'hidden'); an integer key is searched with "
        "{int: [16, 64]}",
        "spec.yaml:23:5: error: 'checkpoint.dir' cannot be searched: the sweep gives every trial its own run folder "
        "(SWEEP/trial-NNNN); expected a key that changes how a trial trains",
        "3 errors found"]


def test_two_keys_naming_one_value_are_refused_at_the_second(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`layers.1.units`, `layers[hidden].units` and `layers.01.units` are one value, found as --set finds it: a trial
    would train with the last and Optuna record the others' values too."""
    spec = write(tmp_path, "    layers.1.units: {choice: [8, 16]}\n    train.batch_size: {choice: [32, 64]}\n"
                           "    layers[hidden].units: {choice: [16, 32]}\n    layers.01.units: {int: [4, 8]}")
    same = ("a trial would train with one of them and record both; expected each value searched by one key")
    assert refused(tmp_path, capsys, spec) == [
        f"spec.yaml:23:5: error: 'layers[hidden].units' names the same value as 'layers.1.units' (line 21): {same}",
        f"spec.yaml:24:5: error: 'layers.01.units' names the same value as 'layers.1.units' (line 21): {same}",
        "2 errors found"]


def test_a_fixed_set_of_a_searched_value_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write(tmp_path)
    assert refused(tmp_path, capsys, spec, "--set", "layers.1.units=8", "--set", "train.batch_size=32") == [
        "--set layers.1.units=8: error: the sweep searches this value ('layers[hidden].units' of sweep.space), so "
        "every trial would replace it; expected a --set of a key the sweep does not search",
        "1 error found"]


def test_keys_that_are_not_hyperparameters_cannot_be_searched(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The spec's name (the study's and the trials' MLflow experiment) and where a trial is tracked are the sweep's
    to decide, for all its trials (docs/sweeps.md)."""
    base = BASE.replace("seed: 1}", "seed: 1, tracking: {mlflow: {uri: 'sqlite:///a.db'}}}")
    spec = write(tmp_path, "    name: {choice: [a, b]}\n    train.tracking.mlflow.uri: {choice: ['sqlite:///b.db']}\n"
                           "    train.tracking: {choice: [x]}", base=base)
    tracking = ("it says where a trial is logged, and every trial is logged where the sweep says (--track or the "
                "spec); expected a key that changes how a trial trains")
    assert refused(tmp_path, capsys, spec) == [
        "spec.yaml:21:5: error: 'name' cannot be searched: the spec's name names the study and every trial's MLflow "
        "experiment, one for the whole sweep; expected a key that changes how a trial trains",
        f"spec.yaml:22:5: error: 'train.tracking.mlflow.uri' cannot be searched: {tracking}",
        f"spec.yaml:23:5: error: 'train.tracking' cannot be searched: {tracking}",
        "3 errors found"]


def test_empty_ranges_and_bad_shapes_are_refused_by_validate_too(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    space = ("    a: {uniform: [1, 0]}\n    b: {log_uniform: [0, 1]}\n    c: {choice: []}\n    d: {choise: [1]}\n"
             "    e: {int: [1.5, 3]}\n    f: {choice: [1, 1]}")
    spec = write(tmp_path, space)
    code, _, err = run_cli(["validate", spec.name], capsys, tmp_path)
    assert code == 1
    assert err.splitlines() == [
        "spec.yaml:21:18: error: uniform: the range is empty: received [1.0, 0.0]; expected the low end below the "
        "high end",
        "spec.yaml:22:22: error: log_uniform: a log range needs a low end above 0; received [0.0, 1.0]",
        "spec.yaml:23:17: error: choice: expected at least 1 item(s), received 0",
        "spec.yaml:24:9: error: unknown key 'choise'; did you mean 'choice'? (expected a mapping with one of "
        "'uniform', 'log_uniform', 'int', 'log_int' or 'choice')",
        "spec.yaml:25:15: error: int[0]: expected an integer, received 1.5 (float)",
        "spec.yaml:26:17: error: choice: the value 1 is listed twice; list each value once",
        "6 errors found"]


def test_a_grid_needs_finite_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write(tmp_path)
    spec.write_text(spec.read_text().replace("trials: 2", "trials: 2\n  sampler: grid"))
    assert refused(tmp_path, capsys, spec) == [
        "spec.yaml:17:3: error: sweep: sampler grid needs a finite set of values: 'optimizers.all.learning_rate' is "
        "a continuous range; use choice, int, or uniform with step",
        "1 error found"]


def test_a_metric_the_run_never_logs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert refused(tmp_path, capsys, write(tmp_path, metric="eval/acuracy")) == [
        "spec.yaml:17:11: error: the run never logs 'eval/acuracy' (eval logs the metrics of train.metrics); did you "
        "mean 'eval/accuracy'? (it logs train/loss, train/loss/logits, train/learning_rate/all, train/accuracy, "
        "eval/accuracy)",
        "1 error found"]
    no_eval = BASE.replace("  eval: {npz", "  # eval: {npz")
    assert refused(tmp_path, capsys, write(tmp_path, base=no_eval)) == [
        "spec.yaml:17:11: error: the run never logs 'eval/accuracy' (the spec has no data.eval, so nothing is logged "
        "in eval); did you mean 'train/accuracy'? (it logs train/loss, train/loss/logits, train/learning_rate/all, "
        "train/accuracy)",
        "1 error found"]


def test_a_spec_without_a_sweep_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "plain.yaml"
    spec.write_text(BASE)
    assert refused(tmp_path, capsys, spec) == [
        "plain.yaml: error: the spec has no 'sweep' section; expected one naming the metric, the direction and the "
        "space to search (docs/sweeps.md)",
        "1 error found"]


@pytest.mark.parametrize(("storage", "why"), [
    ("sqlite:////nonexistent/study.db", "(sqlite3.OperationalError) unable to open database file"),
    ("journal:/nonexistent/study.log", "no folder /nonexistent for the journal file"),
    ("not a url", "Could not parse SQLAlchemy URL from given URL string"),
])
def test_a_storage_that_cannot_be_opened(tmp_path: Path, capsys: pytest.CaptureFixture[str], storage: str,
                                         why: str) -> None:
    spec = write(tmp_path)
    assert refused(tmp_path, capsys, spec, "-o", "out", "--storage", storage) == [
        f"--storage {storage}: error: cannot open the storage: {why}; expected an Optuna storage: an RDB URL "
        "(sqlite:///study.db, postgresql://user@host/db) or journal:PATH (a journal file on a shared filesystem)",
        "1 error found"]


@pytest.mark.parametrize(("storage", "shown"), [
    ("sqlite://", "sqlite://"), ("sqlite:///:memory:", "sqlite:///:memory:"),
    ("sqlite+pysqlite://", "sqlite+pysqlite://"),
    ("sqlite:///file::memory:?cache=shared", "sqlite:///file::memory:?cache=shared"),
    ("sqlite:///file:x?mode=memory&uri=true", "sqlite:///file:x?mode=memory&uri=true"),
])
def test_an_in_memory_storage_is_refused_before_anything_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                   storage: str, shown: str) -> None:
    """Each worker thread's connection would find its own empty database (Optuna's traceback, 'no such table')."""
    spec = write(tmp_path)
    assert run_cli(["sweep", spec.name, "-o", "out", "--storage", storage], capsys, tmp_path) == (2, "", (
        f"specgen sweep: error: --storage {shown}: an in-memory SQLite database is private to one connection and "
        "gone when the sweep ends, so the sweep's worker threads, a later run that continues the sweep and other "
        "sweep processes cannot share the study; expected a database file (sqlite:///study.db), an RDB server "
        "(postgresql://user@host/db) or journal:PATH\n"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]  # a usage line (exit 2), nothing made


@pytest.mark.parametrize(("storage", "shown"), [("", "''"), ("  ", "'  '")])
def test_an_empty_storage_is_refused_not_read_as_the_default(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             storage: str, shown: str) -> None:
    spec = write(tmp_path)
    assert run_cli(["sweep", spec.name, "--storage", storage], capsys, tmp_path) == (2, "", (
        f"specgen sweep: error: --storage {shown}: the URL is empty; expected an Optuna storage: an RDB URL "
        "(sqlite:///study.db, postgresql://user@host/db) or journal:PATH (a journal file on a shared filesystem)\n"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]  # a usage line (exit 2), nothing made


def test_a_password_in_the_storage_url_is_never_printed(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    spec = write(tmp_path)
    lines = refused(tmp_path, capsys, spec, "--storage", "postgresql://me:s3cret@127.0.0.1:1/db")
    assert lines[0].startswith("--storage postgresql://me:***@127.0.0.1:1/db: error: cannot open the storage: ")
    assert "s3cret" not in "\n".join(lines)


@pytest.mark.parametrize("value", [0.001, 1e-05, 3.0, 2.5e20, -1e-300, 32, True, "relu", "32", "true", "a: b"])
def test_a_value_reads_back_from_its_set_text(value: object) -> None:
    from specgen.spec.yaml_source import parse_value
    from specgen.sweep.space import value_text

    text = value_text(value)
    back = parse_value(text, "test")
    assert back == value and type(back) is type(value), text
    assert value_text(1e-05) == "1.0e-05"  # YAML 1.1 reads 1e-05 as a string


def test_a_runs_hparams_are_its_set_values() -> None:
    from specgen.runtime.hparams import values

    assert values(["checkpoint.dir=/x/trial-0003", "layers[head/fc].units=64", "optimizers.head.learning_rate=1.0e-05",
                   "train.metrics=[accuracy, mean_loss]", "export.onnx.dynamic_batch=false"]) == {
        "layers[head/fc].units": 64, "optimizers.head.learning_rate": 1e-05,
        "train.metrics": "[accuracy, mean_loss]", "export.onnx.dynamic_batch": False}


def test_the_sweep_process_imports_no_tensorflow(tmp_path: Path) -> None:
    """Checks and the Katib manifest need no TensorFlow: the sweep process never imports it (trials do)."""
    import subprocess

    spec = write(tmp_path)
    code = ("import sys\nfrom specgen.cli import main\n"
            f"rc = main(['sweep', {str(spec)!r}, '--emit', 'katib', '--image', 'r/s:1', '-o', 'k.yaml'])\n"
            "from pathlib import Path\n"
            "from specgen.spec.overrides import load_with_overrides\n"
            "from specgen.sweep.plan import Plan\n"
            "from specgen.sweep.space import parameters\n"
            "from specgen.sweep.summary import hparams_config\n"
            f"loaded = load_with_overrides(Path({str(spec)!r}), [])\n"
            "plan = Plan(loaded, loaded.spec.sweep, parameters(loaded, []), Path('.'), '', 2, 1)\n"
            "hparams_config(plan, Path('.'))\n"
            "assert len(list(Path('.').glob('events.out.tfevents.*'))) == 1\n"
            "assert rc == 0 and 'tensorflow' not in sys.modules, sorted(m for m in sys.modules if 'tensorflow' in m)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path, timeout=120)


# ---- Katib ----------------------------------------------------------------------------------------------------


def emitted(tmp_path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, object]:
    spec = write(tmp_path, GOOD + "\n    train.batch_size: {int: [32, 64], step: 16}")
    code, out, err = run_cli(["sweep", spec.name, "--emit", "katib", "--image", "registry/specgen:1", "-o", "k.yaml",
                              "--parallel", "2", *flags], capsys, tmp_path)
    assert (code, err) == (0, ""), err
    assert out == ("wrote k.yaml: a Katib Experiment of 2 trial(s) of eval/accuracy for sweep_mlp, each a TFJob of 1 "
                   "worker(s)\n")
    return yaml.safe_load((tmp_path / "k.yaml").read_text())


def test_the_katib_experiment_passes_katibs_api_and_runs_the_tfjob(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from specgen.sweep.katib import check_manifest

    manifest = emitted(tmp_path, capsys)
    assert check_manifest(manifest) == []
    spec = manifest["spec"]
    assert spec["objective"] == {"type": "maximize", "objectiveMetricName": "eval/accuracy",
                                 "metricStrategies": [{"name": "eval/accuracy", "value": "latest"}]}
    assert spec["parameters"] == [
        {"name": "optimizers-all-learning-rate", "parameterType": "double",
         "feasibleSpace": {"min": "0.001", "max": "0.1", "distribution": "logUniform"}},
        {"name": "layers-hidden-units", "parameterType": "categorical", "feasibleSpace": {"list": ["16", "32"]}},
        {"name": "train-batch-size", "parameterType": "int",
         "feasibleSpace": {"min": "32", "max": "64", "step": "16", "distribution": "uniform"}}]
    assert spec["metricsCollectorSpec"] == {"source": {"fileSystemPath": {"path": "/specgen/run/tensorboard",
                                                                          "kind": "Directory"}},
                                            "collector": {"kind": "TensorFlowEvent"}}
    container = spec["trialTemplate"]["trialSpec"]["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"][
        "containers"][0]
    assert container["command"] == [
        "specgen", "train", "spec.yaml", "--strategy", "multi_worker", "--resume-or-start", "--quiet",
        "--set", "checkpoint.dir=/specgen/run",
        "--set", "optimizers.all.learning_rate=${trialParameters.optimizers-all-learning-rate}",
        "--set", "layers[hidden].units=${trialParameters.layers-hidden-units}",
        "--set", "train.batch_size=${trialParameters.train-batch-size}"]
    assert "metadata" not in spec["trialTemplate"]["trialSpec"]


def test_a_broken_manifest_fails_the_check_where_katib_would(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The vendored API types, made strict, and the webhook's checks across fields."""
    from specgen.sweep.katib import check_manifest

    good = emitted(tmp_path, capsys)
    broken = copy.deepcopy(good)
    broken["spec"]["objective"]["type"] = "maximise"
    broken["spec"]["parameters"][0]["feasibleSpace"]["distrbution"] = "logUniform"
    broken["spec"]["parallelTrialCount"] = "2"
    assert check_manifest(broken) == [
        "spec.objective.type: 'maximise' is not one of ['minimize', 'maximize']",
        "spec.parallelTrialCount: '2' is not of type 'integer'",
        "spec.parameters[0].feasibleSpace: Additional properties are not allowed ('distrbution' was unexpected)"]
    broken = copy.deepcopy(good)
    broken["metadata"]["name"] = "Digits_Sweep"
    broken["spec"]["parallelTrialCount"] = 5
    broken["spec"]["trialTemplate"]["trialParameters"][1]["reference"] = "layers-hidden-unit"
    template = broken["spec"]["trialTemplate"]["trialSpec"]["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    template["containers"][0]["command"][-1] = "train.batch_size=${trialParameters.batch}"
    template["containers"][0]["imagePullPolicy"] = 3
    assert check_manifest(broken) == [
        "spec.trialTemplate.trialSpec.spec.tfReplicaSpecs.Worker.template.spec.containers[0].imagePullPolicy: 3 is "
        "not of type 'string'",
        "spec.trialTemplate.trialSpec.spec.tfReplicaSpecs.Worker.template.spec.containers[0].imagePullPolicy: 3 is "
        "not one of ['Always', 'IfNotPresent', 'Never']",
        "metadata.name: 'Digits_Sweep' is not a Katib Experiment name (lower case letters, digits and '-', a letter "
        "first, at most 40 characters)",
        "spec.parallelTrialCount: 5 is more than spec.maxTrialCount 2",
        "spec.trialTemplate.trialParameters[1].reference: 'layers-hidden-unit' is not in spec.parameters",
        "spec.trialTemplate.trialParameters[2].name: 'train-batch-size' is not used in the trialSpec",
        "spec.trialTemplate.trialSpec: ${trialParameters.batch} is not in trialParameters"]


def test_katib_needs_an_image_and_local_flags_refuse_katibs(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    spec = write(tmp_path)
    code, _, err = run_cli(["sweep", spec.name, "--emit", "katib"], capsys, tmp_path)
    assert (code, err) == (2, "specgen sweep: error: --emit katib: --image is required: the container image that "
                              "holds specgen, TensorFlow and the spec (e.g. --image registry/train:1.0)\n")
    code, _, err = run_cli(["sweep", spec.name, "--workers", "2"], capsys, tmp_path)
    assert (code, err) == (2, "specgen sweep: error: --workers goes with --emit katib; a local sweep takes -o, "
                              "--trials, --parallel, --storage, --track and --set\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


def test_the_cli_lists_sweep() -> None:
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])


def test_a_storage_file_prints_relative_to_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specgen.sweep.storage import masked

    monkeypatch.chdir(tmp_path)
    assert masked(f"sqlite:///{tmp_path / 'runs' / 'study.db'}") == "sqlite:///runs/study.db"
    assert masked(f"journal:{tmp_path / 'j.log'}") == "journal:j.log"
    assert masked("sqlite:////elsewhere/study.db") == "sqlite:////elsewhere/study.db"
