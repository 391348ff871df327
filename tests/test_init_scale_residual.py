"""The init_scale lint on residual branches and on block instances (docs/spec.md#lints).

- A residual branch is judged by the `add` it goes into, which is what the next layer reads: the shipped
  `transformer_encoder` at its own (KerasHub) defaults, whose attention starts at 0.0636 of the input's std beside
  a skip at 1, is quiet under `validate --strict`, while `report` still shows the branch's own figure.
- A warning that several instances of a block repeat is one line naming the block's layer and the instances;
  separate warnings of instances sort in instance order ('u2' before 'u10').
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specgen.cli import main
from specgen.ir import lints
from specgen.ir.resolve import build_ir
from specgen.ir.scales import propagate
from specgen.spec.load import load_spec_text

HEAD = "specgen: 1\nname: res\ninputs:\n  x: {shape: [16]}\noutputs:\n  y: last\n"


def residual(stddev: float, extra: str = "", outputs: str = "") -> str:
    """x + dropout(dense(x)), then a dense head; the branch's kernel is N(0, stddev) over fan-in 16."""
    return (HEAD + outputs + "layers:\n"  # `outputs`: more entries of the outputs mapping
            f"  - {{name: branch, op: dense, input: x, units: 16, kernel_init: {{kind: random_normal, stddev: {stddev}}}}}\n"
            "  - {name: drop, op: dropout, rate: 0.1}\n"
            "  - {name: sum, op: add, inputs: [x, drop]}\n" + extra +
            "  - {name: last, op: dense, input: sum, units: 4}\n")


def flagged(text: str) -> list[str]:
    return [node.name for node, _ in lints.init_scale_findings(build_ir(load_spec_text(text)))]


def test_a_small_branch_beside_its_skip_is_judged_by_the_sum() -> None:
    text = residual(0.001)  # branch std 0.004, the sum's about 1
    found = propagate(build_ir(load_spec_text(text)))
    assert found["branch"].std == pytest.approx(0.004, rel=1e-3)  # the figure report shows is the branch's own
    assert found["sum"].std == pytest.approx(1.0, rel=1e-3)
    assert flagged(text) == []


def test_a_branch_whose_sum_leaves_the_band_is_flagged_itself() -> None:
    assert flagged(residual(5.0)) == ["branch"]  # 20x: the sum is 20x too; its initializer is the one to change


def test_a_branch_read_by_another_layer_or_an_output_is_judged_alone() -> None:
    assert flagged(residual(0.001, "  - {name: side, op: dense, input: branch, units: 4}\n")) == ["branch"]
    assert flagged(residual(0.001, outputs="  z: branch\n")) == ["branch"]


BERT = ("specgen: 1\nname: text_encoder\ninputs:\n  x: {shape: [128, 768]}\noutputs:\n  y: encoder\nlayers:\n"
        "  - {name: encoder, block: transformer_encoder, repeat: 12,\n"
        "     with: {hidden_dim: 768, intermediate_dim: 3072, num_heads: 12, activation: gelu}}\n")


@pytest.mark.parametrize("first", ["false", "true"])
def test_the_shipped_encoder_at_its_defaults_passes_strict(
        first: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "text_encoder.yaml"
    path.write_text(BERT.replace("activation: gelu", f"activation: gelu, normalize_first: {first}"))
    assert main(["validate", "--strict", str(path)]) == 0
    assert capsys.readouterr().err == ""
    scales = propagate(build_ir(load_spec_text(path.read_text())))
    assert scales["encoder/12/self_attention_layer"].std == pytest.approx(0.0636, abs=5e-5)  # Keras' glorot


BLOCK = """specgen: 1
name: blk
inputs:
  x: {shape: [8]}
outputs:
  y: stage
blocks:
  unit:
    params: {sd: 5.0}
    inputs: [x]
    outputs: {out: norm}
    layers:
      - {name: fc, op: dense, input: x, units: 8, kernel_init: {kind: random_normal, stddev: $sd}}
      - {name: act, op: relu}
      - {name: norm, op: layer_norm}
layers:
"""
WORDS = ("(dense): at initialization the activation std grows to 14.1x the input's (outside [0.1, 10]; unit-variance "
         "inputs assumed, see docs/spec.md#lints); kernel_init random_normal (mean 0, stddev 5) over fan-in 8 scales "
         "the second moment by 200; he_normal for relu keeps it near 1")


def validate(layers: str, capsys: pytest.CaptureFixture[str], last: str = "stage") -> list[str]:
    """validate's warning lines for BLOCK with `layers` (output: `last`), written as blk.yaml in the working folder."""
    Path("blk.yaml").write_text(BLOCK.replace("y: stage", f"y: {last}") + layers)
    assert main(["validate", "blk.yaml"]) == 0
    return capsys.readouterr().err.splitlines()


def test_a_warning_every_instance_repeats_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert validate("  - {name: stage, block: unit, repeat: 12}\n", capsys) == [
        f"blk.yaml:13:64: warning: layer 'stage/1/fc' {WORDS} (in instance 'stage/1' of block 'unit' at blk.yaml:17:5); "
        "the same in all 12 instances of block 'unit' (its layer 'fc'): 'stage/1', 'stage/2', 'stage/3' and 9 more",
        "1 warning (--strict makes them errors)"]
    first = "  - {name: stage, block: unit, repeat: 12, first: {with: {sd: 0.5}}}\n"  # he-like: stage/1 is quiet
    assert validate(first, capsys) == [
        f"blk.yaml:13:64: warning: layer 'stage/2/fc' {WORDS} (in instance 'stage/2' of block 'unit' at blk.yaml:17:5); "
        "the same in 11 of the 12 instances of block 'unit' (its layer 'fc'): 'stage/2', 'stage/3', 'stage/4' "
        "and 8 more",
        "1 warning (--strict makes them errors)"]


def test_warnings_of_instances_sort_in_instance_order(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    lines = validate("  - {name: u2, block: unit}\n  - {name: u10, block: unit, with: {sd: 7.0}}\n", capsys, "u10")
    assert [line.split(" (dense)")[0] for line in lines] == [
        "blk.yaml:13:64: warning: layer 'u2/fc'", "blk.yaml:13:64: warning: layer 'u10/fc'",
        "2 warnings (--strict makes them errors)"]
    same = validate("  - {name: u2, block: unit}\n  - {name: u10, block: unit}\n", capsys, "u10")
    assert same[0].endswith("; the same in both instances of block 'unit' (its layer 'fc'): 'u2', 'u10'")
    assert len(same) == 2
