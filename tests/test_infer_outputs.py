"""`specgen infer --output OUT.npz` keeps every output under its own name, whatever the name: `np.savez(file, **outputs)`
took an output named `file` for its own parameter (a TypeError) and one named `allow_pickle` as a flag (the output
left out of the file)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

pytest.importorskip("onnxruntime")

from cli_helpers import run_cli

from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.runtime.onnx_export import with_weights
from specgen.runtime.parity import random_weights
from specgen.runtime.predictor import Predictor
from specgen.spec.load import load_spec

SPEC = """\
specgen: 1
name: named_outputs
inputs: {x: {shape: [4], dtype: float32}}
outputs: {file: out, allow_pickle: hid, mmap_mode: relu}
layers:
  - {name: hid, op: dense, input: x, units: 3}
  - {name: relu, op: relu}
  - {name: out, op: dense, units: 2}
"""


def test_outputs_named_like_savez_parameters_are_each_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "spec.yaml").write_text(SPEC)
    ir = build_ir(load_spec(tmp_path / "spec.yaml"))
    model = with_weights(onnx.load_from_string(render_files(ir)["model.onnx"]), ir,
                         random_weights(ir, np.random.default_rng(0)))
    (tmp_path / "model.onnx").write_bytes(model.SerializeToString())
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    code, _, err = run_cli(["infer", "model.onnx", "--input", "in.npz", "--output", "out.npz", "--provider", "cpu"], capsys,
                           tmp_path)
    assert (code, err) == (0, "")
    expected = Predictor(tmp_path / "model.onnx", provider="cpu")({"x": x})
    with np.load(tmp_path / "out.npz", allow_pickle=False) as written:
        assert sorted(written.files) == ["allow_pickle", "file", "mmap_mode"]
        for name in written.files:
            np.testing.assert_array_equal(written[name], expected[name])
