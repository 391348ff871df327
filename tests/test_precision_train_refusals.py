"""train.precision and train.jit_compile refusals: one positioned line each from `specgen validate` and
`specgen build`, nothing written. No TensorFlow: validate and build never import it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from precision_train_cases import ROOT, spec_text

from specgen.cli import main

LM_SPEC = ROOT / "tests" / "golden" / "specs" / "lm_fit.yaml"


def _errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, command: str = "validate") -> list[str]:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    out = tmp_path / "out"
    assert main([command, str(path), *(["--out", str(out)] if command == "build" else [])]) == 1
    assert not out.exists()  # nothing written
    return [line.replace(str(path), "spec.yaml") for line in capsys.readouterr().err.splitlines()]


def _lm(extra: str) -> str:
    return LM_SPEC.read_text().replace("train:\n", f"train:\n{extra}", 1)


def test_a_precision_not_in_the_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = spec_text().replace("precision: float32", "precision: float16")
    assert _errors(tmp_path, capsys, text) == [
        "spec.yaml:46:14: error: precision: received 'float16', expected 'float32', 'mixed_bfloat16' or "
        "'mixed_float16'; did you mean 'float32'?", "1 error found"]


def test_mixed_precision_and_xla_with_levenberg_marquardt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = _errors(tmp_path, capsys, _lm("  precision: mixed_float16\n  jit_compile: true\n"), "build")
    assert lines == [
        "spec.yaml:21:14: error: levenberg_marquardt optimizer 'fit' solves in float32: its Jacobian and damped "
        "Gauss-Newton solve would lose in mixed_float16 the digits that decide whether a step is kept, and its "
        "residuals have no loss scale; received mixed_float16, expected float32",
        "spec.yaml:22:16: error: levenberg_marquardt optimizer 'fit' runs its damped trial steps from Python "
        "between graph calls, which XLA cannot compile as one step; received true, expected false",
        "2 errors found"]


def test_xla_with_max_pool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _errors(tmp_path, capsys, spec_text(jit=True)) == [
        "spec.yaml:15:23: error: layer 'pool1': train.jit_compile cannot compile op 'max_pool' with XLA: its "
        "gradient (MaxPoolGrad) has no deterministic XLA implementation in TensorFlow; set jit_compile: false, "
        "or use avg_pool / a strided conv instead", "1 error found"]


def test_validate_and_build_of_a_mixed_spec_import_no_tensorflow(tmp_path: Path) -> None:
    import subprocess

    path = tmp_path / "spec.yaml"
    path.write_text(spec_text("mixed_float16", jit=True, pool="avg_pool"))
    code = ("import sys; from specgen.cli import main; "
            f"assert main(['build', {str(path)!r}, '--out', {str(tmp_path / 'g')!r}]) == 0; "
            "assert 'tensorflow' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    train_py = (tmp_path / "g" / "digits_cnn" / "train.py").read_text()
    assert "jit_compile=True" in train_py and "self.trainable, scale=self.loss_scale.read_value())" in train_py


def test_probe_of_a_mixed_float16_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(spec_text("mixed_float16", run=tmp_path / "run"))
    assert main(["train", str(path), "--probe"]) == 1
    assert capsys.readouterr().err.replace(str(path), "spec.yaml").splitlines() == [
        "spec.yaml: error: --probe shows unscaled gradients and applies them as one update, and mixed_float16's "
        "update expects the loss-scaled ones: probe this spec with train.precision: float32 (its checkpoints are "
        "interchangeable)", "1 error found"]
    assert not (tmp_path / "run").exists()
