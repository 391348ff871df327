"""Export and infer checkers' leftovers: bounded infer, file sets, the fp16 CPU gate, spread samples, early refusal.

- `specgen infer` runs its input in chunks of rows, and refuses outputs over its bound before running the input;
- export folders and Triton version folders are written as sets: after a failure between two renames the folder
  holds the old set, the new one, or no description (export.json / model.onnx), never a mix;
- an fp16 variant written unverified on the CPU is gated on float16 arithmetic (emulated), so an overflow is refused
  naming the tensor, where onnxruntime's CPU provider would have run it in float32 and recorded no loss;
- int8 calibration and the gate sample recorded for the server are drawn over the whole eval set, not its first rows;
- `specgen export` with nothing to export from says so before TensorFlow is imported.
"""

from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from specgen.cli import main
from specgen.diagnostics import SpecError
from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.runtime.commands import infer as infer_module
from specgen.runtime.file_set import write_set
from specgen.runtime.onnx_export import with_weights
from specgen.runtime.parity import random_weights
from specgen.runtime.precision import fp16
from specgen.runtime.precision.base import Calibration, PrecisionRefusal
from specgen.runtime.precision.fp16_emulation import emulate
from specgen.runtime.precision.step import PrecisionRequest, _calibration
from specgen.runtime.precision.verify import VariantInfo, read_sample, version_files
from specgen.runtime.predictor import Predictor
from specgen.runtime.triton import write_repository
from specgen.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[1]
SPEC = """\
specgen: 1
name: tiny
inputs: {x: {shape: [4]}}
outputs: {logits: d2}
layers:
  - {name: d1, op: dense, units: 8, input: x}
  - {name: d2, op: dense, units: 3}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers: {all: {variables: "*", kind: sgd, learning_rate: 0.01}}
train: {batch_size: 4}
data:
  train: {npz: d.npz, features: {x: x}, labels: {label: y}}
  eval: {npz: d.npz, features: {x: x}, labels: {label: y}}
checkpoint: {dir: run, every_steps: 1, keep: 1}
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The spec, its eval data, and model.onnx with random weights (no TensorFlow)."""
    folder = tmp_path_factory.mktemp("tiny")
    (folder / "spec.yaml").write_text(SPEC)
    rng = np.random.default_rng(0)
    np.savez(folder / "d.npz", x=(rng.standard_normal((64, 4)) * 10).astype(np.float32), y=rng.integers(0, 3, 64))
    ir = build_ir(load_spec(folder / "spec.yaml"))
    model = with_weights(onnx.load_from_string(render_files(ir)["model.onnx"]), ir, random_weights(ir, rng))
    (folder / "model.onnx").write_bytes(model.SerializeToString())
    return {"folder": folder, "ir": ir, "model": folder / "model.onnx"}


def _checkpoint(prefix: Path, ir: Any, seed: int, d1_scale: float = 1.0) -> None:
    """A checkpoint of the model's weights (random; d1's kernel scaled), as test_export.py writes them."""
    import tensorflow as tf

    values = random_weights(ir, np.random.default_rng(seed))
    values["d1/kernel"] = values["d1/kernel"] * np.float32(d1_scale)
    names = sorted(values)
    tf.raw_ops.SaveV2(prefix=str(prefix), tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(values[n]) for n in names])


# --- infer: chunks of rows, outputs bounded ------------------------------------------------------------------------


def _rows_per_call(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = Predictor.__call__

    def spy(self: Predictor, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        calls.append(len(next(iter(inputs.values()))))
        return real(self, inputs)

    monkeypatch.setattr(Predictor, "__call__", spy)
    return calls


def test_infer_runs_the_input_in_chunks(tiny: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """3,000 rows: runs of at most 1,024 (the old code ran all of them in one run: 22.9 GB for a 1 GiB input)."""
    x = np.random.default_rng(1).standard_normal((3000, 4)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    whole = Predictor(tiny["model"], provider="cpu")({"x": x})
    calls = _rows_per_call(monkeypatch)
    assert infer_module.infer(tiny["model"], tmp_path / "in.npz", tmp_path / "out.npz", "cpu", [], None) == 0
    assert max(calls) <= 1024 and sum(calls) >= 3000, calls
    assert "chunks: ran the 3,000 rows in runs of 1,024" in capsys.readouterr().out
    with np.load(tmp_path / "out.npz") as written:
        np.testing.assert_allclose(written["logits"], whole["logits"], rtol=1e-6, atol=1e-6)
    calls.clear()
    infer_module.infer(tiny["model"], tmp_path / "in.npz", None, "cpu", [], None, chunk=7)  # --chunk 7
    assert max(calls) <= 7


def test_infer_refuses_outputs_over_its_bound_before_running(tiny: dict[str, Any], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    np.savez(tmp_path / "in.npz", x=np.zeros((5000, 4), np.float32))
    monkeypatch.setattr(infer_module, "MAX_OUTPUT_BYTES", 10_000)  # 5,000 rows of 3 float32 logits: 60,000 bytes
    calls = _rows_per_call(monkeypatch)
    with pytest.raises(SpecError) as caught:
        infer_module.infer(tiny["model"], tmp_path / "in.npz", None, "cpu", [], None)
    assert str(caught.value.diagnostics[0]).endswith(
        "in.npz: error: the outputs of its 5,000 rows would take 58.6 KiB (12 bytes a row), over the 9.8 KiB specgen "
        "infer holds in memory; split the input into files of at most 833 rows")
    assert calls == [1]  # only the one-row run that measures a row of outputs


# --- file sets --------------------------------------------------------------------------------------------------------


def _failing_replace(monkeypatch: pytest.MonkeyPatch, fails: Any) -> None:
    """os.replace raising EIO (as a kill or a failing disk would stop the export) when `fails(destination)`."""
    real = os.replace

    def replace(src: Any, dst: Any, **kwargs: Any) -> None:
        if fails(Path(dst)):
            raise OSError(errno.EIO, "injected failure")
        real(src, dst, **kwargs)

    monkeypatch.setattr(os, "replace", replace)


OLD = {"model.onnx": b"old model", "model.fp16.onnx": b"old variant", "export.json": b"old"}
NEW = {"model.onnx": b"new model", "model.fp16.onnx": b"new variant", "export.json": b"new"}


@pytest.mark.parametrize(("step", "after"), [("stage", 0), ("stage", 2), ("rename", 0), ("rename", 1), ("rename", 2)])
def test_write_set_leaves_the_old_set_the_new_one_or_no_description(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    step: str, after: int) -> None:
    """A failure after `after` files were staged (written as temporaries: a full disk) or renamed into place."""
    from specgen.runtime import file_set

    write_set(tmp_path, OLD, last="export.json")
    done: list[object] = []

    def fails(*args: Any) -> bool:
        if len(done) >= after:
            return True
        done.append(args)
        return False

    real = file_set._stage

    def stage(*args: Any) -> Path:  # a full disk while the temporaries are written
        if fails():
            raise OSError(errno.ENOSPC, "injected failure")
        return real(*args)

    if step == "rename":
        _failing_replace(monkeypatch, fails)
    else:
        monkeypatch.setattr(file_set, "_stage", stage)
    with pytest.raises(OSError, match="injected failure"):
        write_set(tmp_path, NEW, last="export.json")
    held = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert held == OLD if step == "stage" else "export.json" not in held, held  # never a description of another set
    monkeypatch.undo()
    write_set(tmp_path, NEW, last="export.json")  # the next export replaces whatever was left
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == NEW  # and no temporary is left behind


def test_a_reexport_that_fails_between_its_files_never_mixes_them(tiny: dict[str, Any], tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The checker's repro: a second export killed after model.onnx, before export.json. The old code left the new
    model.onnx under the old export.json, which names the old checkpoint and its parity."""
    folder, out = tiny["folder"], tmp_path / "out"
    for name, seed in (("a", 1), ("b", 2)):
        _checkpoint(tmp_path / name, tiny["ir"], seed)
    assert main(["export", str(folder / "spec.yaml"), "--checkpoint", str(tmp_path / "a"), "-o", str(out)]) == 0
    first = (out / "model.onnx").read_bytes()
    _failing_replace(monkeypatch, lambda dst: dst.name == "export.json")
    assert main(["export", str(folder / "spec.yaml"), "--checkpoint", str(tmp_path / "b"), "-o", str(out)]) == 1
    assert "injected failure" in capsys.readouterr().err
    if (out / "export.json").exists():
        assert (out / "model.onnx").read_bytes() == first
        assert json.loads((out / "export.json").read_text())["checkpoint"] == str(tmp_path / "a")
    else:
        assert (out / "model.onnx").read_bytes() != first  # the new model, described by nothing: readers refuse


def test_an_output_that_cannot_be_written_is_refused_before_anything_runs(tiny: dict[str, Any], tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """export's write probe (atomic.probe_writable, the one train uses too), before TensorFlow's work: a read-only
    file system (injected at the probe's open: the suite runs as root, whom file modes do not stop) is one line
    naming the output, and a writable output keeps no probe file."""
    _checkpoint(tmp_path / "a", tiny["ir"], 1)
    args = ["export", str(tiny["folder"] / "spec.yaml"), "--checkpoint", str(tmp_path / "a"), "-o"]
    real_open = os.open

    def read_only(path: Any, *rest: Any, **kw: Any) -> int:
        if Path(path).name.startswith(".specgen-write-check."):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, *rest, **kw)

    monkeypatch.setattr(os, "open", read_only)
    assert main([*args, str(tmp_path / "ro")]) == 1
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "Traceback" not in err
    assert str(tmp_path / "ro") in err and "read-only" in err.lower()
    assert not (tmp_path / "ro").exists()  # the folder the probe made is removed with the refusal
    monkeypatch.setattr(os, "open", real_open)
    assert main([*args, str(tmp_path / "good")]) == 0
    assert not [p.name for p in (tmp_path / "good").iterdir() if p.name.startswith(".")]


def test_a_version_folder_is_written_as_one_set(tiny: dict[str, Any], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A version folder rewritten (explicit version) and failing before its model.onnx: the old code left the new
    variant.json (another model's SHA-256) beside the old model, which the server then serves as plain float32."""
    model = tiny["model"].read_bytes()
    write_repository(tmp_path, tiny["ir"], model, version=1, files={"variant.json": b"old"})
    _failing_replace(monkeypatch, lambda dst: dst.name == "model.onnx")
    with pytest.raises(OSError, match="injected failure"):
        write_repository(tmp_path, tiny["ir"], model, version=1, files={"variant.json": b"new"})
    version = tmp_path / "tiny" / "1"
    held = {p.name: p.read_bytes() for p in version.iterdir()}
    assert "model.onnx" not in held or held["variant.json"] == b"old", sorted(held)


# --- the fp16 gate on the CPU -------------------------------------------------------------------------------------------


def _dense_pair(scale: float) -> bytes:
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((4, 8)) * scale).astype(np.float32)
    w2 = (rng.standard_normal((8, 3)) * 0.001).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w1"], ["d1"]), helper.make_node("Gemm", ["d1", "w2"], ["d2"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("d2", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_the_emulation_computes_float16_activations() -> None:
    """Each fp16 node's output rounded to float16, as the CUDA provider writes it (cuBLAS: float32 accumulate)."""
    variant, _ = fp16.convert(_dense_pair(1.0), Calibration())
    x = (np.random.default_rng(1).standard_normal((32, 4)) * 10).astype(np.float32)
    weights = {i.name: numpy_helper.to_array(i).astype(np.float32) for i in onnx.load_from_string(variant).graph.initializer}
    hidden = (x.astype(np.float16).astype(np.float32) @ weights["w1"]).astype(np.float16).astype(np.float32)
    expected = (hidden @ weights["w2"]).astype(np.float16).astype(np.float32)
    outputs, report = emulate(variant, {"x": x})
    np.testing.assert_allclose(outputs["d2"], expected, rtol=1e-3, atol=1e-6)
    assert report["float16_peak"]["tensor"] == "Gemm 'd1'" and report["arithmetic"].startswith("float16 emulated")


def test_fp16_forced_on_the_cpu_refuses_a_float16_overflow(tiny: dict[str, Any], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The checker's repro: d1 reaches about 1e5 (float16 holds 65504). onnxruntime's CPU provider ran the variant in
    float32 and the old gate recorded "0.00 points lost"; on the GPU its logits are inf and NaN."""
    _checkpoint(tmp_path / "big", tiny["ir"], 1, d1_scale=3000.0)
    out = tmp_path / "out"
    code = main(["export", str(tiny["folder"] / "spec.yaml"), "--checkpoint", str(tmp_path / "big"), "-o", str(out),
                 "--precision", "fp16", "--force"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "--precision fp16: fp16: Gemm 'd1" in err and "overflows float16 on the eval set: |x| reaches " in err, err
    assert not (out / "model.fp16.onnx").exists() and not (out / "export.json").exists()


def test_the_emulation_refuses_an_overflow_naming_the_tensor() -> None:
    variant, _ = fp16.convert(_dense_pair(3000.0), Calibration())
    x = (np.random.default_rng(1).standard_normal((16, 4)) * 10).astype(np.float32)
    with pytest.raises(PrecisionRefusal, match=r"^fp16: Gemm 'd1' overflows float16 on the eval set: \|x\| reaches "):
        emulate(variant, {"x": x})


# --- samples spread over the eval set ------------------------------------------------------------------------------------


def test_calibration_and_gate_sample_span_a_class_sorted_eval_set() -> None:
    """An `images` eval set lists its files class by class: its first rows are one class."""
    labels = np.repeat(np.arange(10), 100)  # 1,000 rows sorted by class
    x = labels[:, None].astype(np.float32) * np.ones((1, 4), np.float32)  # each row names its class
    calibration = _calibration(None, SimpleNamespace(training=None), PrecisionRequest(calibration=40),  # type: ignore[arg-type]
                               {"x": x}, 1000)
    assert len(calibration.inputs["x"]) == 40 and len(np.unique(calibration.inputs["x"][:, 0])) >= 8
    info = VariantInfo("fp16", False, None, "r", 1.0, "logits", ("x",), "0" * 64)
    with np.load(io.BytesIO(version_files(info, b"", {"x": x}, labels)["sample.npz"])) as npz:
        rows, kept = npz["input_0"], npz["labels"]
    assert len(kept) == 512 and set(kept.tolist()) == set(range(10))
    np.testing.assert_array_equal(rows[:, 0], kept)  # inputs and labels drawn together


def test_the_server_reads_the_sample_the_export_drew(tmp_path: Path) -> None:
    labels = np.repeat(np.arange(4), 300)
    x = labels[:, None].astype(np.float32) * np.ones((1, 4), np.float32)
    info = VariantInfo("fp16", False, None, "r", 1.0, "logits", ("x",), "0" * 64)
    (tmp_path / "sample.npz").write_bytes(version_files(info, b"", {"x": x}, labels)["sample.npz"])
    inputs, read = read_sample(tmp_path / "sample.npz", info)
    assert read is not None and len(read) == 512 and set(read.tolist()) == {0, 1, 2, 3}
    np.testing.assert_array_equal(inputs["x"][:, 0], read)


# --- nothing to export from: refused before TensorFlow --------------------------------------------------------------------


def test_nothing_to_export_from_is_said_before_tensorflow_is_imported(tiny: dict[str, Any], tmp_path: Path) -> None:
    """The old code imported TensorFlow (12 s) before it said so."""
    script = ("import sys\nfrom specgen.cli import main\ncode = main(sys.argv[1:])\n"
              "print('tensorflow imported' if 'tensorflow' in sys.modules else 'no tensorflow')\nsys.exit(code)\n")
    done = subprocess.run([sys.executable, "-c", script, "export", str(tiny["folder"] / "spec.yaml"), "-o",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 1, done.stderr
    assert done.stdout.strip() == "no tensorflow"
    assert "error: nothing to export from: pass --checkpoint, or give the spec a 'checkpoint.restore' section" in done.stderr
    assert not (tmp_path / "out").exists()
