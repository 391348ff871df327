"""Masks outside TensorFlow: what `specgen validate` decides (ir/masks.py: which layers take the mask, the
positioned refusals with their exact text) and the ONNX graph against the generated TensorFlow module on ids
padded at the end, at the start, with holes and entirely, at two lengths through one graph (the recurrent
nodes' sequence_lens come from the in-graph reordering, so no padding layout gives a wrong answer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from specgen.cli import main
from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.spec.load import load_spec_text

TOLERANCE = 1e-5  # max |ORT - TF|: two float32 evaluations of one graph, different summation orders
VOCAB = 13


def spec(layers: list[dict[str, Any]], steps: int | str = "seq", output: str | None = None,
         loss: bool = False, shape: list[Any] | None = None, opset: int = 21) -> str:
    first = {"name": "emb", "op": "embedding", "input": "ids", "vocab_size": VOCAB, "dim": 6, "mask_zero": True}
    document: dict[str, Any] = {"specgen": 1, "name": "masked", "inputs": {"ids": {"shape": shape or [steps], "dtype": "int32"}},
                                "outputs": {"y": output or layers[-1]["name"]}, "layers": [first, *layers]}
    if opset != 21:
        document["export"] = {"onnx": {"opset": opset}}
    if loss:
        document["loss"] = {"kind": "sparse_softmax_cross_entropy", "logits": "y", "labels": "label"}
    return yaml.safe_dump(document, sort_keys=False)


def validate(text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    path = tmp_path / "masked.yaml"
    path.write_text(text)
    code = main(["validate", str(path)])
    return code, capsys.readouterr().err.strip()


def test_consumers_record_the_ids_their_mask_comes_from() -> None:
    ir = build_ir(load_spec_text(spec([
        {"name": "fc", "op": "dense", "units": 6, "activation": "relu"},
        {"name": "r", "op": "lstm", "units": 4, "return_sequences": True},
        {"name": "pool", "op": "global_avg_pool"},
        {"name": "last", "op": "gru", "units": 3, "input": "fc"},
        {"name": "head", "op": "dense", "units": 2, "input": "last"}]), "masked.yaml"))
    assert {n.name: n.mask for n in ir.nodes} == {"emb": (), "fc": (), "r": ("ids",), "pool": ("ids",),
                                                   "last": ("ids",), "head": ()}


def test_report_lists_the_layers_that_take_the_mask() -> None:
    from specgen.report.masks import masks_table

    ir = build_ir(load_spec_text(spec([{"name": "r", "op": "lstm", "units": 4, "return_sequences": True},
                                       {"name": "pool", "op": "global_avg_pool"}]), "masked.yaml"))
    assert masks_table(ir) == (
        "layer  op               mask: a step is real where any of these ids is non-zero\n"
        "-----  ---------------  -------------------------------------------------------\n"
        "r      lstm             ids\n"
        "pool   global_avg_pool  ids\n"
        "Padded steps leave a recurrent state unchanged and are left out of means and attention, as in Keras "
        "(docs/spec.md#masks).")
    assert masks_table(build_ir(load_spec_text(spec([], output="emb").replace("true", "false"), "m.yaml"))) is None


def test_merge_of_two_masks_is_their_union_and_of_a_masked_and_unmasked_none() -> None:
    ir = build_ir(load_spec_text(yaml.safe_dump({
        "specgen": 1, "name": "two", "outputs": {"y": "pool", "z": "pool2"},
        "inputs": {"a": {"shape": [5], "dtype": "int32"}, "b": {"shape": [5], "dtype": "int32"},
                   "f": {"shape": [5, 4]}},
        "layers": [{"name": "ea", "op": "embedding", "input": "a", "vocab_size": 5, "dim": 4, "mask_zero": True},
                   {"name": "eb", "op": "embedding", "input": "b", "vocab_size": 5, "dim": 4, "mask_zero": True},
                   {"name": "both", "op": "add", "inputs": ["eb", "ea"]},
                   {"name": "pool", "op": "global_avg_pool"},
                   {"name": "mixed", "op": "concat", "inputs": ["ea", "f"]},
                   {"name": "pool2", "op": "global_avg_pool"}]}), "two.yaml"))
    assert ir.node("pool").mask == ("a", "b")
    assert ir.node("pool2").mask == ()  # Keras: a merge with an unmasked input has no mask


def test_positional_embedding_drops_the_mask_as_keras_does() -> None:
    """KerasHub's PositionEmbedding does not support masking: no mask after it, so none after the add either."""
    ir = build_ir(load_spec_text(spec([{"name": "pos", "op": "positional_embedding", "max_length": 16},
                                       {"name": "sum", "op": "add", "inputs": ["emb", "pos"]},
                                       {"name": "r", "op": "lstm", "units": 3},
                                       {"name": "r2", "op": "gru", "units": 3, "input": "emb"}], output="r"),
                                 "masked.yaml"))
    assert (ir.node("r").mask, ir.node("r2").mask) == ((), ("ids",))


FIX = ("set mask_zero: false on that embedding, or end the time axis before this layer (a recurrent layer "
       "with return_sequences: false, or global_avg_pool)")


@pytest.mark.parametrize(("layer", "line", "why"), [
    ({"name": "c", "op": "conv1d", "filters": 3, "kernel": 2, "input": "emb"}, "21:10",
     "Keras' Conv1D drops the mask (with a warning) and its windows would mix padded steps into real ones"),
    ({"name": "c", "op": "global_max_pool", "input": "emb"}, "19:10",
     "Keras' GlobalMaxPooling1D ignores the mask, so padded steps would enter the max"),
    ({"name": "c", "op": "flatten", "input": "emb"}, "19:10",
     "it removes the time axis the mask marks (Keras drops the mask there)"),
    ({"name": "c", "op": "batch_norm", "input": "emb"}, "19:10",
     "Keras' BatchNormalization takes its batch statistics over the unmasked steps only; specgen's batch_norm "
     "takes them over every step"),
    ({"name": "c", "op": "softmax", "input": "emb"}, "19:10",
     "Keras' Softmax layer applies the [batch, time] mask to its own axis, not to the steps"),
], ids=["conv1d", "global_max_pool", "flatten", "batch_norm", "softmax"])
def test_an_op_that_cannot_take_the_mask_is_refused(layer: dict[str, Any], line: str, why: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, err = validate(spec([layer], steps=8), tmp_path, capsys)
    assert code == 1
    assert err.splitlines()[0] == (
        f"{tmp_path / 'masked.yaml'}:{line}: error: layer 'c' ({layer['op']}): its input 'emb' carries the padding "
        f"mask of embedding 'emb' (mask_zero: true), and {layer['op']} cannot take a mask: {why}; {FIX}")


def test_the_refusal_names_the_layer_the_mask_passed_through(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, err = validate(spec([{"name": "fc", "op": "dense", "units": 4},
                               {"name": "r", "op": "simple_rnn", "units": 4, "return_sequences": True},
                               {"name": "pool", "op": "max_pool1d", "size": 2}]), tmp_path, capsys)
    assert code == 1
    assert err.splitlines()[0] == (
        f"{tmp_path / 'masked.yaml'}:24:3: error: layer 'pool' (max_pool1d): its input 'r' carries the padding "
        "mask of embedding 'emb' (mask_zero: true), and max_pool1d cannot take a mask: Keras' MaxPooling1D drops "
        f"the mask (with a warning) and its windows would mix padded steps into real ones; {FIX}")


def test_concat_along_time_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = validate(spec([{"name": "c", "op": "concat", "inputs": ["emb", "emb"], "axis": 1}], steps=8),
                         tmp_path, capsys)
    assert code == 1
    assert err.splitlines()[0] == (
        f"{tmp_path / 'masked.yaml'}:20:3: error: layer 'c' (concat): its input 'emb' carries the padding mask of "
        "embedding 'emb' (mask_zero: true), and concat cannot take a mask: concat along axis 1 joins the time axis "
        "the mask marks; Keras then concatenates the masks, which specgen does not (concatenate along the last "
        f"axis); {FIX}")


def test_mask_zero_needs_ids_of_batch_and_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = validate(spec([], output="emb", shape=["seq", 3]), tmp_path, capsys)
    assert code == 1
    assert err.splitlines()[0] == (
        f"{tmp_path / 'masked.yaml'}:17:14: error: layer 'emb' (embedding): mask_zero needs ids of shape "
        "[batch, time]; received [batch, seq, 3]")


def test_a_trained_output_that_carries_the_mask_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Keras weights the loss by the output's mask (per-step losses of padded steps count 0); specgen's losses do not."""
    layers = [{"name": "r", "op": "lstm", "units": 4, "return_sequences": True}, {"name": "out", "op": "dense", "units": 3}]
    code, err = validate(spec(layers, loss=True), tmp_path, capsys)
    assert code == 1
    assert err.splitlines()[0] == (
        f"{tmp_path / 'masked.yaml'}:9:6: error: output 'y' reads layer 'out', which carries the padding mask of "
        "embedding 'emb' (mask_zero: true); Keras weights the loss by that mask and specgen's losses do not; "
        f"{FIX}")
    code, _ = validate(spec(layers), tmp_path, capsys)  # without a loss (inference only) the output is fine
    assert code == 0


def check_onnx(text: str, tmp_path: Path, lengths: tuple[int, ...], empty_row: bool = True) -> float:
    """Largest |ORT - TF| over padding layouts and `lengths`, one ONNX graph and one TF module."""
    from specgen.runtime import parity

    ir = build_ir(load_spec_text(text, "masked.yaml"))
    files = render_files(ir)
    (tmp_path / "model.py").write_bytes(files["model.py"])
    model = getattr(parity.load_generated(tmp_path / "model.py"), ir.class_name)(seed=0)
    rng = np.random.default_rng(0)
    values = parity.random_weights(ir, rng)
    parity.assign(model, values)
    worst = 0.0
    for steps in lengths:
        ids = rng.integers(1, VOCAB, (6, steps)).astype(np.int32)
        ids[0, steps - 3:] = 0  # trailing
        ids[1, :2] = 0  # leading
        ids[2, 1::2] = 0  # holes
        ids[3, [0, steps - 1]] = 0  # both ends
        ids[5] = 0 if empty_row else ids[5]  # nothing real (a masked mean is then 0/0 on both sides)
        expected = parity.run_tf(model, {"ids": ids})
        actual = parity.run_onnx(files["model.onnx"], ir, values, {"ids": ids})
        worst = max(worst, parity.max_abs_diff(expected, actual))
    return worst


@pytest.mark.parametrize(("return_sequences", "go_backwards"), [(False, False), (False, True), (True, False),
                                                                 (True, True)])
@pytest.mark.parametrize("op", ["lstm", "gru", "simple_rnn"])
def test_recurrent_onnx_matches_tensorflow_whatever_the_padding(op: str, return_sequences: bool, go_backwards: bool,
                                                                tmp_path: Path) -> None:
    layer = {"name": "r", "op": op, "units": 4, "return_sequences": return_sequences, "go_backwards": go_backwards}
    assert check_onnx(spec([layer]), tmp_path, (7, 11)) <= TOLERANCE


def test_the_lowest_pinned_opset_runs_the_masked_nodes(tmp_path: Path) -> None:
    """CumSum, TopK with a k input, Range and GatherElements are all older than opset 18, the lowest specgen pins."""
    layers = [{"name": "r", "op": "lstm", "units": 4, "return_sequences": True},
              {"name": "att", "op": "multi_head_attention", "num_heads": 2, "key_dim": 2, "causal": True},
              {"name": "pool", "op": "global_avg_pool"}]
    assert check_onnx(spec(layers, steps=8, opset=18), tmp_path, (8,), empty_row=False) <= TOLERANCE


def test_recurrent_without_bias_gets_an_empty_bias_input(tmp_path: Path) -> None:
    layer = {"name": "r", "op": "gru", "units": 4, "use_bias": False, "reset_after": False, "return_sequences": True}
    assert check_onnx(spec([layer]), tmp_path, (5, 9)) <= TOLERANCE


def test_masked_stack_onnx_matches_tensorflow(tmp_path: Path) -> None:
    """Attention (causal, with the padding mask), a residual add, an LSTM over sequences and the masked mean;
    every row has a real step (an all-padding row's mean is 0/0 on both sides)."""
    text = spec([{"name": "att", "op": "multi_head_attention", "num_heads": 2, "key_dim": 3, "causal": True},
                 {"name": "sum", "op": "add", "inputs": ["emb", "att"]},
                 {"name": "r", "op": "lstm", "units": 5, "return_sequences": True},
                 {"name": "pool", "op": "global_avg_pool", "keepdims": True}], steps=9)
    from specgen.runtime import parity

    ir = build_ir(load_spec_text(text, "masked.yaml"))
    files = render_files(ir)
    (tmp_path / "model.py").write_bytes(files["model.py"])
    model = getattr(parity.load_generated(tmp_path / "model.py"), ir.class_name)(seed=0)
    values = parity.random_weights(ir, np.random.default_rng(1))
    parity.assign(model, values)
    ids = np.array([[3, 4, 5, 6, 0, 0, 0, 0, 0], [0, 0, 7, 8, 9, 1, 2, 3, 4], [5, 0, 6, 0, 7, 0, 8, 0, 9]], np.int32)
    expected = parity.run_tf(model, {"ids": ids})
    actual = parity.run_onnx(files["model.onnx"], ir, values, {"ids": ids})
    assert parity.max_abs_diff(expected, actual) <= TOLERANCE


@pytest.mark.parametrize("opset", [21, 23], ids=["plain", "fused"])
@pytest.mark.parametrize("dropout", [0.0, 0.3], ids=["uniform_rows", "zero_rows"])
def test_attention_padding_onnx_matches_tensorflow(opset: int, dropout: float, tmp_path: Path) -> None:
    """Cross-attention with both masks and self-attention with the causal one, in the plain nodes (21) and the
    opset-23 Attention node (its is_causal turned into a built mask beside the padding one)."""
    from specgen.runtime import parity

    document = {"specgen": 1, "name": "att", "outputs": {"y": "cross", "z": "self"},
                "inputs": {"q": {"shape": [7], "dtype": "int32"}, "v": {"shape": [5], "dtype": "int32"}},
                "layers": [{"name": "eq", "op": "embedding", "input": "q", "vocab_size": VOCAB, "dim": 4,
                            "mask_zero": True},
                           {"name": "ev", "op": "embedding", "input": "v", "vocab_size": VOCAB, "dim": 4,
                            "mask_zero": True},
                           {"name": "cross", "op": "multi_head_attention", "inputs": ["eq", "ev"], "num_heads": 2,
                            "key_dim": 2, "dropout": dropout},
                           {"name": "self", "op": "multi_head_attention", "input": "eq", "num_heads": 2,
                            "key_dim": 2, "causal": True, "dropout": dropout}],
                "export": {"onnx": {"opset": opset}}}
    ir = build_ir(load_spec_text(yaml.safe_dump(document, sort_keys=False), "att.yaml"))
    files = render_files(ir)
    (tmp_path / "model.py").write_bytes(files["model.py"])
    model = getattr(parity.load_generated(tmp_path / "model.py"), ir.class_name)(seed=0)
    values = parity.random_weights(ir, np.random.default_rng(2))
    parity.assign(model, values)
    feeds = {"q": np.array([[1, 2, 3, 0, 0, 0, 0], [0, 0, 4, 5, 6, 7, 8], [9, 0, 1, 0, 2, 0, 3],
                            [0, 0, 0, 0, 0, 0, 0]], np.int32),
             "v": np.array([[1, 2, 0, 0, 0], [0, 3, 4, 5, 6], [0, 0, 0, 0, 0], [7, 0, 8, 0, 9]], np.int32)}
    expected = parity.run_tf(model, feeds)
    actual = parity.run_onnx(files["model.onnx"], ir, values, feeds)
    assert parity.max_abs_diff(expected, actual) <= TOLERANCE


@pytest.mark.parametrize("merge_mode", ["concat", "sum", "mul", "ave"])
@pytest.mark.parametrize("return_sequences", [False, True], ids=["last", "seq"])
def test_bidirectional_onnx_matches_tensorflow_whatever_the_padding(merge_mode: str, return_sequences: bool,
                                                                    tmp_path: Path) -> None:
    layer = {"name": "b", "op": "bidirectional", "merge_mode": merge_mode,
             "layer": {"op": "gru", "units": 3, "return_sequences": return_sequences}}
    assert check_onnx(spec([layer]), tmp_path, (7, 10)) <= TOLERANCE
