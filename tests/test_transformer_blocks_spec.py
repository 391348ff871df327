"""The shipped blocks at validate time (no TensorFlow): expanded names and variable paths, the graph
`normalize_first` picks, a 12-layer encoder in one entry, a spec's own block replacing a shipped one,
and the positioned errors (one line each, nothing written)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specgen.cli import main
from specgen.ir.resolve import build_ir
from specgen.spec.load import load_spec_text

HEAD = """specgen: 1
name: seq
inputs:
  x: {shape: [10, 16]}
outputs:
  y: enc
layers:
"""
ENCODER = "  - {name: enc, block: transformer_encoder, with: {hidden_dim: 16, intermediate_dim: 32, num_heads: 4%s}}\n"
POST = ["self_attention_layer", "self_attention_dropout", "self_attention_residual", "self_attention_layer_norm",
        "feedforward_intermediate_dense", "feedforward_output_dense", "feedforward_dropout", "feedforward_residual",
        "feedforward_layer_norm"]
PRE = ["self_attention_layer_norm", "self_attention_layer", "self_attention_dropout", "self_attention_residual",
       "feedforward_layer_norm", "feedforward_intermediate_dense", "feedforward_output_dense", "feedforward_dropout",
       "feedforward_residual"]


def _ir(text: str) -> Any:
    return build_ir(load_spec_text(text, "seq.yaml"))


@pytest.mark.parametrize(("extra", "order"), [("", POST), (", normalize_first: true", PRE)], ids=["post", "pre"])
def test_expanded_names_follow_keras_hub(extra: str, order: list[str]) -> None:
    ir = _ir(HEAD + ENCODER % extra)
    assert [n.name for n in ir.nodes] == [f"enc/{name}" for name in order]
    attention = next(n for n in ir.nodes if n.op == "multi_head_attention")
    assert (attention.params["num_heads"], attention.params["key_dim"], attention.params["causal"]) == (4, 4, False)
    assert [v.path for v in ir.model_variables][:2] == (
        ["enc/self_attention_layer/query/kernel", "enc/self_attention_layer/query/bias"] if not extra
        else ["enc/self_attention_layer_norm/gamma", "enc/self_attention_layer_norm/beta"])
    assert ir.outputs["y"] == f"enc/{order[-1]}"


def test_decoder_is_causal_with_keras_hub_names() -> None:
    ir = _ir(HEAD + ENCODER.replace("transformer_encoder", "transformer_decoder") % "")
    assert ir.nodes[0].name == "enc/self_attention"
    assert ir.nodes[0].params["causal"] is True
    assert len(ir.model_variables) == 16


def test_decoder_with_cross_attention_reads_two_inputs() -> None:
    text = HEAD.replace("  x: {shape: [10, 16]}\n", "  x: {shape: [seq, 16]}\n  memory: {shape: [src, 12]}\n") + (
        "  - {name: enc, block: transformer_decoder_cross, inputs: [x, memory],\n"
        "     with: {hidden_dim: 16, intermediate_dim: 32, num_heads: 4, normalize_first: true}}\n")
    ir = _ir(text)
    assert [n.name for n in ir.nodes] == [f"enc/{name}" for name in (
        "self_attention_layer_norm", "self_attention", "self_attention_dropout", "self_attention_residual",
        "cross_attention_layer_norm", "cross_attention", "cross_attention_dropout", "cross_attention_residual",
        "feedforward_layer_norm", "feedforward_intermediate_dense", "feedforward_output_dense",
        "feedforward_dropout", "feedforward_residual")]
    cross = ir.nodes[5]
    assert cross.inputs == ("enc/cross_attention_layer_norm", "memory") and cross.params["causal"] is False
    assert [v.shape for v in ir.model_variables if v.path.startswith("enc/cross_attention/key/")] == [(12, 4, 4), (4, 4)]


def test_twelve_layer_encoder_in_one_entry() -> None:
    """BERT-base's shape of encoder stack in one line: 12 x 9 layers, 12 x 16 variables, <name>/<k>/... paths."""
    text = HEAD.replace("[10, 16]", "[128, 768]").replace("y: enc", "y: encoder") + (
        "  - {name: encoder, block: transformer_encoder, repeat: 12,\n"
        "     with: {hidden_dim: 768, intermediate_dim: 3072, num_heads: 12, activation: gelu}}\n")
    ir = _ir(text)
    assert len(ir.nodes) == 108 and len(ir.model_variables) == 192
    assert ir.nodes[-1].name == "encoder/12/feedforward_layer_norm"
    assert ir.model_variables[-1].path == "encoder/12/feedforward_layer_norm/beta"
    assert sum(v.size for v in ir.model_variables) == 12 * 7_087_872  # KerasHub's TransformerEncoder(768, 3072, 12)


def test_first_instance_may_take_the_other_norm() -> None:
    """normalize_first is read per instance: `first` picks the pre-norm graph for encoder/1 only."""
    text = HEAD + ("  - {name: enc, block: transformer_encoder, repeat: 2, first: {with: {normalize_first: true}},\n"
                   "     with: {hidden_dim: 16, intermediate_dim: 32, num_heads: 4}}\n")
    names = [n.name for n in _ir(text).nodes]
    assert names == [f"enc/1/{name}" for name in PRE] + [f"enc/2/{name}" for name in POST]


def test_a_spec_block_replaces_the_shipped_one() -> None:
    text = HEAD + ENCODER % "" + """blocks:
  transformer_encoder:
    params: {hidden_dim: ~, intermediate_dim: ~, num_heads: ~}
    inputs: [x]
    outputs: {y: out}
    layers:
      - {name: out, op: dense, input: x, units: $hidden_dim}
"""
    assert [n.name for n in _ir(text).nodes] == ["enc/out"]


def test_inside_a_user_block_with_params() -> None:
    """A shipped block used inside the spec's own block, its values passed as $params."""
    text = HEAD.replace("y: enc", "y: stack") + """  - {name: stack, block: tower, with: {heads: 2}}
blocks:
  tower:
    params: {heads: ~}
    inputs: [x]
    outputs: {y: enc}
    layers:
      - {name: enc, block: transformer_encoder, input: x,
         with: {hidden_dim: 16, intermediate_dim: 8, num_heads: $heads, normalize_first: true}}
"""
    ir = _ir(text)
    assert ir.nodes[0].name == "stack/enc/self_attention_layer_norm"
    assert ir.nodes[1].params["key_dim"] == 8


ERRORS = [
    ("heads_do_not_divide", ENCODER.replace("num_heads: 4", "num_heads: 3") % "",
     "8:101: error: num_heads 3 does not divide hidden_dim 16: block 'transformer_encoder' gives each head key_dim = "
     "hidden_dim / num_heads, which must be a whole number; choose num_heads that divides it (in instance 'enc')"),
    ("key_dim_set", ENCODER % ", key_dim: 4",
     "8:113: error: block 'transformer_encoder' computes key_dim as hidden_dim / num_heads; remove key_dim from "
     "'with' (in instance 'enc')"),
    ("hidden_not_int", ENCODER.replace("hidden_dim: 16", "hidden_dim: 16.5") % "",
     "8:64: error: hidden_dim: received 16.5, expected a positive integer (in instance 'enc')"),
    ("normalize_first_not_bool", ENCODER % ", normalize_first: 1",
     "8:121: error: normalize_first: received 1, expected true or false (in instance 'enc')"),
    ("hidden_is_not_the_input_size", ENCODER.replace("hidden_dim: 16", "hidden_dim: 32") % "",
     "8:64: error: hidden_dim: received 32, expected the input's 16 features: block 'transformer_encoder' adds its "
     "input [batch, 10, 16] to outputs of hidden_dim features, so hidden_dim is the input's feature size (in instance "
     "'enc' of block 'transformer_encoder' at spec.yaml:8:5)"),
    ("bad_epsilon_at_its_value", ENCODER % ", layer_norm_epsilon: 0",
     "8:124: error: epsilon: received 0, expected a value > 0.0 (in layer 'enc/self_attention_layer_norm') "
     "(in instance 'enc' of block 'transformer_encoder' at spec.yaml:8:5; $layer_norm_epsilon is 0, set at "
     "spec.yaml:8:124)"),
    ("misspelled", ENCODER.replace("transformer_encoder", "transformer_encodr") % "",
     "8:24: error: instance 'enc' uses block 'transformer_encodr', which is not defined; did you mean "
     "'transformer_encoder'? (the spec has no 'blocks' section; shipped blocks: transformer_decoder, "
     "transformer_decoder_cross, transformer_decoder_cross_normalize_first, transformer_decoder_normalize_first, "
     "transformer_encoder, transformer_encoder_normalize_first)"),
    ("missing_param", ENCODER.replace("intermediate_dim: 32, ", "") % "",
     "8:5: error: instance 'enc' must set parameter(s) 'intermediate_dim' of block 'transformer_encoder' in 'with' "
     "(they have no default)"),
]


@pytest.mark.parametrize(("layer", "expected"), [pytest.param(t, e, id=i) for i, t, e in ERRORS])
def test_positioned_errors(layer: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the notes name the file as given: 'spec.yaml'
    path = tmp_path / "spec.yaml"
    path.write_text(HEAD + layer)
    assert main(["build", "spec.yaml", "--out", "out"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"spec.yaml:{expected}", "1 error found"]
    assert list(tmp_path.iterdir()) == [path]  # nothing written
