"""The shipped blocks transformer_encoder / transformer_decoder against KerasHub's TransformerEncoder /
TransformerDecoder with the same weights (matched by path: ours `<instance>/<sublayer>/<var>`, KerasHub's
`<layer>/<sublayer>/<var>`): forward and the gradients of every weight and of the input within 1e-5,
post-norm and pre-norm, at two sequence lengths through one graph (a named `seq` dimension), the
decoder with and without cross-attention on an encoder sequence of another length and size; TF vs
onnxruntime on the generated ONNX graph.
Expansion names and the positioned errors are in tests/test_transformer_blocks_spec.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

keras = pytest.importorskip("keras")
keras_hub = pytest.importorskip("keras_hub")

from keras_parity import FORWARD_TOLERANCE, GRADIENT_TOLERANCE, generated_model  # noqa: E402

HIDDEN, HEADS, INTERMEDIATE = 8, 2, 12
LENGTHS = ((5, 7), (9, 3))  # (decoder or encoder steps, encoder sequence steps): two lengths through one graph
MEMORY = 6  # the encoder sequence's features for cross-attention: not HIDDEN, so a swapped kernel shows
KERAS_CLASS = {"transformer_encoder": "TransformerEncoder", "transformer_decoder": "TransformerDecoder",
               "transformer_decoder_cross": "TransformerDecoder"}


def block_spec(block: str, repeat: int | None = None, **with_: Any) -> str:
    """One instance of `block` over x [seq, 8] (and memory [src, 6] for cross-attention), output y."""
    instance: dict[str, Any] = {"name": "blk", "block": block,
                                "with": {"hidden_dim": HIDDEN, "intermediate_dim": INTERMEDIATE, "num_heads": HEADS,
                                         **with_}}
    inputs: dict[str, Any] = {"x": {"shape": ["seq", HIDDEN]}}
    if block.endswith("_cross"):
        inputs["memory"] = {"shape": ["src", MEMORY]}
        instance["inputs"] = ["x", "memory"]
    if repeat:
        instance["repeat"] = repeat
    document = {"specgen": 1, "name": block, "inputs": inputs, "outputs": {"y": "blk"}, "layers": [instance]}
    return yaml.safe_dump(document, sort_keys=False)


def _scaled(ours: Any, theirs: Any) -> float:
    """Max abs diff of two gradients, divided by their size when over 1: a kernel's gradient sums batch x time
    products (values up to ~10 here) and the softmax and layer-norm backward passes cancel, so two float32
    evaluations differ by a few ulps of that size (as in tests/test_keras_parity_attention.py)."""
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    return float(np.max(np.abs(ours - theirs)) / max(1.0, float(np.max(np.abs(theirs)))))


def _diffs(block: str, tmp_path: Path, **params: Any) -> list[dict[str, float]]:
    """Per entry of LENGTHS, the max abs diffs between one generated model and KerasHub's layer."""
    rng = np.random.default_rng(0)
    model = generated_model(block_spec(block, **params), tmp_path)
    theirs = getattr(keras_hub.layers, KERAS_CLASS[block])(intermediate_dim=INTERMEDIATE, num_heads=HEADS,
                                                           name="blk", **params)
    cross = block.endswith("_cross")
    theirs.build((None, None, HIDDEN), *([(None, None, MEMORY)] if cross else []))
    ours = model.variables_by_path()
    by_path = {w.path: w for w in theirs.weights}
    assert sorted(ours) == sorted(by_path)  # the same paths: KerasHub weights map by identity
    for path, variable in ours.items():
        # Scaled as glorot would (1/sqrt(fan-in)), so the softmax is not saturated (see _scaled).
        fan_in = variable.shape[0] if len(variable.shape) > 1 else 1
        value = (rng.standard_normal(tuple(variable.shape)) / np.sqrt(fan_in)).astype(np.float32)
        variable.assign(value)
        by_path[path].assign(value)
    found = []
    for steps, source in LENGTHS:
        inputs = {"x": rng.standard_normal((3, steps, HIDDEN)).astype(np.float32)}
        if cross:
            inputs["memory"] = rng.standard_normal((3, source, MEMORY)).astype(np.float32)
        found.append(_compare(model, theirs, ours, by_path, inputs, rng))
    return found


def _compare(model: Any, theirs: Any, ours: dict[str, Any], by_path: dict[str, Any], inputs: dict[str, np.ndarray],
             rng: np.random.Generator) -> dict[str, float]:
    import tensorflow as tf

    ours_in = {k: tf.Variable(v) for k, v in inputs.items()}
    theirs_in = {k: tf.Variable(v) for k, v in inputs.items()}
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(list(ours.values()))
        out_ours = model(ours_in, training=False)["y"]
        out_theirs = theirs(*theirs_in.values(), training=False)
        projection = tf.constant(rng.standard_normal(tuple(out_theirs.shape)).astype(np.float32))
        loss_ours, loss_theirs = tf.reduce_sum(out_ours * projection), tf.reduce_sum(out_theirs * projection)
    assert tuple(out_ours.shape) == tuple(out_theirs.shape) == inputs["x"].shape
    diffs = {"forward": float(np.max(np.abs(out_ours.numpy() - out_theirs.numpy())))}
    for path, variable in ours.items():
        diffs[f"grad {path}"] = _scaled(tape.gradient(loss_ours, variable), tape.gradient(loss_theirs, by_path[path]))
    for name in inputs:
        diffs[f"grad {name}"] = _scaled(tape.gradient(loss_ours, ours_in[name]), tape.gradient(loss_theirs, theirs_in[name]))
    return diffs


def _assert_close(diffs: dict[str, float]) -> None:
    for key, value in diffs.items():
        assert value <= (FORWARD_TOLERANCE if key == "forward" else GRADIENT_TOLERANCE), f"{key}: {value:.3g}"


@pytest.mark.parametrize("normalize_first", [False, True], ids=["post_norm", "pre_norm"])
@pytest.mark.parametrize("block", sorted(KERAS_CLASS))
def test_matches_keras_hub(block: str, normalize_first: bool, tmp_path: Path) -> None:
    for diffs in _diffs(block, tmp_path, normalize_first=normalize_first):
        # forward, the inputs and KerasHub's weights: 16, and 26 with cross-attention (its 8 and a layer norm)
        assert len(diffs) == (29 if block.endswith("_cross") else 18)
        _assert_close(diffs)


def test_options_match_keras_hub(tmp_path: Path) -> None:
    """gelu, a non-default epsilon and dropout (the identity at inference) reach the layers they belong to."""
    for diffs in _diffs("transformer_encoder", tmp_path, activation="gelu", layer_norm_epsilon=1e-3, dropout=0.25):
        _assert_close(diffs)


def test_pre_and_post_norm_differ(tmp_path: Path) -> None:
    """The parity above would pass for one graph used for both settings if KerasHub ignored the flag: the two
    graphs with the same weights give different outputs."""
    import tensorflow as tf

    x = tf.constant(np.random.default_rng(4).standard_normal((2, 6, HIDDEN)).astype(np.float32))
    outs = [generated_model(block_spec("transformer_encoder", normalize_first=pre), tmp_path)({"x": x})["y"]
            for pre in (False, True)]
    assert float(np.max(np.abs(outs[0].numpy() - outs[1].numpy()))) > 0.1


@pytest.mark.parametrize("opset", [21, 23])
@pytest.mark.parametrize("normalize_first", [False, True], ids=["post_norm", "pre_norm"])
@pytest.mark.parametrize("block", sorted(KERAS_CLASS))
def test_onnx_matches_tensorflow(block: str, normalize_first: bool, opset: int, tmp_path: Path) -> None:
    """TF vs onnxruntime at batch 1 and 7 (tests/test_op_parity.py's check and tolerance: float32 through two
    runtimes), plain attention nodes at opset 21 and the Attention node at 23; two stacked instances where
    the block has one input."""
    from test_op_parity import TOLERANCE, check_parity

    from specgen.spec.load import load_spec_text

    document = yaml.safe_load(block_spec(block, repeat=None if block.endswith("_cross") else 2,
                                         normalize_first=normalize_first, activation="gelu"))
    document["export"] = {"onnx": {"opset": opset}}
    loaded = load_spec_text(yaml.safe_dump(document, sort_keys=False), "blk.yaml")
    assert check_parity(loaded, tmp_path) <= TOLERANCE
