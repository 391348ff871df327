"""The suite's time budget (tests/conftest.py): it fails a run only in CI; elsewhere it warns."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _run(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_one.py").write_text("import time\n\ndef test_takes_a_moment():\n    time.sleep(0.05)\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": ci} if ci is not None else {})
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "--time-budget", "0.01", "test_one.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("ci", [None, "false", ""])
def test_outside_ci_an_exceeded_budget_warns_and_the_passing_run_passes(tmp_path: Path, ci: str | None) -> None:
    run = _run(tmp_path, ci)
    assert run.returncode == 0, run.stdout
    assert "1 passed" in run.stdout
    assert "warning: time: " in run.stdout and "budget 0 s exceeded; the run is judged on its tests alone" in run.stdout


@pytest.mark.parametrize("ci", ["true", "1"])
def test_in_ci_an_exceeded_budget_fails_the_run_and_says_so(tmp_path: Path, ci: str) -> None:
    run = _run(tmp_path, ci)
    assert run.returncode == 1, run.stdout
    assert "1 passed" in run.stdout
    assert "error: time: " in run.stdout and "exceeded, which fails the run in CI (CI=true)" in run.stdout
