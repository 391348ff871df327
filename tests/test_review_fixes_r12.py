"""Review rt12, findings 5, 7 and 8 (finding 6: tests/test_resume_lr_r12.py test_the_runtime_schedule_is_the_generated_one
already compares resume_rates.spec_schedule with the generated train.py's schedule for every kind of the registry).

- 5: `--probe --resume` probed at the spec's learning rate without the note `--resume` prints when it differs from
  the checkpoint's.
- 7: a worker the parent restarted counted again, in specgen_model_loads_total{result="refused"}, the refusals the
  live workers had counted; under --model-control none it loaded the repository as it is now (a version added since
  served beside the live workers' older one); its start_failed line said "which do(es) not load".
- 8: a study of an older specgen (its sweep section recorded only) was made to record this spec without a word; the
  advice `--set name=NEW_NAME` made a study `specgen report --sweep` cannot open (it takes no --set).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from cli_helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]


# --- 5: --probe --resume says what --resume says of the learning rate ------------------------------------------

@pytest.mark.slow
def test_probe_on_resume_notes_a_learning_rate_edited_since_the_checkpoint(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tensorflow")
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.standard_normal((64, 6)).astype(np.float32),
             y=rng.integers(0, 3, 64).astype(np.int64))
    from test_resume_lr_r12 import write_spec  # its spec (TensorFlow is there: the import is here)

    write_spec(tmp_path, "adam", "0.01")
    assert run_cli(["train", "lr.yaml", "--steps", "2", "--quiet"], capsys, tmp_path)[0] == 0
    write_spec(tmp_path, "adam", "0.02")
    code, out, err = run_cli(["train", "lr.yaml", "--probe", "--resume"], capsys, tmp_path)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("probe: one batch of 16 examples, weights from the checkpoint run/ckpt-00000002; ")
    assert lines[1:3] == ["note: optimizers.all.learning_rate changed since ckpt-00000002 (0.01 -> 0.02): training "
                          "goes on at the spec's rate, not the checkpoint's", ""]
    # A --set of the rate in the command is in view already: no note, as --resume shows it on its own line instead
    code, out, err = run_cli(["train", "lr.yaml", "--probe", "--resume", "--set", "optimizers.all.learning_rate=0.03"],
                             capsys, tmp_path)
    assert (code, err, out.splitlines()[1]) == (0, "", "")


# --- 7: a restarted worker of `specgen serve --workers N` -------------------------------------------------------

MLP = "digits_mlp"


def _serve_imports() -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("uvicorn")


def restarted(repo: Path, mode: str, live: dict[str, set[int]]) -> Any:
    """What process._restore reads of a restarted worker's service: its control, registry, and the versions the live
    workers serve (as specgen_model_info in the shared metrics folder gives them)."""
    from specgen.serve.control import ModelControl, ModelSource
    from specgen.serve.limits import ByteBudget
    from specgen.serve.metrics import ServerMetrics
    from specgen.serve.registry import Registry

    registry = Registry(ServerMetrics(), None, True, 64 << 20, ByteBudget(1))
    control = ModelControl(registry, ModelSource(repo, "cpu"), mode, poll_seconds=3600)
    return SimpleNamespace(control=control, registry=registry,
                           metrics=SimpleNamespace(served_by_live_workers=lambda: live))


def refused_count(service: Any) -> float:
    from serve_helpers import metric

    return metric(service.registry.metrics.render().decode(), "specgen_model_loads_total", model=MLP, result="refused")


@pytest.fixture(scope="module")
def mlp() -> dict[int, tuple[Any, bytes]]:
    _serve_imports()
    from serve_helpers import model_bytes

    return {v: model_bytes(MLP, seed=v) for v in (1, 2)}


def test_a_restart_counts_no_refusal_the_live_workers_counted(
        tmp_path: Path, mlp: dict[int, tuple[Any, bytes]], caplog: pytest.LogCaptureFixture) -> None:
    from serve_helpers import events

    from specgen.runtime.triton import write_repository
    from specgen.serve.process import _restore

    folder = write_repository(tmp_path, *mlp[1], version=1)
    (folder / "2").mkdir()
    (folder / "2" / "model.onnx").write_bytes(b"not onnx")
    service = restarted(tmp_path, "poll", {MLP: {1}})
    with caplog.at_level(logging.INFO, logger="specgen.serve"):
        _restore(service)
    assert sorted(service.registry.models[MLP]) == [1]
    assert [(e["model"], e["version"]) for e in events(caplog.records, "model_refused")] == [(MLP, 2)]  # logged
    assert refused_count(service) == 0  # not counted: the live workers did
    asyncio.run(service.control._load(MLP, folder, True, service.control.seen[MLP]))  # a load after the start counts
    assert refused_count(service) == 1


def test_a_restart_under_none_serves_the_live_workers_versions_not_one_added_since(
        tmp_path: Path, mlp: dict[int, tuple[Any, bytes]]) -> None:
    from specgen.runtime.triton import write_repository
    from specgen.serve.process import _restore

    write_repository(tmp_path, *mlp[1], version=1)
    write_repository(tmp_path, *mlp[2], version=2)  # version_policy latest 1 chooses it: the live workers never read it
    other = write_repository(tmp_path / "later", *mlp[1], version=1)  # a model folder added since: not loaded either
    other.rename(tmp_path / "added")
    config = tmp_path / "added" / "config.pbtxt"
    config.write_text(config.read_text().replace(f'name: "{MLP}"', 'name: "added"'))
    service = restarted(tmp_path, "none", {MLP: {1}})
    _restore(service)
    assert {name: sorted(v) for name, v in service.registry.models.items()} == {MLP: [1]}
    # No live worker serving (every worker died at once): the repository as a poll loads it
    service = restarted(tmp_path, "none", {})
    _restore(service)
    assert sorted(service.registry.models) == ["added", MLP] and sorted(service.registry.models[MLP]) == [2]


def test_a_restart_under_none_that_cannot_serve_the_live_versions_names_them(
        tmp_path: Path, mlp: dict[int, tuple[Any, bytes]], monkeypatch: pytest.MonkeyPatch) -> None:
    from specgen.runtime.triton import write_repository
    from specgen.serve.model_config import RepositoryError
    from specgen.serve.process import _restore

    monkeypatch.chdir(tmp_path)
    write_repository(tmp_path / "repo", *mlp[2], version=2)
    with pytest.raises(RepositoryError) as caught:
        _restore(restarted(Path("repo"), "none", {MLP: {1, 2}}))
    assert str(caught.value) == (
        f"the other workers serve '{MLP}' version 1 as they loaded it at their start (--model-control none: they do "
        f"not read the repository again), which does not load from the repository as it is now ({MLP} version 1: "
        f"repo/{MLP}/1: no such folder); this worker starts once the repository holds it again")
    (tmp_path / "repo" / MLP / "2" / "model.onnx").write_bytes(b"not onnx")  # replaced by a file that does not load
    with pytest.raises(RepositoryError) as caught:
        _restore(restarted(Path("repo"), "none", {MLP: {1, 2}, "gone": {3}}))
    assert str(caught.value) == (
        f"the other workers serve '{MLP}' versions [1, 2], 'gone' version 3 as they loaded them at their start "
        "(--model-control none: they do not read the repository again), which do not load from the repository as it "
        f"is now ({MLP} version 1: repo/{MLP}/1: no such folder; {MLP} version 2: repo/{MLP}/2/model.onnx: not an "
        "ONNX model (it is a text file); expected an .onnx model written by specgen export; gone version 3: "
        "repo/gone/3: no such folder); this worker starts once the repository holds them again")


def test_a_poll_restart_that_cannot_serve_two_models_says_do_not(
        tmp_path: Path, mlp: dict[int, tuple[Any, bytes]], monkeypatch: pytest.MonkeyPatch) -> None:
    from specgen.runtime.triton import write_repository
    from specgen.serve.model_config import RepositoryError
    from specgen.serve.process import _restore

    monkeypatch.chdir(tmp_path)
    folder = write_repository(tmp_path / "repo", *mlp[1], version=1)
    (folder / "1" / "model.onnx").unlink()
    (tmp_path / "repo" / "other").mkdir()
    (tmp_path / "repo" / "other" / "config.pbtxt").write_text('name: "other" }\n')
    with pytest.raises(RepositoryError) as caught:
        _restore(restarted(Path("repo"), "poll", {MLP: {1}, "other": {4}}))
    why = "repo/other/config.pbtxt:1:15: not a Triton model configuration: Expected identifier or number, got }."
    assert str(caught.value) == (
        f"the other workers serve '{MLP}', 'other', which do not load from the repository as it is now ({MLP}: "
        f"repo/{MLP}: no version folder holds model.onnx, or version_policy latest {{ num_versions: 1 }} selects none "
        f"of []; other: {why}); "
        "this worker starts once the repository serves them again (or the other workers let them go)")


def test_the_live_workers_versions_come_from_model_info(tmp_path: Path) -> None:
    """prometheus_client picks its multiprocess values at import: a process of its own, with the folder set."""
    pytest.importorskip("prometheus_client")
    script = (
        "from specgen.serve.metrics import ServerMetrics\n"
        "m = ServerMetrics()\n"
        "a, b, c = object(), object(), object()\n"
        "m.model_loaded('x', 1, 'cpu', a); m.model_loaded('x', 2, 'cpu', b); m.model_loaded('y', 7, 'cpu', c)\n"
        "m.model_unloaded('x', 1, 'cpu', a)\n"
        "print(sorted((k, sorted(v)) for k, v in m.served_by_live_workers().items()))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}, cwd=ROOT)
    assert (done.returncode, done.stdout, done.stderr) == (0, "[('x', [2]), ('y', [7])]\n", "")


@pytest.mark.slow
def test_workers_under_none_serve_one_version_after_a_restart(
        tmp_path: Path, mlp: dict[int, tuple[Any, bytes]]) -> None:
    """Two workers under --model-control none serve version 1; version 2 is added (latest 1 would choose it) and
    worker 0 is killed: its replacement serves version 1, so every request is answered by version 1 (before: the
    restarted worker served 2, and requests flipped between the versions for as long as the server ran)."""
    from test_serve_r12 import Log, fields, http_infer, stop

    from specgen.runtime.triton import write_repository

    write_repository(tmp_path, *mlp[1], version=1)
    command = [sys.executable, "-m", "specgen", "serve", str(tmp_path), "--provider", "cpu", "--port", "0",
               "--grpc-port", "0", "--threads", "1", "--workers", "2"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        log = Log(process.stderr)
        started = log.wait("workers")
        write_repository(tmp_path, *mlp[2], version=2)
        os.kill(started["pids"][0], signal.SIGKILL)
        new = int(log.wait("worker_restarted", worker=0)["pid"])
        assert fields(log.wait("worker_ready", 60)) == {"level": "info", "logger": "specgen.serve",
                                                        "message": "worker ready", "event": "worker_ready",
                                                        "worker": 0, "pid": new}
        assert [http_infer(started["http"]) for _ in range(20)] == ["1"] * 20
        assert stop(process) == 0
    finally:
        process.kill()
        process.wait()


# --- 8: studies ---------------------------------------------------------------------------------------------------

def _sweep_spec(tmp_path: Path, name: str = "tiny_mlp", file: str = "mlp.yaml") -> Path:
    from test_sweep_r12 import SPEC, write

    return write(tmp_path, SPEC.replace("name: tiny_mlp", f"name: {name}"), file)


def test_an_older_study_made_to_record_the_spec_says_so_once(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A study of an older specgen (its definition: the sweep section and the --sets) whose budget is spent: the
    sweep runs no trial, records the whole spec, and says so in one line under its first; the next run says nothing."""
    optuna = pytest.importorskip("optuna")
    from test_sweep_r12 import make_study

    plan, study = make_study(_sweep_spec(tmp_path), tmp_path / "k9")
    study.set_user_attr("specgen", {k: v for k, v in plan.definition().items() if k not in ("spec", "keys")})
    for value in (0.5, 0.7):
        study.add_trial(optuna.trial.create_trial(
            params={"optimizers.all.learning_rate": 0.01, "layers[hidden].units": 8}, value=value,
            distributions={"optimizers.all.learning_rate": optuna.distributions.FloatDistribution(1e-3, 0.1, log=True),
                           "layers[hidden].units": optuna.distributions.CategoricalDistribution([8, 16, 32])}))
    code, out, err = run_cli(["sweep", "mlp.yaml", "-o", "k9"], capsys, tmp_path)
    assert (code, err) == (0, ""), err
    note = ("note: the study 'tiny_mlp' in sqlite:///k9/study.db was made by an older specgen, which recorded only "
            "its sweep section and --sets; it now records all of mlp.yaml (as resolved), and refuses a sweep of any "
            "other spec, or of this one edited, from now on")
    assert out.splitlines()[1] == note and out.count("note: ") == 1
    code, out, err = run_cli(["sweep", "mlp.yaml", "-o", "k9"], capsys, tmp_path)
    assert (code, err) == (0, "") and "note: " not in out


def test_the_advice_for_a_new_study_in_a_storage_makes_one_report_reads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("optuna")
    pytest.importorskip("matplotlib")
    from test_sweep_r12 import make_study

    make_study(_sweep_spec(tmp_path), tmp_path / "out1")
    url = f"sqlite:///{tmp_path / 'out1' / 'study.db'}"
    code, out, err = run_cli(["sweep", "mlp.yaml", "-o", "fresh", "--storage", url, "--set", "train.epochs=1"],
                             capsys, tmp_path)
    assert (code, out) == (1, "")
    assert err.splitlines()[0].endswith(", or a new study: a copy of the spec with another 'name' (the study's name "
                                        "in this storage) or another --storage")
    # The advice taken: a copy named otherwise, in the same storage; report reads it back with that copy
    make_study(_sweep_spec(tmp_path, "tiny_mlp_epochs1", "copy.yaml"), tmp_path / "fresh", url, ["train.epochs=1"])
    code, out, err = run_cli(["report", "copy.yaml", "--html", "--sweep", "fresh", "--storage", url, "-o", "r.html"],
                             capsys, tmp_path)
    assert (code, err) == (0, "") and out.startswith("wrote r.html (")
    assert "0 trial(s)" in (tmp_path / "r.html").read_text()
