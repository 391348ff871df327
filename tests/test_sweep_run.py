"""`specgen sweep` end to end: trials are real `specgen train` runs (subprocesses), the study real Optuna in SQLite.

- a 4-trial sweep of the digits CNN, two at a time: the summary, the picture, each trial's provenance, TensorBoard's
  HParams dashboard listing the trials, and the best trial reproduced bit for bit by the printed `specgen train` line;
- `kill -9` mid-sweep: the trial it cut short dies with it, and the next `specgen sweep` re-runs it and no other;
- two sweep processes on one SQLite study: every trial is run by exactly one of them;
- the median pruner stops a trial that trails (the eval is on disk as it happens);
- Ctrl-C stops the running trials and queues them again.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("optuna")
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"
MLP = f"""\
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
train: {{batch_size: 64, epochs: @EPOCHS@, metrics: [accuracy], seed: 1}}
data:
  train: {{npz: {DIGITS}, features: {{image: x_train}}, labels: {{label: y_train}}}}
  eval: {{npz: {DIGITS}, features: {{image: x_test}}, labels: {{label: y_test}}}}
sweep:
  metric: eval/accuracy
  direction: maximize
  trials: @TRIALS@
@EXTRA@  space:
@SPACE@
"""
LR = "    optimizers.all.learning_rate: {log_uniform: [1.0e-3, 1.0e-1]}"


def mlp(folder: Path, trials: int, epochs: int = 1, space: str = LR, extra: str = "") -> Path:
    spec = folder / "spec.yaml"
    text = MLP.replace("@TRIALS@", str(trials)).replace("@EPOCHS@", str(epochs)).replace("@EXTRA@", extra)
    spec.write_text(text.replace("@SPACE@", space))
    return spec


def sweep(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specgen", "sweep", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def started(out: str) -> list[int]:
    return [int(n) for n in re.findall(r"^trial (\d+) started", out, re.M)]


def checkpoint_bytes(run: Path) -> dict[str, bytes]:
    newest = run / (run / "latest").read_text().strip()
    return {p.name: p.read_bytes() for p in sorted(newest.glob("variables.*"))}


# ---- the digits CNN, four trials, two at a time --------------------------------------------------------------------


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    folder = tmp_path_factory.mktemp("cnn")
    text = (ROOT / "examples" / "specs" / "digits_cnn.yaml").read_text()
    text = text.replace("../data/digits.npz", str(DIGITS)).replace("epochs: 10", "epochs: 1")
    text = text.replace("dir: ../../runs/digits_cnn", "dir: runs/digits_cnn")
    text += ("\nsweep:\n  metric: eval/accuracy\n  direction: maximize\n  trials: 4\n  space:\n"
             "    optimizers.head.learning_rate: {log_uniform: [1.0e-4, 1.0e-1]}\n"
             "    layers[head/fc].units: {choice: [32, 64]}\n")
    (folder / "cnn.yaml").write_text(text)
    result = sweep(folder, "cnn.yaml", "--parallel", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    return folder, result


def test_four_trials_give_a_table_a_best_line_and_a_picture(cnn: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    folder, result = cnn
    out = result.stdout
    assert out.splitlines()[0] == ("sweep digits_cnn: 4 trials of eval/accuracy (maximize), tpe sampler, pruner none, "
                                   "2 at a time, into runs/digits_cnn-sweep; study 'digits_cnn' in "
                                   "sqlite:///runs/digits_cnn-sweep/study.db")  # printed relative to the cwd
    assert sorted(started(out)) == [0, 1, 2, 3]
    assert "4 trial(s): 4 finished" in out
    sweep_folder = folder / "runs" / "digits_cnn-sweep"
    summary = (sweep_folder / "summary.txt").read_text()
    assert summary.splitlines()[0].split() == ["trial", "state", "eval/accuracy", "seconds",
                                               "optimizers.head.learning_rate", "layers[head/fc].units", "note"]
    assert (sweep_folder / "sweep.svg").read_text().startswith("<?xml")
    for n in range(4):  # each trial is an ordinary run whose resolved spec records its values as --set
        resolved = (sweep_folder / f"trial-{n:04d}" / "spec.resolved.yaml").read_text()
        assert "# --set optimizers.head.learning_rate" in resolved and "# --set layers[head/fc].units" in resolved
    assert out.rstrip().endswith("wrote runs/digits_cnn-sweep/summary.txt and runs/digits_cnn-sweep/sweep.svg")


def test_the_best_trial_is_reproduced_bit_for_bit_by_its_line(cnn: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    folder, result = cnn
    best = re.search(r"^best: trial (\d+), eval/accuracy ([\d.]+), run folder (\S+)$", result.stdout, re.M)
    line = re.search(r"^reproduce: (.+)$", result.stdout, re.M)
    assert best and line, result.stdout
    words = shlex.split(line.group(1))
    assert words[:3] == ["specgen", "train", "cnn.yaml"] and words[3::2] == ["--set"] * 2
    again = subprocess.run([sys.executable, "-m", *words, "--quiet"], cwd=folder, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr
    assert f"accuracy {best.group(2)}" in again.stdout
    trial, repeat = checkpoint_bytes(folder / best.group(3)), checkpoint_bytes(folder / "runs" / "digits_cnn")
    assert trial.keys() == repeat.keys() and len(trial) == 2
    assert trial == repeat  # every variable, bit for bit


def test_tensorboard_hparams_lists_every_trial(cnn: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    """The HParams plugin's own session-groups request, as the dashboard sends it, on `--logdir SWEEP`."""
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import hparams_plugin
    from werkzeug.test import Client
    from werkzeug.wrappers import Response

    folder, _ = cnn
    logdir = str(folder / "runs" / "digits_cnn-sweep")
    events = plugin_event_multiplexer.EventMultiplexer()
    events.AddRunsFromDirectory(logdir)
    events.Reload()
    context = base_plugin.TBContext(logdir=logdir, multiplexer=events,
                                    data_provider=data_provider.MultiplexerDataProvider(events, logdir))
    routes = hparams_plugin.HParamsPlugin(context).get_plugin_apps()
    request = {"experimentName": "", "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS"], "colParams": [],
               "startIndex": 0, "sliceSize": 100}
    reply = Client(routes["/session_groups"], Response).post("/", data=json.dumps(request),
                                                               content_type="application/json")
    groups = json.loads(reply.get_data(as_text=True))["sessionGroups"]
    experiment = json.loads(Client(routes["/experiment"], Response).post(
        "/", data=json.dumps({"experimentName": ""}), content_type="application/json").get_data(as_text=True))
    domains = {h["name"]: h.get("domainInterval") or h.get("domainDiscrete") for h in experiment["hparamInfos"]}
    assert domains == {"optimizers.head.learning_rate": {"minValue": 1e-4, "maxValue": 0.1},
                       "layers[head/fc].units": [32.0, 64.0]}
    assert [m["displayName"] for m in experiment["metricInfos"]] == ["eval/accuracy"]
    table = (folder / "runs" / "digits_cnn-sweep" / "summary.txt").read_text().splitlines()[2:6]
    expected = {f"trial-{int(row.split()[0]):04d}/tensorboard": float(row.split()[2]) for row in table}
    found = {g["sessions"][0]["name"]: g for g in groups}
    assert found.keys() == expected.keys()
    for name, group in found.items():
        assert set(group["hparams"]) == {"optimizers.head.learning_rate", "layers[head/fc].units"}
        metric = {(m["name"]["group"], m["name"]["tag"]): m["value"] for m in group["metricValues"]}
        assert round(metric["eval", "accuracy"], 4) == expected[name]


def test_the_html_report_shows_the_sweep(cnn: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    from specgen.cli import main

    folder, _ = cnn
    page = folder / "page.html"
    old = Path.cwd()
    os.chdir(folder)
    try:
        assert main(["report", "cnn.yaml", "--html", "--sweep", "runs/digits_cnn-sweep", "-o", "page.html"]) == 0
    finally:
        os.chdir(old)
    text = page.read_text()
    assert re.findall(r'<section id="([a-z]+)">', text)[-1] == "sweep"
    section = text[text.index('<section id="sweep">'):]
    assert "<h2>Sweep (runs/digits_cnn-sweep)</h2>" in section and "reproduce: specgen train cnn.yaml" in section
    assert section.count("<svg") == 1


# ---- kill -9 and resume ----------------------------------------------------------------------------------------


def _running(marker: str) -> list[int]:
    """Processes whose command line holds `marker` (the trial's run folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux's")
def test_a_killed_sweep_resumes_and_runs_no_finished_trial_again(tmp_path: Path) -> None:
    """A grid of two learning rates (in seed 0's order: 0.003, then 1e-06) and the median pruner after one trial:
    the sweep is killed while 1e-06 trains, and its re-run, whose first eval trails 0.003's, is pruned there."""
    extra = "  sampler: grid\n  pruner: {kind: median, startup_trials: 1}\n"
    mlp(tmp_path, trials=2, epochs=3, extra=extra, space="    optimizers.all.learning_rate: {choice: [1.0e-6, 0.003]}")
    process = subprocess.Popen([sys.executable, "-m", "specgen", "sweep", "spec.yaml", "-o", "out"], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    lines = []
    for line in process.stdout:  # trial 0 finished, trial 1 started: kill the sweep while trial 1 trains
        lines.append(line)
        if line.startswith("trial 1 started"):
            break
    time.sleep(1.5)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert any(line.startswith("trial 0 finished") for line in lines), lines
    first = checkpoint_bytes(tmp_path / "out" / "trial-0000")
    stamps = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "out" / "trial-0000").rglob("*")}
    deadline = time.monotonic() + 20
    while _running(str(tmp_path / "out" / "trial-0001")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _running(str(tmp_path / "out" / "trial-0001"))  # the trial died with its sweep
    result = sweep(tmp_path, "spec.yaml", "-o", "out")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "(2 trial(s) there already)" in out.splitlines()[0]
    assert "trial 1 was interrupted (its sweep process is gone): queued again" in out
    assert started(out) == [2] and "trial 2 started (trial 1 again): optimizers.all.learning_rate=1.0e-06" in out
    assert re.search(r"^trial 2 pruned at eval 1: eval/accuracy 0\.\d{4} \(\d+\.\d s\)$", out, re.M), out
    assert re.search(r"^\s+1\s+interrupted\s", out, re.M) and re.search(r"^\s+2\s+pruned\s.*runs trial 1 again$",
                                                                          out, re.M)
    assert "3 trial(s): 1 finished, 1 interrupted, 1 pruned" in out and "best: trial 0," in out
    assert checkpoint_bytes(tmp_path / "out" / "trial-0000") == first  # the finished trial was left alone
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "out" / "trial-0000").rglob("*")} == stamps


def test_ctrl_c_stops_the_trials_and_queues_them_again(tmp_path: Path) -> None:
    mlp(tmp_path, trials=2, epochs=3)
    process = subprocess.Popen([sys.executable, "-m", "specgen", "sweep", "spec.yaml", "-o", "out", "--parallel", "2"],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("trial 1 started"):
            break
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, out + err
    assert sorted(re.findall(r"^trial (\d) interrupted: it runs again when the sweep continues$", out, re.M)) == ["0", "1"]
    assert "4 trial(s): 2 interrupted, 2 queued" in out
    assert err == ("specgen sweep: interrupted; the trials it stopped run again when the same command continues the "
                   "sweep (study 'sweep_mlp' in sqlite:///out/study.db)\n")
    assert not _running(str(tmp_path / "out" / "trial-000"))


# ---- two processes, one study ------------------------------------------------------------------------------------


def test_two_processes_on_one_sqlite_study_run_each_trial_once(tmp_path: Path) -> None:
    mlp(tmp_path, trials=2)
    command = [sys.executable, "-m", "specgen", "sweep", "spec.yaml", "-o", "out"]
    processes = [subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in processes]
    assert [p.returncode for p in processes] == [0, 0], outputs
    ran = [started(out) for out, _ in outputs]
    every = sorted(ran[0] + ran[1])
    assert len(every) == len(set(every)), ran  # no trial run by both
    assert every == list(range(len(every))) and 2 <= len(every) <= 3, ran  # the budget, one more at a race
    for n in every:  # and each trial's run folder holds exactly one run
        log = (tmp_path / "out" / f"trial-{n:04d}.log").read_text()
        assert log.count("started a new run in") == 1, log
