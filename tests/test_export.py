"""`specgen export`, `specgen infer` and `Predictor`: weights in, parity with TensorFlow, clear errors."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from specgen.cli import main
from specgen.ir.model import ModelIR
from specgen.ir.resolve import build_ir
from specgen.spec.overrides import load_with_overrides

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "specs"
CASES = [("digits_cnn", "raw"), ("digits_cnn", "ema"), ("digits_resnet", "raw"), ("digits_resnet", "ema"),
         ("digits_mlp", "raw")]


def write_checkpoint(prefix: Path, ir: ModelIR, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A checkpoint in specgen's format holding random model weights and EMA shadows."""
    import tensorflow as tf

    from specgen.runtime.parity import random_weights

    values = random_weights(ir, rng)
    values |= {f"ema/{p}": random_weights(ir, rng)[p] for p in ir.collections["trainable"]}
    names = sorted(values)
    tf.raw_ops.SaveV2(prefix=str(prefix), tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(values[n]) for n in names])
    return values


@pytest.mark.parametrize(("name", "weights"), CASES)
def test_export_parity_and_weights(name: str, weights: str, tmp_path: Path) -> None:
    from specgen.pipeline import build
    from specgen.runtime.commands.export import export

    overrides = [f"export.onnx.weights={weights}"]
    if weights == "ema":
        overrides.append("train.ema.decay=0.9")
    loaded = load_with_overrides(EXAMPLES / f"{name}.yaml", overrides)
    ir = build_ir(loaded)
    values = write_checkpoint(tmp_path / "ckpt", ir, np.random.default_rng(1))
    report = export(build(loaded), tmp_path / "ckpt", tmp_path / "out")
    assert report["parity_max_abs_diff"] <= 1e-5
    model = onnx.load(str(tmp_path / "out" / "model.onnx"))
    onnx.checker.check_model(model, full_check=True)
    ops = {node.op_type for node in model.graph.node}
    assert not ops & {"Dropout", "BatchNormalization"}  # no training-mode nodes; batch norm folded
    assert [i.name for i in model.graph.input] == [i.name for i in ir.inputs]
    assert [o.name for o in model.graph.output] == list(ir.outputs)
    assert (model.ir_version, model.opset_import[0].version) == (10, 21)
    initializers = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    head = "head__out__kernel" if name == "digits_cnn" else ("head__kernel" if name == "digits_resnet" else "out__kernel")
    path = head.replace("__", "/")
    source = values[f"ema/{path}" if weights == "ema" else path]
    np.testing.assert_array_equal(initializers[head], source)  # a kernel no batch norm touches: bitwise
    assert report["weights"] == weights


def test_export_of_a_trained_run_matches_tensorflow_accuracy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "mlp.yaml"
    text = (EXAMPLES / "digits_mlp.yaml").read_text().replace("../data/digits.npz", str(ROOT / "examples/data/digits.npz"))
    spec.write_text(text + "checkpoint: {dir: run, every_steps: 1000}\n")
    assert main(["train", str(spec), "--steps", "30", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["export", str(spec), "--checkpoint", str(tmp_path / "run"), "-o", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    lines = {line.split(":")[0]: line for line in out.splitlines()}
    assert "between onnxruntime and TensorFlow on 360 examples (limit 1e-4)" in lines["parity"]
    onnx_acc, tf_acc = (float(part.split()[-1]) for part in lines["eval accuracy"].split(":", 1)[1].split(","))
    assert onnx_acc == tf_acc and onnx_acc > 0.3  # chance is 0.1; 30 steps are inside the 50-step warm-up

    capsys.readouterr()
    code = main(["infer", str(tmp_path / "out" / "model.onnx"), "--input", str(ROOT / "examples/data/digits.npz"),
                 "--feed", "image=x_test", "--labels", "y_test", "--output", str(tmp_path / "logits.npz")])
    assert code == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "provider: CPUExecutionProvider"
    assert f"accuracy of 'logits' against 'y_test': {onnx_acc:.4f} on 360 examples" in out
    with np.load(tmp_path / "logits.npz") as saved, np.load(ROOT / "examples/data/digits.npz") as digits:
        assert saved["logits"].shape == (360, 10)
        assert round(float(np.mean(np.argmax(saved["logits"], -1) == digits["y_test"])), 4) == onnx_acc


def test_export_refuses_a_checkpoint_that_does_not_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import tensorflow as tf

    tf.raw_ops.SaveV2(prefix=str(tmp_path / "ckpt"), tensor_names=["out/kernel"], shape_and_slices=[""],
                      tensors=[tf.zeros([3, 3])])
    code = main(["export", str(EXAMPLES / "digits_mlp.yaml"), "--checkpoint", str(tmp_path / "ckpt"), "-o",
                 str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert "'out/kernel' is float32[3, 3] in the checkpoint but float32[128, 10] here" in err
    assert "'hidden/kernel' is missing" in err
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def mlp_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from specgen.render.files import render_files
    from specgen.runtime.onnx_export import with_weights
    from specgen.runtime.parity import random_weights

    loaded = load_with_overrides(EXAMPLES / "digits_mlp.yaml", [])
    ir = build_ir(loaded)
    model = with_weights(onnx.load_from_string(render_files(ir)["model.onnx"]), ir,
                         random_weights(ir, np.random.default_rng(0)))
    path = tmp_path_factory.mktemp("mlp") / "model.onnx"
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize(("inputs", "message"), [
    ({}, "inputs must be exactly ['image']; missing ['image'], unknown []"),
    ({"image": np.zeros((2, 8, 8, 1)), "extra": np.zeros(1)}, "unknown ['extra']"),
    ({"image": np.zeros((2, 8, 8))}, "input 'image': received shape [2, 8, 8], expected ['batch', 8, 8, 1]"),
    ({"image": np.zeros((2, 8, 8, 1), dtype=np.complex64)}, "input 'image': received dtype complex64, expected float32"),
])
def test_predictor_names_what_is_wrong(mlp_model: Path, inputs: dict[str, np.ndarray], message: str) -> None:
    from specgen.runtime.predictor import InputError, Predictor

    with pytest.raises(InputError) as info:
        Predictor(mlp_model, provider="cpu")(inputs)
    assert message in str(info.value)


def test_predictor_runs_any_batch_size(mlp_model: Path) -> None:
    from specgen.runtime.predictor import Predictor

    predictor = Predictor(mlp_model)
    batch = np.random.default_rng(0).standard_normal((7, 8, 8, 1)).astype(np.float32)
    whole = predictor({"image": batch})["logits"]
    single = np.concatenate([predictor({"image": batch[i:i + 1]})["logits"] for i in range(7)])
    np.testing.assert_allclose(whole, single, atol=1e-6)
    assert predictor.provider in ("CPUExecutionProvider", "CUDAExecutionProvider")


def test_exactly_one_onnxruntime_distribution_is_installed() -> None:
    """onnxruntime and onnxruntime-gpu share one module; the [runtime] extra must never bring both."""
    installed = set()
    for name in ("onnxruntime", "onnxruntime-gpu"):
        try:
            importlib.metadata.version(name)
            installed.add(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    assert len(installed) == 1, installed
    requirements = importlib.metadata.requires("specgen") or []
    runtime = [r for r in requirements if "extra == 'runtime'" in r and r.startswith("onnxruntime")]
    assert len(runtime) == 2 and any("platform_machine == 'x86_64'" in r for r in runtime)


def test_cuda_provider(mlp_model: Path) -> None:
    from specgen.runtime.predictor import CUDA, Predictor, has_cuda_driver

    if not has_cuda_driver():
        pytest.skip("no NVIDIA driver on this machine: the CUDA provider (with IO binding) is exercised where a GPU "
                    "is lent; see bench/RESULTS.md")
    batch = np.random.default_rng(0).standard_normal((64, 8, 8, 1)).astype(np.float32)
    gpu = Predictor(mlp_model, provider="cuda")
    assert gpu.provider == CUDA
    np.testing.assert_allclose(gpu({"image": batch})["logits"], Predictor(mlp_model, provider="cpu")({"image": batch})["logits"],
                               atol=1e-4)
