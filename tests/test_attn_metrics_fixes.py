"""Fixes from the attention and metrics checks.

- A positional_embedding's exported graph refuses a longer sequence at every max_length, 1 included (its 1-row
  table used to broadcast to every step), with and without onnxruntime's graph rewrites.
- Every named input dimension is stamped with at least 1 (`specgen.min_lengths`): an empty sequence is one
  specgen line at opset 21 and at opset 23 (whose fused Attention node failed with onnxruntime's own text).
- A shipped transformer block whose hidden_dim is not its input's feature size: one line naming hidden_dim,
  the block and both sizes, at the value.
- `specgen validate` warns about a top_k_accuracy whose k reaches the class count (it can only read 1.0).
- `specgen train --probe` says when an optimizer's learning rate is 0 at the probed step (a warm-up's step 0).
- The documented metric definitions: precision's `logit > 0` and auc's strict `score > threshold`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import yaml

from specgen.cli import main
from specgen.ir.model import ModelIR
from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.runtime import lengths, parity
from specgen.runtime.onnx_export import with_weights
from specgen.runtime.predictor import InputError, Predictor
from specgen.spec.load import load_spec_text


def _ir(doc: dict[str, Any]) -> ModelIR:
    return build_ir(load_spec_text(yaml.safe_dump({"specgen": 1, **doc}, sort_keys=False), f"{doc['name']}.yaml"))


def _exported(ir: ModelIR) -> tuple[bytes, dict[str, np.ndarray]]:
    """The model as `specgen export` writes it (with_weights stamps runtime/lengths.py's metadata)."""
    values = parity.random_weights(ir, np.random.default_rng(0))
    model = with_weights(onnx.load_from_string(render_files(ir)["model.onnx"]), ir, values)
    return model.SerializeToString(), values


def _position_model(max_length: int) -> tuple[bytes, np.ndarray]:
    ir = _ir({"name": f"pos{max_length}", "inputs": {"x": {"shape": ["seq", 4]}}, "outputs": {"y": "pos"},
              "layers": [{"name": "pos", "op": "positional_embedding", "max_length": max_length}]})
    model, values = _exported(ir)
    return model, values["pos/embeddings"]


LEVELS = [ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL]


@pytest.mark.parametrize("level", LEVELS, ids=["optimized", "unoptimized"])
@pytest.mark.parametrize("max_length", [1, 3])
def test_the_onnx_graph_refuses_a_longer_sequence(max_length: int, level: ort.GraphOptimizationLevel) -> None:
    """Raw onnxruntime, no specgen check: lengths up to max_length give the table's rows; one more step fails in
    the graph (optimized: the Reshape refuses the clipped rows; unoptimized: Gather's bounds check). The old graph
    answered max_length 1 at length 3 with row 0 at every step."""
    model, table = _position_model(max_length)
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    options.log_severity_level = 4
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    for steps in range(1, max_length + 1):
        (out,) = session.run(None, {"x": np.zeros((2, steps, 4), np.float32)})
        np.testing.assert_array_equal(out, np.broadcast_to(table[:steps], (2, steps, 4)))
    for steps in (max_length + 1, max_length + 3):
        with pytest.raises(Exception, match=r"Reshape node|Gather node"):
            session.run(None, {"x": np.zeros((2, steps, 4), np.float32)})


def _attention(opset: int) -> ModelIR:
    return _ir({"name": f"att{opset}", "inputs": {"x": {"shape": ["seq", 8]}}, "outputs": {"y": "mha"},
                "layers": [{"name": "mha", "op": "multi_head_attention", "num_heads": 2, "key_dim": 4}],
                "export": {"onnx": {"opset": opset}}})


@pytest.mark.parametrize("opset", [21, 23])
def test_an_empty_sequence_is_one_line_at_every_opset(opset: int) -> None:
    """Opset 21 answered [2, 0, 8] with an empty output, opset 23 failed inside onnxruntime's Attention node
    (`Q sequence length must be greater than 0`, a C++ path): now both refuse it before running, in one line."""
    ir = _attention(opset)
    assert lengths.minima(ir) == {"seq": (1, "mha", "multi_head_attention")}
    model, _ = _exported(ir)
    meta = {p.key: p.value for p in onnx.load_from_string(model).metadata_props}
    assert meta["specgen.min_lengths"] == '{"seq": [1, "mha", "multi_head_attention"]}'
    predictor = Predictor(model, "cpu")
    with pytest.raises(InputError) as caught:
        predictor({"x": np.zeros((2, 0, 8), np.float32)})
    assert str(caught.value) == ("input 'x': received 0 steps along 'seq' (shape [2, 0, 8]), expected at least 1: "
                                 "the model takes no empty 'seq' axis")
    assert predictor({"x": np.ones((2, 1, 8), np.float32)})["y"].shape == (2, 1, 8)


def test_a_window_minimum_still_wins_over_one() -> None:
    """A symbol a valid window needs more of keeps that bound and its layer; another symbol gets 1."""
    ir = _ir({"name": "two", "inputs": {"a": {"shape": ["t", 3]}, "b": {"shape": ["u", 3]}}, "outputs": {"y": "c", "z": "d"},
              "layers": [{"name": "c", "op": "conv1d", "input": "a", "filters": 2, "kernel": 4},
                         {"name": "d", "op": "dense", "input": "b", "units": 2}]})
    assert lengths.minima(ir) == {"t": (4, "c", "conv1d"), "u": (1, "d", "dense")}
    shapes = {"a": (1, 4, 3), "b": (1, 0, 3)}
    assert lengths.too_short(lengths.minima(ir), {"a": ("batch", "t", 3), "b": ("batch", "u", 3)}, shapes) == (
        "input 'b': received 0 steps along 'u' (shape [1, 0, 3]), expected at least 1: the model takes no empty 'u' axis")


BLOCK = """specgen: 1
name: t
inputs:
  x: {shape: [seq, 12]}
outputs:
  y: L
layers:
  - {name: L, block: BLOCK, input: x, with: {hidden_dim: HIDDEN, intermediate_dim: 8, num_heads: 4FIRST}}
"""


@pytest.mark.parametrize(("block", "first"), [("transformer_encoder", ""), ("transformer_encoder", ", normalize_first: true"),
                                              ("transformer_decoder", ""), ("transformer_decoder", ", normalize_first: true")])
def test_hidden_dim_other_than_the_input_features(block: str, first: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The old line named the residual add inside the block ('L/feedforward_residual' ... do not broadcast)."""
    path = tmp_path / "s.yaml"
    path.write_text(BLOCK.replace("BLOCK", block).replace("HIDDEN", "16").replace("FIRST", first))
    expanded = block + ("_normalize_first" if first else "")  # the graph the instance expanded (origins' note)
    col = path.read_text().splitlines()[7].index("hidden_dim: 16") + len("hidden_dim: ") + 1  # at the value
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"{path}:8:{col}: error: hidden_dim: received 16, expected the input's 12 features: block "
                   f"'{block}' adds its input [batch, seq, 12] to outputs of hidden_dim features, so hidden_dim is the "
                   f"input's feature size (in instance 'L' of block '{expanded}' at {path}:8:5)", "1 error found"], err
    path.write_text(BLOCK.replace("BLOCK", block).replace("HIDDEN", "12").replace("FIRST", first))
    assert main(["validate", str(path)]) == 0


TOP_K = """specgen: 1
name: topk
inputs:
  x: {shape: [6]}
outputs:
  logits: out
layers:
  - {name: out, op: dense, units: 5}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: y}
optimizers:
  all: {variables: ["*"], kind: sgd, learning_rate: 0.1}
train:
  batch_size: 8
  metrics: [accuracy, METRIC]
data:
  train: {npz: d.npz, features: {x: x}, labels: {y: y}}
"""


@pytest.mark.parametrize(("metric", "at", "k", "default"), [("top_k_accuracy", "top_k", 5, " (the default)"),
                                                             ("{kind: top_k_accuracy, k: 7}", "7", 7, "")])
def test_top_k_at_least_the_classes_warns(metric: str, at: str, k: int, default: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The old validate said ok and nothing else; training then printed top_k_accuracy 1.0000 every time. The
    warning sits at the written k, else at the metric."""
    path = tmp_path / "s.yaml"
    path.write_text(TOP_K.replace("METRIC", metric))
    col = path.read_text().splitlines()[13].index(at) + 1
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"{path}:14:{col}: warning: metric 'top_k_accuracy': k {k}{default} is at least the 5 classes of output "
        f"'logits', so every label is among the top {k} and the metric always reads 1.0; set k below 5",
        "1 warning (--strict makes them errors)"]
    assert main(["validate", "--strict", str(path)]) == 1
    capsys.readouterr()
    path.write_text(TOP_K.replace("METRIC", "{kind: top_k_accuracy, k: 4}"))
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().err == ""


PROBED = """specgen: 1
name: warm
inputs:
  x: {shape: [3]}
outputs:
  logits: out
layers:
  - {name: out, op: dense, units: 2}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: y}
optimizers:
  all: {variables: ["*"], kind: sgd, learning_rate: {schedule: constant, initial: 0.1, warmup_steps: 4}}
train: {batch_size: 8, seed: 1}
data:
  train: {npz: d.npz, features: {x: x}, labels: {y: y}}
"""


def test_probe_says_when_the_learning_rate_is_zero(tmp_path: Path) -> None:
    """Warm-up gives rate 0 at step 0: every |update| is 0 although the gradients are not, and the probe now
    says why; without the warm-up the updates are non-zero and there is no note."""
    pytest.importorskip("tensorflow")
    from specgen.pipeline import build
    from specgen.runtime.commands import probe as probing
    from specgen.spec.load import load_spec

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.normal(size=(8, 3)).astype(np.float32), y=rng.integers(0, 2, 8))
    (tmp_path / "warm.yaml").write_text(PROBED)
    (tmp_path / "flat.yaml").write_text(PROBED.replace(", warmup_steps: 4", ""))
    warm = probing.probe(build(load_spec(tmp_path / "warm.yaml")))
    assert warm.step == 0 and warm.zero_rates == (("all", 4, 2),)
    assert all(r.update_norm == 0 and (r.grad_norm or 0) > 0 for r in warm.variables)
    assert ("note: optimizer 'all' runs at learning rate 0 at step 0 (its warm-up of 4 steps starts from 0), so the "
            "|update| of its 2 weights is a zero step, not the size of a training update") in probing.format_probe(warm)
    flat = probing.probe(build(load_spec(tmp_path / "flat.yaml")))
    assert flat.zero_rates == () and all(r.update_norm > 0 for r in flat.variables)
    assert "note:" not in probing.format_probe(flat)


def test_documented_metric_thresholds() -> None:
    """docs/training.md: precision counts `logit > 0`, so logit 2e-8 (float32 sigmoid exactly 0.5, on every
    kernel path) is a positive; auc counts `sigmoid(logit) > threshold` exactly, also for a score on a threshold."""
    tf = pytest.importorskip("tensorflow")
    from specgen.runtime.lib import metrics

    logits = np.array([[2e-8], [1.0]], np.float32)
    assert tf.sigmoid(logits[:1]).numpy()[0, 0] == 0.5 and tf.sigmoid(np.full(8, 2e-8, np.float32)).numpy()[0] == 0.5
    precision = metrics.make("precision", "binary")
    precision.update(None, tf.constant([[0.0], [1.0]]), tf.constant(logits))
    assert float(precision.result()) == 0.5  # both predicted positive ("sigmoid > 0.5": only the second, 1.0)
    thresholds = np.array([(i + 1) / 199 for i in range(198)], np.float32)
    on_grid = np.log(thresholds / (1 - thresholds)).astype(np.float32)
    labels = (np.random.default_rng(0).random(198) < 0.5).astype(np.float32)
    auc = metrics.make("auc", "binary")
    auc.update(None, tf.constant(labels), tf.constant(on_grid))
    scores, grid = tf.sigmoid(on_grid).numpy(), np.array([-1e-7, *thresholds, 1 + 1e-7], np.float32)
    above, true = scores[:, None] > grid[None, :], labels[:, None] > 0.5
    tp, fp = (above & true).sum(0), (above & ~true).sum(0)
    tpr, fpr = tp / true.sum(), fp / (~true).sum()
    strict = float(np.sum((fpr[:-1] - fpr[1:]) * (tpr[:-1] + tpr[1:]) / 2))
    assert np.isin(scores, thresholds).sum() > 50  # many scores sit exactly on a threshold
    assert abs(float(auc.result()) - strict) <= 1e-6
    assert re.search(r"`sigmoid\(logit\) > threshold`, exactly", (Path(__file__).parents[1] / "docs/training.md").read_text())
