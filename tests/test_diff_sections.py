"""`specgen diff`: the interface section is the served signature as model.onnx declares it (export.onnx's batch and
outputs), and settings rows list a section added in place of a null as additions only."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_cli as run

from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.spec.load import load_spec

SPEC = """\
specgen: 1
name: tiny
inputs:
  x: {shape: [4], dtype: float32}
outputs:
  logits: out
  hidden: h1
layers:
  - {name: h1, op: dense, input: x, units: 8, activation: relu}
  - {name: out, op: dense, units: 2}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: y}
optimizers:
  main: {kind: adam, learning_rate: 0.01}
train: {batch_size: 16, epochs: 1, seed: 0, metrics: [mean_loss]}
checkpoint: {dir: runs/tiny}
"""


def write(folder: Path, **files: str) -> None:
    for name, text in files.items():
        (folder / name).write_text(text)


def section(out: str, name: str) -> list[str]:
    return out.split(f"\n{name}: ", 1)[1].split("\n\n", 1)[0].splitlines()


def served(folder: Path, spec: str) -> dict[str, list[int | str]]:
    """The graph inputs and outputs of the model.onnx that `specgen build` writes (no TensorFlow), weights aside."""
    onnx = pytest.importorskip("onnx")
    model = onnx.load_from_string(render_files(build_ir(load_spec(folder / spec)))["model.onnx"])
    return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in [*model.graph.input, *model.graph.output] if "__" not in v.name}


def test_a_fixed_batch_breaks_the_interface_as_model_onnx_declares_it(tmp_path: Path, capsys) -> None:
    write(tmp_path, **{"base.yaml": SPEC, "fixed.yaml": "extends: base.yaml\nexport: {onnx: {dynamic_batch: false}}\n"})
    code, out, err = run(["diff", "base.yaml", "fixed.yaml", "--fail-on", "interface"], capsys, tmp_path)
    assert code == 1
    assert section(out, "interface") == [
        "3 change(s)",
        "  change   what           old                new",
        "  -------  -------------  -----------------  -------------",
        "  changed  input x        float32[batch, 4]  float32[1, 4]",
        "  changed  output hidden  float32[batch, 8]  float32[1, 8]",
        "  changed  output logits  float32[batch, 2]  float32[1, 2]",
        "  breaks: input 'x' changed from float32[batch, 4] to float32[1, 4]: clients that send it as before fail",
        "  breaks: output 'hidden' changed from float32[batch, 8] to float32[1, 8]: clients that read it as before fail",
        "  breaks: output 'logits' changed from float32[batch, 2] to float32[1, 2]: clients that read it as before fail",
    ]
    assert err.splitlines()[0] == ("specgen diff: breaks interface: input 'x' changed from float32[batch, 4] to "
                                   "float32[1, 4]: clients that send it as before fail")
    # what the rows say is what the generated model.onnx declares: a dynamic batch, then a batch of one
    assert served(tmp_path, "base.yaml") == {"x": ["batch", 4], "logits": ["batch", 2], "hidden": ["batch", 8]}
    assert served(tmp_path, "fixed.yaml") == {"x": [1, 4], "logits": [1, 2], "hidden": [1, 8]}
    ort = pytest.importorskip("onnxruntime")
    ir = build_ir(load_spec(tmp_path / "fixed.yaml"))
    feed = {"x": np.ones((3, 4), np.float32)} | {v.onnx_name: np.zeros(v.shape, np.float32) for v in ir.model_variables}
    with pytest.raises(Exception, match=r"Got: 3 Expected: 1"):  # a client's batch of three is refused
        ort.InferenceSession(render_files(ir)["model.onnx"]).run(None, feed)


def test_export_outputs_drop_a_served_output_and_opset_or_precision_change_nothing(tmp_path: Path, capsys) -> None:
    write(tmp_path, **{"base.yaml": SPEC,
                       "one.yaml": "extends: base.yaml\nexport: {onnx: {outputs: [logits]}}\n",
                       "same.yaml": "extends: base.yaml\nexport: {onnx: {opset: 18, precision: fp16}}\n"})
    code, out, err = run(["diff", "base.yaml", "one.yaml", "--fail-on", "interface"], capsys, tmp_path)
    assert code == 1
    assert section(out, "interface")[3:] == [
        "  removed  output hidden  float32[batch, 8]",
        "  breaks: output 'hidden' was removed: clients that read it fail",
    ]
    assert served(tmp_path, "one.yaml") == {"x": ["batch", 4], "logits": ["batch", 2]}
    # fp16 variants keep float32 at the IO (runtime/precision/fp16.py: keep_io_types); the opset names no tensor
    code, out, err = run(["diff", "base.yaml", "same.yaml", "--fail-on", "interface"], capsys, tmp_path)
    assert (code, err) == (0, "")
    assert "\ninterface: unchanged\n" in out
    assert section(out, "export")[3:] == ["  changed  export.onnx.opset      21    18",
                                          "  changed  export.onnx.precision  fp32  fp16"]


def test_an_added_ema_is_its_keys_added_and_no_null_removed(tmp_path: Path, capsys) -> None:
    ema = SPEC.replace("metrics: [mean_loss]}", "metrics: [mean_loss], ema: {decay: 0.99}}")
    write(tmp_path, **{"base.yaml": SPEC, "ema.yaml": ema})
    code, out, _ = run(["diff", "base.yaml", "ema.yaml"], capsys, tmp_path)
    assert code == 0
    assert section(out, "training")[1:] == [
        "  change  what             old  new",
        "  ------  ---------------  ---  ----",
        "  added   train.ema.decay       0.99",
        "  added   train.ema.eval        true",
    ]
    code, out, _ = run(["diff", "ema.yaml", "base.yaml"], capsys, tmp_path)  # and removed: its keys, no null added
    assert [row.split()[:2] for row in section(out, "training")[3:]] == [["removed", "train.ema.decay"],
                                                                         ["removed", "train.ema.eval"]]
