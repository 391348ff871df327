"""`specgen train` on bad input changes nothing on disk: every check on the spec, the data and the restore
sources runs before the run folder's first write (runtime/commands/resume.py: open_run_folder).

Each case breaks one input of an otherwise good spec and asserts the one error line, that a new run's folder
was never created, and that an earlier run's folder (resumed, or moved aside by --fresh) is byte-identical.
Bad files are written here at test time; real TensorFlow, real files.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from specgen.cli import main

SPEC = """\
specgen: 1
name: nothing_written
inputs: {{image: {{shape: [2, 2, 1]}}}}
outputs: {{logits: out}}
layers:
  - {{name: flat, op: flatten, input: image}}
  - {{name: out, op: dense, units: 2}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers: {{all: {{variables: "*", kind: sgd, learning_rate: 0.1}}}}
train: {{batch_size: 2, seed: 0}}
data:
  train: {train}
checkpoint: {{dir: run, every_steps: 1, keep: 2{restore}}}
"""
GOOD = "{npz: good.npz, features: {image: x}, labels: {label: y}}"
# Each kind of input error: (the source or restore entry, the files it reads, the error after 'error: ').
CASES = {
    "missing npz": ("{npz: missing.npz, features: {image: x}, labels: {label: y}}", {},
                    "12:16: error: data.train ({d}/missing.npz): no such file; expected a .npz file relative to the "
                    "spec's folder"),
    "empty class folder": ("{images: photos, image_size: [2, 2]}", {"photos/a/1.png": "png", "photos/a/2.png": "png",
                                                                    "photos/b/": ""},
                           "12:19: error: data.train ({d}/photos): class folder 'b' holds no images (files ending in "
                           ".bmp, .gif, .jpeg, .jpg, .png); add images or remove the folder"),
    "bad csv": ("{csv: t.csv, features: {image: [a, b, c, d]}, labels: {label: y}}",
                {"t.csv": "a,b,c,d,y\n1,2,3,4,0\n1,2,x,4,1\n"},
                "12:41: error: data.train ({d}/t.csv): line 3, column 'c' is 'x', not a number; features and labels "
                "must be numbers (fill in or drop that row)"),
    "missing restore source": (GOOD, {}, "13:66: error: checkpoint.restore[0]: checkpoint {d}/nowhere/ckpt not found: "
                               "expected a checkpoint prefix (with ckpt.index beside it), a run folder with a 'latest' "
                               "file or a folder with a TensorFlow 'checkpoint' file"),
}


def _png() -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.arange(4, dtype=np.uint8).reshape(2, 2)).save(buffer, "PNG")
    return buffer.getvalue()


def write_case(folder: Path, case: str) -> Path:
    """The spec and data files of one case (the good npz always) in `folder`; the spec's path."""
    source, files, _ = CASES[case]
    x = np.arange(16, dtype=np.float32).reshape(4, 2, 2, 1) / 16
    np.savez(folder / "good.npz", x=x, y=np.array([0, 1, 0, 1]))
    for name, content in files.items():
        path = folder / name
        (path if name.endswith("/") else path.parent).mkdir(parents=True, exist_ok=True)
        if not name.endswith("/"):
            path.write_bytes(_png() if content == "png" else content.encode())
    restore = ", restore: [{from: nowhere/ckpt}]" if case == "missing restore source" else ""
    spec = folder / "spec.yaml"
    spec.write_text(SPEC.format(train=source, restore=restore))
    return spec


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every file (bytes) and folder (None) under `folder`, by relative path."""
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


def train(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["train", *args, "--quiet"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


@pytest.fixture(scope="module")
def earlier_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """run/ after two good steps, trained once for the module."""
    folder = tmp_path_factory.mktemp("earlier")
    spec = write_case(folder, "missing npz")
    spec.write_text(SPEC.format(train=GOOD, restore=""))
    assert main(["train", str(spec), "--steps", "2", "--quiet"]) == 0
    return folder / "run"


@pytest.mark.parametrize("case", list(CASES))
def test_a_new_run_with_bad_input_creates_no_run_folder(tmp_path: Path, case: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_case(tmp_path, case)
    code, err = train([str(spec), "--steps", "1"], capsys)
    lines = err.strip().splitlines()
    assert code == 1 and lines[-1] == "1 error found", err
    assert lines[-2] == f"{spec}:" + CASES[case][2].format(d=tmp_path), err
    assert not (tmp_path / "run").exists()


# A resumed run restores its own checkpoint, never `checkpoint.restore`: that case applies to --fresh only.
@pytest.mark.parametrize(("case", "mode"), [(c, m) for m in ("--resume", "--fresh") for c in CASES
                                            if (c, m) != ("missing restore source", "--resume")])
def test_an_earlier_run_folder_is_left_byte_identical(tmp_path: Path, earlier_run: Path, case: str, mode: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_case(tmp_path, case)
    shutil.copytree(earlier_run, tmp_path / "run", symlinks=True)
    (tmp_path / "run" / ".ckpt-00000003.4242.tmp").mkdir()  # what a killed save leaves: removed only by a run that starts
    before = snapshot(tmp_path / "run")
    code, err = train([str(spec), mode, "--steps", "1"], capsys)
    assert code == 1 and f"{spec}:" + CASES[case][2].format(d=tmp_path) in err, err
    assert snapshot(tmp_path / "run") == before
    assert not any(name.startswith(".specgen-write-check") for name in os.listdir(tmp_path / "run"))
