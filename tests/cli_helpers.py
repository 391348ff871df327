"""The real CLI in process, from a given working directory: (exit status, stdout, stderr)."""

from __future__ import annotations

import os
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
