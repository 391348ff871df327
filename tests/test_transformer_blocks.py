"""The shipped blocks transformer_encoder / transformer_decoder against KerasHub's TransformerEncoder /
TransformerDecoder with the same weights (matched by path: ours `<instance>/<sublayer>/<var>`, KerasHub's
`<layer>/<sublayer>/<var>`): forward and the gradients of every weight and of the input within 1e-5,
post-norm and pre-norm, at two sequence lengths; TF vs onnxruntime on the generated ONNX graph.
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
LENGTHS = (5, 9)  # two sequence lengths (one graph each while multi_head_attention needs a fixed time)
KERAS_CLASS = {"transformer_encoder": "TransformerEncoder", "transformer_decoder": "TransformerDecoder"}


def block_spec(block: str, steps: int, repeat: int | None = None, **with_: Any) -> str:
    instance: dict[str, Any] = {"name": "blk", "block": block,
                                "with": {"hidden_dim": HIDDEN, "intermediate_dim": INTERMEDIATE, "num_heads": HEADS,
                                         **with_}}
    if repeat:
        instance["repeat"] = repeat
    document = {"specgen": 1, "name": f"{block}_{steps}", "inputs": {"x": {"shape": [steps, HIDDEN]}},
                "outputs": {"y": "blk"}, "layers": [instance]}
    return yaml.safe_dump(document, sort_keys=False)


def _scaled(ours: Any, theirs: Any) -> float:
    """Max abs diff of two gradients, divided by their size when over 1: a kernel's gradient sums batch x time
    products (values up to ~10 here) and the softmax and layer-norm backward passes cancel, so two float32
    evaluations differ by a few ulps of that size (as in tests/test_keras_parity_attention.py)."""
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    return float(np.max(np.abs(ours - theirs)) / max(1.0, float(np.max(np.abs(theirs)))))


def _diffs(block: str, steps: int, tmp_path: Path, **params: Any) -> dict[str, float]:
    import tensorflow as tf

    rng = np.random.default_rng(steps)
    model = generated_model(block_spec(block, steps, **params), tmp_path)
    keras_params = {k: v for k, v in params.items() if k != "kernel_init"}
    theirs = getattr(keras_hub.layers, KERAS_CLASS[block])(intermediate_dim=INTERMEDIATE, num_heads=HEADS,
                                                           name="blk", **keras_params)
    theirs.build((None, steps, HIDDEN))
    ours = model.variables_by_path()
    by_path = {w.path: w for w in theirs.weights}
    assert sorted(ours) == sorted(by_path)  # the same paths: KerasHub weights map by identity
    for path, variable in ours.items():
        # Scaled as glorot would (1/sqrt(fan-in)), so the softmax is not saturated (see _scaled).
        fan_in = variable.shape[0] if len(variable.shape) > 1 else 1
        value = (rng.standard_normal(tuple(variable.shape)) / np.sqrt(fan_in)).astype(np.float32)
        variable.assign(value)
        by_path[path].assign(value)
    x = rng.standard_normal((3, steps, HIDDEN)).astype(np.float32)
    x_ours, x_theirs = tf.Variable(x), tf.Variable(x)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(list(ours.values()))
        out_ours = model({"x": x_ours}, training=False)["y"]
        out_theirs = theirs(x_theirs, training=False)
        projection = tf.constant(rng.standard_normal(tuple(out_theirs.shape)).astype(np.float32))
        loss_ours, loss_theirs = tf.reduce_sum(out_ours * projection), tf.reduce_sum(out_theirs * projection)
    assert tuple(out_ours.shape) == tuple(out_theirs.shape) == (3, steps, HIDDEN)
    diffs = {"forward": float(np.max(np.abs(out_ours.numpy() - out_theirs.numpy())))}
    for path, variable in ours.items():
        diffs[f"grad {path}"] = _scaled(tape.gradient(loss_ours, variable), tape.gradient(loss_theirs, by_path[path]))
    diffs["grad input"] = _scaled(tape.gradient(loss_ours, x_ours), tape.gradient(loss_theirs, x_theirs))
    return diffs


@pytest.mark.parametrize("steps", LENGTHS)
@pytest.mark.parametrize("normalize_first", [False, True], ids=["post_norm", "pre_norm"])
@pytest.mark.parametrize("block", sorted(KERAS_CLASS))
def test_matches_keras_hub(block: str, normalize_first: bool, steps: int, tmp_path: Path) -> None:
    diffs = _diffs(block, steps, tmp_path, normalize_first=normalize_first)
    assert len(diffs) == 18  # forward, input and the 16 weights of KerasHub's layer
    for key, value in diffs.items():
        assert value <= (FORWARD_TOLERANCE if key == "forward" else GRADIENT_TOLERANCE), f"{key}: {value:.3g}"


def test_options_match_keras_hub(tmp_path: Path) -> None:
    """gelu, a non-default epsilon and dropout (the identity at inference) reach the layers they belong to."""
    diffs = _diffs("transformer_encoder", 6, tmp_path, activation="gelu", layer_norm_epsilon=1e-3, dropout=0.25)
    for key, value in diffs.items():
        assert value <= (FORWARD_TOLERANCE if key == "forward" else GRADIENT_TOLERANCE), f"{key}: {value:.3g}"


def test_pre_and_post_norm_differ(tmp_path: Path) -> None:
    """The parity above would pass for one graph used for both settings if KerasHub ignored the flag: the two
    graphs with the same weights give different outputs."""
    import tensorflow as tf

    x = tf.constant(np.random.default_rng(4).standard_normal((2, 6, HIDDEN)).astype(np.float32))
    outs = [generated_model(block_spec("transformer_encoder", 6, normalize_first=pre), tmp_path)({"x": x})["y"]
            for pre in (False, True)]
    assert float(np.max(np.abs(outs[0].numpy() - outs[1].numpy()))) > 0.1


@pytest.mark.parametrize("normalize_first", [False, True], ids=["post_norm", "pre_norm"])
@pytest.mark.parametrize("block", sorted(KERAS_CLASS))
def test_onnx_matches_tensorflow(block: str, normalize_first: bool, tmp_path: Path) -> None:
    """Two stacked instances, TF vs onnxruntime at batch 1 and 7 (tests/test_op_parity.py's check and
    tolerance: float32 through two runtimes)."""
    from test_op_parity import TOLERANCE, check_parity

    from specgen.spec.load import load_spec_text

    text = block_spec(block, 7, repeat=2, normalize_first=normalize_first, activation="gelu")
    assert check_parity(load_spec_text(text, "blk.yaml"), tmp_path) <= TOLERANCE
