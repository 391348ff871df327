"""A smoke of every command, end to end on the bundled digits MLP: the quick tier's spine (docs/testing.md).

One module-scoped run trains two steps and exports; each test then drives one command as a user does (the real
CLI: in process where that is faster, a child process for `serve`). Each asserts what the command must say or
write, so a command broken at any layer (spec, IR, render, runtime, serve) fails here within the quick tier.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_cli
from port_helpers import bound_port

from specgen.cli import main

pytestmark = pytest.mark.quick
ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SPEC = "digits_mlp.yaml"


cli = run_cli


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the example spec and its data, trained for two steps and exported with a Triton repository."""
    folder = tmp_path_factory.mktemp("smoke")
    (folder / "specs").mkdir()
    shutil.copytree(EXAMPLES / "data", folder / "data", ignore=shutil.ignore_patterns("digits_folder"))
    text = (EXAMPLES / "specs" / SPEC).read_text().replace("../../runs/digits_mlp", "../run")
    (folder / "specs" / SPEC).write_text(text)
    code = main(["train", str(folder / "specs" / SPEC), "--steps", "2", "--quiet",
                 "--set", f"checkpoint.dir={folder / 'run'}"])
    assert code == 0
    assert main(["export", str(folder / "specs" / SPEC), "--checkpoint", str(folder / "run"), "-o",
                 str(folder / "export"), "--triton"]) == 0
    return folder


def test_validate_build_schema_report_graph(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = f"specs/{SPEC}"
    code, out, _ = cli(["validate", spec], capsys, work)
    assert (code, out) == (0, f"ok: {spec} (digits_mlp: 4 layers, 17 variables)\n")
    assert cli(["build", spec, "--out", "gen"], capsys, work)[0] == 0
    assert {p.name for p in (work / "gen" / "digits_mlp").iterdir()} >= {"model.py", "train.py", "model.onnx"}
    assert cli(["build", spec, "--out", "gen", "--check"], capsys, work)[0] == 0
    code, out, _ = cli(["report", spec], capsys, work)
    assert code == 0 and "hidden/kernel" in out and "[128, 10]" in out
    code, out, _ = cli(["graph", spec, "-o", "g.svg"], capsys, work)
    assert code == 0 and (work / "g.svg").read_text().startswith("<svg")
    assert cli(["schema", "-o", "schema.json"], capsys, work)[0] == 0


def test_explain_resolved_and_diff(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = f"specs/{SPEC}"
    code, out, _ = cli(["explain", spec, "layers[hidden].units"], capsys, work)
    assert code == 0 and out.splitlines()[0] == "layers[hidden].units = 128"
    code, out, _ = cli(["validate", spec, "--resolved"], capsys, work)
    assert code == 0 and "  batch_size: 32  # specs/digits_mlp.yaml:" in out
    code, out, _ = cli(["diff", spec, "run", "--fail-on", "interface,checkpoint"], capsys, work)
    assert code == 0 and "interface: unchanged" in out


def test_data_and_restore_plan(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(["data", f"specs/{SPEC}"], capsys, work)
    assert code == 0 and "buffer 1,437" in out
    code, out, _ = cli(["restore-plan", f"specs/{SPEC}", "--from", "run"], capsys, work)
    assert code == 0 and "restored 4, initialized 0" in out


def test_train_wrote_a_checkpoint_and_its_provenance(work: Path) -> None:
    assert (work / "run" / "ckpt-00000002").is_dir()
    assert {"provenance.json", "spec.resolved.yaml"} <= {p.name for p in (work / "run").iterdir()}


def test_infer_curves_and_html_report(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(["infer", "export/model.onnx", "--input", "data/digits.npz", "--feed", "image=x_test",
                        "--labels", "y_test"], capsys, work)
    assert code == 0 and "accuracy" in out
    code, _, _ = cli(["curves", "run", "-o", "curves.svg"], capsys, work)
    assert code == 0 and (work / "curves.svg").read_text().startswith("<?xml")
    code, _, _ = cli(["report", f"specs/{SPEC}", "--html", "--run", "run", "-o", "report.html"], capsys, work)
    assert code == 0 and "<html" in (work / "report.html").read_text()


def test_serve_answers_one_request(work: Path, tmp_path: Path) -> None:
    httpx = pytest.importorskip("httpx")
    log = tmp_path / "serve.log"
    # port 0, read back from the server's log: a port picked here and closed for the child could be taken meanwhile.
    # --cuda-graphs on a machine without CUDA: served as without it, with one line saying why (serve/models.py).
    with log.open("wb") as stderr:
        server = subprocess.Popen([sys.executable, "-m", "specgen", "serve", str(work / "export"), "--port", "0",
                                   "--cuda-graphs"],
                                  stdout=subprocess.DEVNULL, stderr=stderr, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 120
        base = f"http://127.0.0.1:{bound_port(server, log, deadline)}"
        while True:
            try:
                if httpx.get(f"{base}/v2/health/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:] \
                if server.poll() is not None else "the server did not get ready in 120 s"
            time.sleep(0.2)
        image = np.load(work / "data" / "digits.npz")["x_test"][:1].astype(np.float32)
        body = {"inputs": [{"name": "image", "shape": list(image.shape), "datatype": "FP32",
                            "data": image.ravel().tolist()}]}
        answer = httpx.post(f"{base}/v2/models/digits_mlp/infer", json=body, timeout=30)
        assert answer.status_code == 200, answer.text
        assert answer.json()["outputs"][0]["shape"] == [1, 10]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    log_text = log.read_text()
    assert '"event": "cuda_graphs_off"' in log_text and "CUDA graphs need the CUDA provider" in log_text


def test_import_keras_writes_a_spec_that_validates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keras = pytest.importorskip("keras")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="fc")])
    model.save(tmp_path / "tiny.keras")
    code, _, err = cli(["import", "keras", "tiny.keras", "-o", "tiny.yaml"], capsys, tmp_path)
    assert code == 0, err
    assert cli(["validate", "tiny.yaml"], capsys, tmp_path)[0] == 0


def _count_calls(monkeypatch: pytest.MonkeyPatch, functions: dict[str, str]) -> dict[str, int]:
    """Count the calls of each `module:function` wherever specgen reaches it: the function in its module and
    every specgen module that imported it by name (a lazy `from ... import` inside a function reads the module)."""
    import importlib

    counts = dict.fromkeys(functions.values(), 0)
    for where, name in functions.items():
        original = getattr(importlib.import_module(where), name)

        def counted(*args: object, _original: Callable[..., object] = original, _name: str = name, **kwargs: object) -> object:
            counts[_name] += 1
            return _original(*args, **kwargs)

        for module in [m for n, m in sys.modules.items() if n.startswith("specgen") and m is not None]:
            if getattr(module, name, None) is original:
                monkeypatch.setattr(module, name, counted)
    return counts


PIPELINE_COMMANDS = {  # after the spec path; the run folder is the fixture's (checkpoint.dir counts from the spec)
    "train": ["train", "--steps", "1", "--resume", "--quiet", "--set", "checkpoint.dir=../run"],
    "probe": ["train", "--probe", "--set", "checkpoint.dir=../run"],
    "export": ["export", "--checkpoint", "run", "-o", "export-again"],
}


@pytest.mark.parametrize("name", PIPELINE_COMMANDS)
def test_each_command_builds_the_pipeline_once(work: Path, name: str, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """spec -> IR -> generated code runs once per command (issue 31): the command builds it and passes it down;
    nothing below resolves the IR or renders the code again."""
    import specgen.pipeline  # noqa: F401 (loaded, so its names are counted too)

    counts = _count_calls(monkeypatch, {"specgen.ir.resolve": "build_ir", "specgen.render.files": "render_files"})
    command, *flags = PIPELINE_COMMANDS[name]
    code, _, err = cli([command, f"specs/{SPEC}", *flags], capsys, work)
    assert code == 0, err
    assert counts == {"build_ir": 1, "render_files": 1}


def test_tracking_is_checked_before_anything_runs(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The tracking package in the quick tier (the MLflow runs themselves: tests/test_tracking_mlflow.py, slow):
    `train.tracking` validates with the spec, and a `--track` that names no tracker is one line before training."""
    text = (work / "specs" / SPEC).read_text().replace("train:\n", "train:\n  tracking: {mlflow: {uri: 'htp://x'}}\n", 1)
    (work / "specs" / "tracked.yaml").write_text(text)
    code, _, err = cli(["validate", "specs/tracked.yaml"], capsys, work)
    assert code == 1 and "unknown scheme 'htp:'; did you mean 'http'?" in err
    code, _, err = cli(["train", f"specs/{SPEC}", "--track", "http://host:5000", "--steps", "1"], capsys, work)
    assert code == 1 and err.startswith("--track http://host:5000: error: expected TRACKER:URI")
