"""examples/specs/digits_folder.yaml trains on the digits written as PNG class folders (a subset, a few steps)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from specgen.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "specs" / "digits_folder.yaml"


def make_folder(out: Path, limit: int) -> dict[str, int]:
    spec = importlib.util.spec_from_file_location("make_digits_folder", ROOT / "examples/data/make_digits_folder.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    counts: dict[str, int] = module.write(out, limit)
    return counts


def test_digits_folder_trains(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert make_folder(tmp_path / "digits", 480) == {"train": 480, "test": 360}
    assert sorted(p.name for p in (tmp_path / "digits" / "train").iterdir()) == [str(d) for d in range(10)]
    text = EXAMPLE.read_text().replace("../data/digits_folder/", "digits/").replace("../../runs/digits_folder", "run")
    spec = tmp_path / "digits_folder.yaml"
    spec.write_text(text)
    assert main(["train", str(spec), "--steps", "60"]) == 0
    out = capsys.readouterr().out
    assert "training digits_folder: step 0 -> 60 (15 updates per epoch, 480 examples)" in out
    accuracy = float(re.findall(r"eval at step 60: accuracy (\d\.\d+)", out)[0])
    # 60 Adam steps on 480 images reach about 0.93 here; 0.8 leaves room for other CPUs' last bits (chance is 0.1).
    assert accuracy > 0.8, out
