"""Issue 11 part 4: the fine-tuning walkthrough of docs/finetune.md, end to end at small size.

A Keras user's MobileNetV2 file (examples/finetune/make_weights.py with --epochs 0: Keras' seeded
initial weights, so no Keras training runs here) is imported with `specgen import keras`; the
edit to the imported spec must be exactly the diff docs/finetune.md shows (the shipped
examples/finetune/mobilenet_v2_digits.yaml); then restore-plan, a few training steps, export and
infer run through the CLI as the walkthrough does. Checked:

- the plan names every backbone variable as restored from the file and the new head as
  initialized, and the old 5-class head as unused;
- bitwise: every frozen weight of the trained checkpoint (conv and depthwise kernels, batch-norm
  gamma and beta) equals the value Keras itself reads from the file; the head did train;
- bitwise: the batch-norm moving statistics too are the file's (a batch norm whose weights are all
  frozen runs in inference mode, as Keras' trainable=False; docs/finetune.md), and they are in
  `model` but not in `update`;
- bitwise: each conv initializer of the exported ONNX (every backbone conv has its batch norm
  folded in, so none is stored unfused) is exactly the fold of the file's kernel, gamma, beta,
  moving mean and variance; the head's Gemm weights are exactly the checkpoint's;
- numerically: the ONNX logits equal Keras' own forward pass of the file (in inference mode)
  plus the checkpoint's head, on the eval digits.
"""

from __future__ import annotations

import difflib
import importlib.util
import re
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from specgen.cli import main
from specgen.ir.model import ModelIR
from specgen.ir.resolve import build_ir
from specgen.runtime.predictor import Predictor
from specgen.spec.load import load_spec

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")
onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402

# Keras' own saving and loading call np.array on each of MobileNetV2's 262 variables (numpy 2 warns).
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")

ROOT = Path(__file__).resolve().parents[1]
FINETUNE = ROOT / "examples" / "finetune"
SPEC = "mobilenet_v2_digits.yaml"
STEPS = 4
HEAD = ("head/logits/kernel", "head/logits/bias")


def make_weights_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_weights", FINETUNE / "make_weights.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def documented_diff() -> str:
    """The one ```diff block of docs/finetune.md."""
    blocks = re.findall(r"```diff\n(.*?)```", (ROOT / "docs" / "finetune.md").read_text(), re.S)
    assert len(blocks) == 1, "docs/finetune.md should show the edit as one diff block"
    return blocks[0]


def bits(value: np.ndarray) -> np.ndarray:
    """float32 bit patterns: equal bits, not just equal values (-0.0 and 0.0 differ)."""
    assert value.dtype == np.float32, value.dtype
    return np.ascontiguousarray(value).view(np.uint32)


def keras_file_weights(model: Any) -> dict[str, np.ndarray]:
    """What Keras itself reads from the file, keyed <layer>/<weight> like specgen's variable paths."""
    return {f"{layer.name}/{w.name}": np.asarray(w.numpy()) for layer in model.layers for w in layer.weights}


def onnx_layout(ir: ModelIR, path: str, value: np.ndarray) -> np.ndarray:
    variable = next(v for v in ir.model_variables if v.path == path)
    out = np.transpose(value, variable.onnx_perm) if variable.onnx_perm else value
    return out.reshape(variable.onnx_shape) if variable.onnx_shape else out


def run(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code = main(list(args))
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    return out.out


@pytest.fixture(scope="module")
def flow(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Files made once: the weight file and the imported spec (the rest runs in the test)."""
    folder = tmp_path_factory.mktemp("finetune")
    (folder / "data").mkdir()
    digits_folder = importlib.util.spec_from_file_location("make_digits_folder", ROOT / "examples/data/make_digits_folder.py")
    assert digits_folder and digits_folder.loader
    writer = importlib.util.module_from_spec(digits_folder)
    digits_folder.loader.exec_module(writer)
    # PNG class folders and test.npz as the walkthrough writes them; 360 of each split (the test split is 360) keeps
    # the train folder's up-front decode check short: 4 training steps read 128 of them.
    writer.write(folder / "data" / "digits_folder", 360)
    work = folder / "finetune"
    work.mkdir()
    weights = work / "mobilenet_v2.keras"
    assert make_weights_module().main(["--epochs", "0", "-o", str(weights)]) == 0
    assert main(["import", "keras", str(weights), "-o", str(work / "mobilenet_v2.yaml")]) == 0
    shutil.copy(FINETUNE / SPEC, work / SPEC)  # its ../data/digits_folder is folder/data/digits_folder
    return {"work": work, "weights": weights}


def test_the_documented_edit_turns_the_imported_spec_into_the_shipped_one(flow: dict[str, Any]) -> None:
    imported = (flow["work"] / "mobilenet_v2.yaml").read_text().splitlines(keepends=True)
    shipped = (FINETUNE / SPEC).read_text().splitlines(keepends=True)
    diff = "".join(difflib.unified_diff(imported, shipped, "mobilenet_v2.yaml", SPEC))
    assert diff == documented_diff()


def test_import_freeze_train_export_infer(flow: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    work, weights = flow["work"], flow["weights"]
    spec, run_dir, export_dir = work / SPEC, work / "run", work / "export"
    ir = build_ir(load_spec(spec))
    frozen = [v.path for v in ir.model_variables if "frozen" in v.collections]
    statistics = [v.path for v in ir.model_variables if v.path.rsplit("/", 1)[-1].startswith("moving_")]
    assert sorted(v.path for v in ir.model_variables if "trainable" in v.collections) == sorted(HEAD)
    assert len(frozen) == 156 and len(statistics) == 104  # 52 convs, 52 batch norms (gamma, beta; 2 statistics)
    # Every batch norm's weights are frozen: inference mode, so nothing updates its statistics.
    assert ir.collections["update"] == () and all(n.inference_mode for n in ir.nodes if n.op == "batch_norm")

    # The plan: every backbone variable from the file, the new head initialized, the old head unused.
    plan = run(capsys, "restore-plan", str(spec))
    rows = {line.split()[0]: line.split()[1:3] for line in plan.splitlines() if line[:1].isalpha() and "  " in line}
    for path in frozen + statistics:
        assert rows[path] == ["restored", f"mobilenet_v2.keras:{path}"], (path, rows.get(path))
    for path in HEAD:
        assert rows[path][0] == "initialized", rows[path]
    assert "mobilenet_v2.keras:predictions/kernel" in plan and "restored 260, initialized 2, unused 2" in plan

    out = run(capsys, "train", str(spec), "--steps", str(STEPS), "--set", "checkpoint.dir=run")
    assert ("restore: restored 260, initialized 2, unused 2, mismatched 0; "
            "initialized: head/logits/kernel, head/logits/bias") in out
    reader = tf.train.load_checkpoint(str(run_dir))
    trained = {v.path: reader.get_tensor(v.path) for v in ir.model_variables}

    # Bitwise: the whole backbone, statistics included, is the file's, as Keras reads it (an independent reader).
    file_values = keras_file_weights(keras.models.load_model(weights, compile=False))
    for path in frozen + statistics:
        assert np.array_equal(bits(trained[path]), bits(file_values[path])), path
    assert reader.get_tensor("optimizers/head/iterations") == STEPS
    assert np.abs(trained["head/logits/bias"]).max() > 0  # the head trained (its bias starts at zeros)

    out = run(capsys, "export", str(spec), "--checkpoint", str(run_dir), "-o", str(export_dir))
    assert re.search(r"raw weights from .*ckpt-0*4/variables", out), out
    accuracy = re.search(r"eval accuracy: onnxruntime (\S+),", out)
    assert accuracy, out
    model = onnx.load(str(export_dir / "model.onnx"))
    assert not [n for n in model.graph.node if n.op_type == "BatchNormalization"]  # every one folded
    initializers = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    convs = {n.input[1]: n for n in model.graph.node if n.op_type == "Conv"}

    # Bitwise: each conv initializer is exactly the fold of the file's weights and statistics
    # (W * s, (0 - mean) * s + beta, s = gamma / sqrt(var + eps): specgen's fold, in numpy).
    checked = 0
    for node in ir.nodes:
        if node.op != "batch_norm":
            continue
        conv = ir.node(node.inputs[0])
        kernel_path, bn = f"{conv.name}/kernel", node.name
        gamma, beta = file_values[f"{bn}/gamma"], file_values[f"{bn}/beta"]
        mean, variance = file_values[f"{bn}/moving_mean"], file_values[f"{bn}/moving_variance"]
        scale = gamma / np.sqrt(variance + np.float32(node.params["epsilon"]))
        kernel_name = next(v.onnx_name for v in ir.model_variables if v.path == kernel_path)
        expected_kernel = onnx_layout(ir, kernel_path, file_values[kernel_path]) * scale.reshape(-1, 1, 1, 1)
        expected_bias = ((np.zeros_like(mean) - mean) * scale + beta).astype(np.float32)
        assert np.array_equal(bits(initializers[kernel_name]), bits(expected_kernel)), kernel_path
        assert np.array_equal(bits(initializers[convs[kernel_name].input[2]]), bits(expected_bias)), bn
        checked += 1
    assert checked == 52
    for path in HEAD:  # the head (no batch norm) is stored as trained, bit for bit
        name = next(v.onnx_name for v in ir.model_variables if v.path == path)
        assert np.array_equal(bits(initializers[name]), bits(onnx_layout(ir, path, trained[path]))), path

    # Numerically: Keras' own forward pass of the file (its statistics, untouched), then the checkpoint's head.
    keras_model = keras.models.load_model(weights, compile=False)
    features = keras.Model(keras_model.input, keras_model.get_layer("global_average_pooling2d").output)
    test = work.parent / "data" / "digits_folder" / "test.npz"  # the test PNGs' uint8 pixels
    raw = np.load(test)["image"]
    assert raw.dtype == np.uint8
    scaled = (raw / 255.0).astype(np.float32)  # Keras preprocesses [0, 1] values; the graph takes the pixels
    pooled = keras.ops.convert_to_numpy(features(make_weights_module().preprocess(scaled), training=False))
    expected = pooled @ trained["head/logits/kernel"] + trained["head/logits/bias"]
    logits = Predictor(str(export_dir / "model.onnx"), provider="cpu")({"image": raw})["logits"]
    assert np.abs(logits - expected).max() <= 1e-4 * max(1.0, float(np.abs(expected).max()))

    out = run(capsys, "infer", str(export_dir / "model.onnx"), "--input", str(test), "--labels", "label")
    assert f"accuracy of 'logits' against 'label': {accuracy.group(1)} on 360 examples" in out
