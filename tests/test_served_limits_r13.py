"""The served contract is what runtime/lengths.py's `stamp` records (rt13 compose F1, F2, F3): every size a named
dim needs (a `take`'s index as well as a `valid` window), every bound a positional_embedding sets on a name through
a dimension derived from it, every id range; export's parity sizes, infer/serve's refusals, `specgen report` and
`specgen diff`'s `interface` section all read it.

The ONNX side is checked on the metadata `stamp` writes into a bare ModelProto and the functions `Predictor.
out_of_range` calls on it (the exported model's refusals; a real export was run by hand for each finding)."""

from __future__ import annotations

import re
from pathlib import Path

import onnx
import pytest
from cli_helpers import run_cli as run

from specgen.ir.model import ModelIR
from specgen.ir.resolve import build_ir
from specgen.review import interface
from specgen.runtime import lengths, sample_sizes
from specgen.spec.load import load_spec_text

HEAD = """\
specgen: 1
name: m
inputs:
  x: {shape: [seq, 4], dtype: float32}
INPUTS
outputs:
  logits: out
layers:
"""


def spec(*layers: str, inputs: str = "") -> str:
    return HEAD.replace("INPUTS\n", inputs) + "".join(f"  - {{{layer}}}\n" for layer in layers)


def take(index: int, before: str = "") -> str:
    first = [f"name: c, op: conv1d, input: x, filters: 4, kernel: 3, {before}"] if before else []
    return spec(*first, f"name: t, op: take, index: {index}" + ("" if before else ", input: x"),
                "name: out, op: dense, units: 2")


def positional(conv: str) -> str:
    return spec(f"name: c, op: conv1d, input: x, filters: 4, {conv}", "name: pos, op: positional_embedding, "
                "max_length: 8", "name: sum, op: add, inputs: [c, pos]", "name: g, op: global_avg_pool",
                "name: out, op: dense, units: 2")


def ir_of(text: str) -> ModelIR:
    return build_ir(load_spec_text(text))


def stamped(ir: ModelIR) -> dict[str, str]:
    model = onnx.ModelProto()
    lengths.stamp(model, ir)
    return {p.key: p.value for p in model.metadata_props}


def diff(folder: Path, old: str, new: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], str]:
    """`specgen diff OLD NEW --fail-on interface`: the exit code, the interface section's lines, stderr."""
    (folder / "old.yaml").write_text(old)
    (folder / "new.yaml").write_text(new)
    code, out, err = run(["diff", "old.yaml", "new.yaml", "--fail-on", "interface"], capsys, folder)
    return code, out.split("\n\n")[1].splitlines(), err


# F1: a take's index is a served minimum

@pytest.mark.parametrize(("index", "before", "least"), [(4, "", 5), (-3, "", 3), (0, "", 1), (-1, "", 1),
                                                         (4, "strides: 2, padding: same", 9),
                                                         (1, "padding: valid", 4)])
def test_a_take_index_is_a_minimum(index: int, before: str, least: int) -> None:
    ir = ir_of(take(index, before))
    layer, op = ("t", "take") if least > 1 else (("c", "conv1d") if before else ("t", "take"))
    assert lengths.minima(ir) == {"seq": (least, layer, op)}
    (found,) = sample_sizes.ranges(ir)
    assert found.smallest == least and min(min(s.values()) for s in sample_sizes.size_sets(ir)) == least


def test_infer_refuses_a_sequence_shorter_than_the_index(tmp_path: Path) -> None:
    metadata = stamped(ir_of(take(4)))
    assert metadata == {"specgen.min_lengths": '{"seq": [5, "t", "take"]}'}
    declared = {"x": ("batch", "seq", 4)}
    assert lengths.too_short(lengths.read_minima(metadata), declared, {"x": (1, 2, 4)}) == (
        "input 'x': received 2 steps along 'seq' (shape [1, 2, 4]), expected at least 5: layer 't' (take) needs at "
        "least 5")
    assert lengths.too_short(lengths.read_minima(metadata), declared, {"x": (1, 5, 4)}) is None


def test_report_and_diff_show_a_take_minimum(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "new.yaml").write_text(take(4))
    code, out, _ = run(["report", "new.yaml"], capsys, tmp_path)
    assert code == 0 and re.search(r"Served sizes: [^.]*\.", out)[0] == (  # type: ignore[index]
        "Served sizes: seq >= 5 (layer 't', take); a shorter input is refused.")
    code, section, err = diff(tmp_path, take(0), take(4), capsys)
    assert code == 1
    assert section[3] == "  changed  input x  seq >= 1  seq >= 5"
    assert err.splitlines() == ["specgen diff: breaks interface: input 'x': NEW needs seq >= 5 (layer 't' (take) "
                                "needs at least 5); OLD served seq >= 1: clients that send a shorter 'seq' fail"]


# F2: a bound on a derived time axis bounds the name it is derived from

@pytest.mark.parametrize(("conv", "largest", "dim"), [
    ("kernel: 3, strides: 3, padding: same", 24, "ceil(seq/3)"),
    ("kernel: 3, strides: 2, padding: same", 16, "ceil(seq/2)"),
    ("kernel: 3, padding: valid", 10, "seq-2"),
    ("kernel: 3, strides: 2, padding: valid", 18, "ceil((seq-2)/2)"),
])
def test_a_derived_bound_is_inverted(conv: str, largest: int, dim: str) -> None:
    ir = ir_of(positional(conv))
    assert lengths.bounds(ir) == {"seq": (largest, "pos", dim, 8)}
    assert sample_sizes.evaluate(dim, {"seq": largest}) == 8 < sample_sizes.evaluate(dim, {"seq": largest + 1})
    assert max(max(s.values()) for s in sample_sizes.size_sets(ir)) <= largest  # export's parity sizes


def test_infer_refuses_past_a_derived_bound_in_its_own_line() -> None:
    metadata = stamped(ir_of(positional("kernel: 3, strides: 2, padding: same")))
    assert metadata["specgen.max_lengths"] == '{"seq": [16, "pos", "ceil(seq/2)", 8]}'
    declared = {"x": ("batch", "seq", 4)}
    assert lengths.violation(lengths.read(metadata), declared, {"x": (1, 20, 4)}) == (
        "input 'x': received 20 steps along 'seq' (shape [1, 20, 4]), expected at most 16: layer 'pos' "
        "(positional_embedding) takes at most 8 steps of ceil(seq/2)")
    assert lengths.violation(lengths.read(metadata), declared, {"x": (1, 16, 4)}) is None


def test_report_shows_a_derived_largest_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The report's Served sizes say the largest too (the report said only smallest sizes)."""
    (tmp_path / "p.yaml").write_text(positional("kernel: 3, strides: 3, padding: same"))
    code, out, _ = run(["report", "p.yaml"], capsys, tmp_path)
    assert code == 0 and out.split(" Served sizes: ")[1].split("\n")[0] == (
        "seq <= 24 (layer 'pos' (positional_embedding) takes at most 8 steps of ceil(seq/3)); a longer input is "
        "refused.")


def test_a_plain_bound_is_stamped_as_before() -> None:
    ir = ir_of(positional("kernel: 3, padding: same"))
    assert stamped(ir)["specgen.max_lengths"] == '{"seq": [8, "pos"]}'
    assert lengths.limit_text(lengths.bounds(ir), "seq") == (
        "expected at most 8: the max_length of layer 'pos' (positional_embedding)")


def test_diff_compares_a_derived_bound(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = positional("kernel: 3, strides: 3, padding: same"), positional("kernel: 3, strides: 2, padding: same")
    code, section, err = diff(tmp_path, old, new, capsys)
    assert code == 1
    assert section[3] == "  changed  input x  1 <= seq <= 24  1 <= seq <= 16"
    assert err.splitlines() == [
        "specgen diff: breaks interface: input 'x': NEW takes seq <= 16 (layer 'pos' (positional_embedding) takes at "
        "most 8 steps of ceil(seq/2)); OLD served 1 <= seq <= 24: clients that send a longer 'seq' fail"]
    code, section, err = diff(tmp_path, new, old, capsys)
    assert (code, section[3], err) == (0, "  compatible  input x  1 <= seq <= 16  1 <= seq <= 24", "")


@pytest.mark.parametrize(("dim", "monotone"), [("seq", True), ("ceil((seq-2)/2)+1", True), ("2*seq", True),
                                                ("t+s", True), ("t-s", False), ("-seq", False), ("3-seq", False)])
def test_only_a_non_decreasing_expression_is_inverted(dim: str, monotone: bool) -> None:
    assert sample_sizes.monotone(dim) is monotone


def test_a_bound_that_cannot_be_inverted_is_said_not_compared(monkeypatch: pytest.MonkeyPatch) -> None:
    # No op writes a bound over two names today; the section must still not call such a change unchanged.
    ir = ir_of(positional("kernel: 3, padding: same"))
    sides = iter([[sample_sizes.Constraint("t+s", 8, True, "pos")], [sample_sizes.Constraint("t+s", 6, True, "pos")]])
    monkeypatch.setattr(sample_sizes, "uncompared", lambda _: next(sides))
    section = interface.interface(ir, ir)
    assert [(c.what, c.which, c.old, c.new) for c in section.changes] == [
        ("not compared", "layer pos", "t+s <= 8", "t+s <= 6")]
    assert section.breaks == ["layer 'pos': the bound t+s <= 6 is over several names and is not compared: a break "
                              "until shown otherwise"]


# F3: id ranges are part of the interface

GATHER = """\
specgen: 1
name: g
inputs:
  x: {shape: [8, 1], dtype: float32}
  a: {shape: [1, 1], dtype: int32}
outputs:
  logits: out
layers:
  - {name: p, op: max_pool1d, input: x, size: SIZE}
  - {name: gat, op: gather, inputs: [p, a], axis: 1}
  - {name: f, op: flatten}
  - {name: out, op: dense, units: 2}
"""

EMBEDDING = """\
specgen: 1
name: e
inputs:
  ids: {shape: [4], dtype: int32}
outputs:
  logits: out
layers:
  - {name: emb, op: embedding, input: ids, vocab_size: VOCAB, dim: 3}
  - {name: f, op: flatten}
  - {name: out, op: dense, units: 2}
"""


def test_a_narrowed_id_range_breaks_the_interface(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, section, err = diff(tmp_path, GATHER.replace("SIZE", "2"), GATHER.replace("SIZE", "4"), capsys)
    assert code == 1
    why = ("input 'a': NEW takes ids < 2 (layer 'gat' (gather) takes ids below 2); OLD served ids < 4: clients that "
           "send an id of 2 or more fail")
    assert section == ["interface: 1 change(s)", "  change   what     old      new",
                       "  -------  -------  -------  -------", "  changed  input a  ids < 4  ids < 2", f"  breaks: {why}"]
    assert err.splitlines() == [f"specgen diff: breaks interface: {why}"]
    assert "\n".join(section) in Path(__file__).parents[1].joinpath("docs/review.md").read_text()  # its example


def test_a_widened_id_range_is_compatible(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, section, err = diff(tmp_path, GATHER.replace("SIZE", "4"), GATHER.replace("SIZE", "2"), capsys)
    assert (code, section[3], err) == (0, "  compatible  input a  ids < 2  ids < 4", "")


def test_a_lowered_vocab_size_fails_the_serving_gate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, section, err = diff(tmp_path, EMBEDDING.replace("VOCAB", "20"), EMBEDDING.replace("VOCAB", "10"), capsys)
    assert code == 1 and section[3] == "  changed  input ids  ids < 20  ids < 10"
    assert err.splitlines() == [
        "specgen diff: breaks interface: input 'ids': NEW takes ids < 10 (layer 'emb' (embedding) takes ids below "
        "10); OLD served ids < 20: clients that send an id of 10 or more fail"]
