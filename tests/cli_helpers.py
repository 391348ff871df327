"""The real CLI in process, from a given working directory: (exit status, stdout, stderr)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from specgen.cli import main


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str], cwd: Path) -> tuple[int, str, str]:
    old = Path.cwd()
    os.chdir(cwd)
    try:
        code = main(args)
    finally:
        os.chdir(old)
    out, err = capsys.readouterr()
    return code, out, err


def run_cli_completed(args: list[str], capsys: pytest.CaptureFixture[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`run_cli`'s result shaped like subprocess.run's: for a test that ran the command as a child before (a child's
    start-up, TensorFlow's import above all, was most of its time), so its assertions read the same."""
    code, out, err = run_cli(args, capsys, cwd)
    return subprocess.CompletedProcess(["specgen", *args], code, out, err)
