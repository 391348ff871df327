"""The bench scripts' command lines: `--help` prints usage and does no work, a bad argument is one usage line.

Checker rt8 found scripts that read sys.argv by hand (`cuda_prepare_zoo.py --help` exported two models into a
folder named `--help/` in the checkout; others ended in tracebacks), a peer that was not installed reported as
specgen's failure (zoo.py without tf2onnx) or found only minutes into the run (serve_load.py --compare without
KServe), a ratio labelled "vs 1 process" taken to whichever configuration ran first (distributed.py), docs citing
a flag no script has, and bench/train_step.py's hand-built Session missing an attribute its methods read.
Each script runs in a subprocess from an empty folder, so nothing it writes can land in the checkout.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
HELPERS = {"onnx_skeleton.py", "serve_repo.py", "ports.py"}  # imported by the scripts, never run on their own
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if p.name not in HELPERS)
# Runs a script as `python bench/X.py ARGS` does (its folder first on sys.path), then says on stderr whether
# TensorFlow was imported: parsing the arguments must not wait for it.
RUNNER = ("import atexit, runpy, sys\n"
          "atexit.register(lambda: sys.stderr.write('TENSORFLOW IMPORTED\\n' if 'tensorflow' in sys.modules else ''))\n"
          "sys.argv = sys.argv[1:]\nsys.path[0] = sys.argv[0].rsplit('/', 1)[0]\n"
          "runpy.run_path(sys.argv[0], run_name='__main__')\n")


def run(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", RUNNER, str(BENCH / script), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


@cache
def help_text(script: str, cwd: Path) -> str:
    done = run(script, "--help", cwd=cwd)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "TENSORFLOW IMPORTED" not in done.stderr, done.stderr
    return done.stdout


def test_every_script_is_listed_in_the_readme() -> None:
    readme = (BENCH / "README.md").read_text()
    missing = [name for name in [*SCRIPTS, "cuda_run.sh", *HELPERS] if name not in readme]
    assert missing == []


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_prints_usage_and_does_nothing(script: str, tmp_path: Path) -> None:
    text = help_text(script, tmp_path)
    prog = "serve_load.py --compare" if script == "serve_compare.py" else script
    assert text.startswith(f"usage: {prog} ")
    assert list(tmp_path.iterdir()) == []  # cuda_prepare_zoo.py made ./--help/ with 620 KB of ONNX


@pytest.mark.parametrize(("script", "args", "last"), [
    ("cuda_prepare_zoo.py", [], "cuda_prepare_zoo.py: error: the following arguments are required: --out"),
    ("cuda_predictor.py", [], "cuda_predictor.py: error: the following arguments are required: model, data"),
    ("import_size.py", ["ten"], "import_size.py: error: argument N: invalid int value: 'ten'"),
    ("import_size.py", ["0"], "import_size.py: error: each N must be at least 1"),
    ("distributed.py", ["--configs", "9"],
     "distributed.py: error: argument --configs: invalid choice: 9 (choose from 0, 1, 2, 3)"),
    ("data.py", ["--batches", "3"],
     "data.py: error: --batches must be at least 50: fewer would time what the prefetch buffers already hold"),
    ("sequence_train.py", ["--steps", "10"], "sequence_train.py: error: --steps must be at least --k"),
    ("zoo.py", ["--timeout", "0"], "zoo.py: error: --timeout must be above 0 seconds"),
    ("serve_load.py", ["--compare", "--servers", "specgen-w1,triton"],
     "serve_load.py --compare: error: --servers: unknown server 'triton'; expected kserve or specgen-wN (N workers)"),
    ("serve_load.py", ["--compare", "--clients", "1,many"],
     "serve_load.py --compare: error: --clients: expected whole numbers separated by commas, got '1,many'"),
])
def test_a_bad_argument_is_one_usage_error(script: str, args: list[str], last: str, tmp_path: Path) -> None:
    done = run(script, *args, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines()[0].startswith("usage: ")
    assert done.stderr.splitlines()[-1] == last
    assert list(tmp_path.iterdir()) == []


def test_compare_without_kserve_says_so_before_any_work(tmp_path: Path) -> None:
    missing = tmp_path / "no-venv" / "python"
    done = run("serve_load.py", "--model", "mlp", "--compare", "--kserve-python", str(missing), cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        f"bench/serve_compare.py: KServe's interpreter {missing} not found; make it with `python3 -m venv .kserve-venv "
        "&& .kserve-venv/bin/pip install kserve onnxruntime` in the checkout, pass --kserve-python PATH, or leave "
        "kserve out: --servers specgen-w1,specgen-w2"]


@pytest.mark.skipif(importlib.util.find_spec("tf2onnx") is not None, reason="tf2onnx is installed here")
def test_zoo_without_tf2onnx_refuses_instead_of_failing_every_model(tmp_path: Path) -> None:
    done = run("zoo.py", "--models", "MobileNet", "--quick", "--json", str(tmp_path / "zoo.json"), cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        "bench/zoo.py: tf2onnx is not installed; `pip install tf2onnx==1.17.0` (the bench extra; the version "
        "bench/infer.py was run with); nothing was measured."]
    assert list(tmp_path.iterdir()) == []


def _cited_flags() -> list[tuple[str, str, str]]:
    """(where, script, flag) for every `bench/X.py ... --flag` on one line of the bench's sources and the docs."""
    found = []
    for doc in [*BENCH.glob("*.py"), *BENCH.glob("*.md"), BENCH / "cuda_run.sh", *(ROOT / "docs").glob("*.md")]:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for match in re.finditer(r"bench/(\w+\.py)((?: +[^ `#;|)(]+)*)", line):
                flags = re.findall(r"(?<![\w-])--[a-z][\w-]*", match.group(2))
                found += [(f"{doc.name}:{number}", match.group(1), flag) for flag in flags]
    return found


def test_every_flag_the_docs_cite_exists(tmp_path: Path) -> None:
    """`bench/precision.py --save-onnx DIR` was cited in three places and never existed."""
    unknown = []
    for where, script, flag in _cited_flags():
        if not (BENCH / script).is_file():
            unknown.append(f"{where}: bench/{script} does not exist")
            continue
        text = help_text(script, tmp_path)
        if script == "serve_load.py" and flag != "--compare":
            text += help_text("serve_compare.py", tmp_path)  # the flags after --compare are serve_compare.py's
        if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text):
            unknown.append(f"{where}: bench/{script} has no {flag}")
    assert unknown == []


@pytest.fixture()
def distributed(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))  # as `python bench/distributed.py` has it: its helpers (ports.py) beside it
    spec = importlib.util.spec_from_file_location("bench_distributed", BENCH / "distributed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_distributed_ratio_is_to_one_process_and_configurations_interleave(
        distributed: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """--configs 2 3 printed 1.00x for mirrored (the first row) although one process never ran."""
    calls: list[tuple[str, int]] = []
    speed = {"default": [100.0, 50.0], "mirrored": [80.0, 30.0], "multi_worker": [40.0, 20.0]}

    def launch(model: str, strategy: str, processes: int, env: dict[str, str], args: Any) -> dict[str, Any]:
        assert args.repeats == 1  # one timed run per process: the repetitions are interleaved by the caller
        repetition = sum(1 for s, _ in calls if s == strategy)
        calls.append((strategy, processes))
        rate = speed[strategy][repetition]
        return {"steps_s": rate, "examples_s": rate * 32, "reduce_share": 0.5, "batch": 32}

    monkeypatch.setattr(distributed, "launch", launch)
    assert distributed.main(["--models", "mlp", "--configs", "2", "3", "--repeats", "2"]) == 0
    assert [s for s, _ in calls] == ["default", "mirrored", "multi_worker", "mirrored", "multi_worker", "default"]
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("mlp ")]
    # medians of the per-repetition ratios: mirrored 0.8 and 0.6, two workers 0.4 and 0.4
    assert [row[-2] for row in rows] == ["1.00x", "0.70x", "0.40x"]


@pytest.mark.slow
@pytest.mark.parametrize(("script", "args"), [
    ("train_step.py", ["--models", "mlp"]),
    ("sequence_train.py", ["--models", "lstm"]),
])
def test_training_benches_run(script: str, args: list[str], tmp_path: Path) -> None:
    """Their Session, built by hand without __init__, lost `tracker` when __init__ gained it: both crashed."""
    done = run(script, *args, "--steps", "4", "--warmup", "2", "--repeats", "1", "--k", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "specgen train() / keras fit" in done.stdout
    assert list(tmp_path.iterdir()) == []
