"""Keras 2's hard_sigmoid (clip(0.2 x + 0.5, 0, 1)) is not specgen's (Keras 3's relu6(x + 3) / 6): a Keras 2 file
that uses it is refused with that reason, not with a list of accepted names that includes hard_sigmoid."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import h5py
import pytest

keras = pytest.importorskip("keras")

SPECGEN = [sys.executable, "-m", "specgen"]
REASON = ("Keras 2's hard_sigmoid is clip(0.2 x + 0.5, 0, 1), specgen's is Keras 3's relu6(x + 3) / 6, so the "
          "trained weights would compute other numbers; retrain the model with Keras 3, or change the activation "
          "before importing")


def keras2_file(path: Path, layer: object) -> Path:
    inputs = keras.Input((4, 5) if isinstance(layer, keras.layers.LSTM) else (5,), name="x")
    keras.Model(inputs, layer(inputs)).save(path)  # type: ignore[operator]
    with h5py.File(path, "a") as f:
        f.attrs["keras_version"] = "2.15.0"  # what the importer reads to tell Keras 2's files
    return path


@pytest.mark.parametrize(("layer", "where"), [
    (lambda: keras.layers.Dense(2, activation="hard_sigmoid", name="d1"), "'d1' (Dense): argument activation"),
    (lambda: keras.layers.LSTM(3, recurrent_activation="hard_sigmoid", name="l1"),
     "'l1' (LSTM): argument recurrent_activation"),
])
def test_keras2_hard_sigmoid_is_refused_with_its_reason(tmp_path: Path, layer, where: str) -> None:  # type: ignore[no-untyped-def]
    source = keras2_file(tmp_path / "m.h5", layer())
    out = tmp_path / "s.yaml"
    run = subprocess.run([*SPECGEN, "import", "keras", source.name, "-o", str(out)], capture_output=True,
                         text=True, cwd=tmp_path)
    assert run.returncode == 1, run.stderr
    assert run.stderr.splitlines() == [
        f"m.h5: error: Keras layer {where}=hard_sigmoid cannot be expressed in a spec ({REASON})", "1 error found"]
    assert not out.exists()


def test_other_activations_still_list_what_is_accepted(tmp_path: Path) -> None:
    source = keras2_file(tmp_path / "m.h5", keras.layers.Dense(2, activation="exponential", name="d1"))
    run = subprocess.run([*SPECGEN, "import", "keras", str(source), "-o", str(tmp_path / "s.yaml")],
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 1
    assert "argument activation=exponential cannot be expressed in a spec (activation: relu, " in run.stderr
    assert " hard_swish, hard_silu or linear)\n1 error found\n" in run.stderr
