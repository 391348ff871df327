"""Generated modules run the file's current text, not a stale .pyc (Python checks a .pyc by the source's whole-second
mtime and its size: an edit within the second to a file of the same size looks unchanged). CI caught this as a
resume that kept the old learning rate, with PYTHONDONTWRITEBYTECODE unset as on users' machines."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from specgen.runtime.lib.generated import load_generated


def test_a_same_size_edit_within_the_second_is_the_code_that_runs(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # as on a user's machine
    path = tmp_path / "train.py"
    path.write_text("RATE = 0.05\n")
    stamp = os.stat(path).st_mtime_ns
    assert load_generated(path).RATE == 0.05
    path.write_text("RATE = 0.01\n")  # the same size, and the same mtime: what a .pyc check sees as unchanged
    os.utime(path, ns=(stamp, stamp))
    assert load_generated(path).RATE == 0.01
    assert not list(tmp_path.glob("__pycache__/*.pyc"))  # nothing written beside the generated files either
