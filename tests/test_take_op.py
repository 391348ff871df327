"""take and padding_attention_mask beyond TF-vs-onnxruntime parity (tests/op_cases_take.py): numpy's answer
at two lengths of a named axis through one ONNX graph, negative indices; the positioned validate errors; the
graph's refusal of a sequence too short for the index (a named axis: known only at run time)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import yaml

from specgen.cli import main
from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.spec.load import load_spec


def write(tmp_path: Path, inputs: dict, layers: list[dict]) -> Path:
    """A block-style spec: the layer's keys on lines 11-14 (positions asserted below)."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"specgen": 1, "name": "s", "inputs": inputs,
                                    "outputs": {"y": layers[-1]["name"]}, "layers": layers}, sort_keys=False))
    return path


def session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(render_files(build_ir(load_spec(path)))["model.onnx"],
                                providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("index", [0, 2, -1, -3])
def test_take_is_numpy_take_at_two_lengths(tmp_path: Path, index: int) -> None:
    run = session(write(tmp_path, {"x": {"shape": ["seq", 4]}}, [{"name": "t", "op": "take", "index": index}]))
    for steps in (3, 9):
        x = np.random.default_rng(steps).standard_normal((2, steps, 4)).astype(np.float32)
        (y,) = run.run(None, {"x": x})
        assert np.array_equal(y, np.take(x, index, axis=1))  # a copy: bitwise


def test_take_too_short_at_run_time(tmp_path: Path) -> None:
    run = session(write(tmp_path, {"x": {"shape": ["seq", 4]}}, [{"name": "t", "op": "take", "index": 4}]))
    with pytest.raises(Exception, match=r"indices element out of data bounds, idx=4 must be within the inclusive "
                                        r"range \[-3,2\]"):
        run.run(None, {"x": np.ones((2, 3, 4), np.float32)})


ERRORS = [
    ({"x": {"shape": [3, 4]}}, {"name": "t", "op": "take", "index": 3}, "13:10",
     "layer 't' (take): index: received 3 along axis 1 of size 3 (input [batch, 3, 4]); expected -3 to 2"),
    ({"x": {"shape": [3, 4]}}, {"name": "t", "op": "take", "index": -4, "axis": 1}, "13:10",
     "layer 't' (take): index: received -4 along axis 1 of size 3 (input [batch, 3, 4]); expected -3 to 2"),
    ({"x": {"shape": [3, 4]}}, {"name": "t", "op": "take", "index": 0, "axis": 0}, "14:9",
     "layer 't' (take): axis 0 is out of range for a rank-3 tensor (axis 0 is the batch)"),
    ({"x": {"shape": [3, 4]}}, {"name": "m", "op": "padding_attention_mask"}, "11:3",
     "layer 'm' (padding_attention_mask): padding_attention_mask needs a padding mask [batch, steps] of float32, "
     "int32, int64; received [batch, 3, 4] float32"),
]


@pytest.mark.parametrize(("inputs", "layer", "where", "message"), ERRORS)
def test_validate_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], inputs: dict, layer: dict, where: str,
                         message: str) -> None:
    path = write(tmp_path, inputs, [layer])
    assert main(["validate", str(path)]) == 1
    assert capsys.readouterr().err.splitlines() == [f"{path}:{where}: error: {message}", "1 error found"]
