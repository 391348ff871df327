"""Blocks: expansion into flat layers, names, parameters, and diagnostics at the block line and the instance line."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from specgen.cli import main
from specgen.diagnostics import SpecError
from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.spec.expand import MAX_LAYERS
from specgen.spec.load import load_spec_text

HEAD = """\
specgen: 1
name: blocky
inputs:
  image: {shape: [16, 16, 3]}
outputs:
  logits: head
"""

UNIT = """\
blocks:
  unit:
    params: {filters: ~, strides: 1}
    inputs: [x]
    outputs: {out: relu}
    layers:
      - {name: conv, op: conv2d, filters: $filters, kernel: 3, strides: $strides, padding: same}
      - {name: bn, op: batch_norm}
      - {name: relu, op: relu}
"""

STACK = HEAD + UNIT + """\
layers:
  - {name: stem, op: conv2d, filters: 8, kernel: 3, padding: same}
  - {name: stage1, block: unit, repeat: 3, with: {filters: 8}, first: {with: {strides: 2}}}
  - {name: pool, op: global_avg_pool}
  - {name: head, op: dense, units: 10}
collections:
  stage: ["stage1/*"]
  second: ["stage1/2/*"]
frozen: [second]
"""

# The same model written out by hand: expansion must give exactly these layers.
FLAT = HEAD + """\
layers:
  - {name: stem, op: conv2d, filters: 8, kernel: 3, padding: same}
  - {name: stage1/1/conv, op: conv2d, input: stem, filters: 8, kernel: 3, strides: 2, padding: same}
  - {name: stage1/1/bn, op: batch_norm}
  - {name: stage1/1/relu, op: relu}
  - {name: stage1/2/conv, op: conv2d, filters: 8, kernel: 3, padding: same}
  - {name: stage1/2/bn, op: batch_norm}
  - {name: stage1/2/relu, op: relu}
  - {name: stage1/3/conv, op: conv2d, filters: 8, kernel: 3, padding: same}
  - {name: stage1/3/bn, op: batch_norm}
  - {name: stage1/3/relu, op: relu}
  - {name: pool, op: global_avg_pool}
  - {name: head, op: dense, units: 10}
collections:
  stage: ["stage1/*"]
  second: ["stage1/2/*"]
frozen: [second]
"""


def errors(text: str) -> list[str]:
    with pytest.raises(SpecError) as caught:
        build_ir(load_spec_text(text, "s.yaml"))
    return [str(d) for d in caught.value.diagnostics]


def line_of(text: str, needle: str, nth: int = 0) -> int:
    """1-based line of the nth line containing `needle`."""
    return [i for i, line in enumerate(text.splitlines(), 1) if needle in line][nth]


def pos(text: str, needle: str, nth: int = 0) -> str:
    """`s.yaml:line:col` of the nth occurrence of `needle`; a '|' in it marks the column (else its start)."""
    before, _, after = needle.rpartition("|")
    at = -1
    for _ in range(nth + 1):
        at = text.index(before + after, at + 1)
    at += len(before)
    line = text.count("\n", 0, at) + 1
    return f"s.yaml:{line}:{at - (text.rfind(chr(10), 0, at) + 1) + 1}"


def test_repeat_expands_to_the_hand_written_layers() -> None:
    blocks, flat = build_ir(load_spec_text(STACK, "s.yaml")), build_ir(load_spec_text(FLAT, "s.yaml"))
    assert [n.name for n in blocks.nodes] == [n.name for n in flat.nodes]
    assert blocks.nodes == flat.nodes  # same shapes, parameters (strides 2 only in the first), variables
    assert blocks.variables == flat.variables and blocks.collections == flat.collections
    assert render_files(blocks) == render_files(flat)  # generated code is flat: the same files
    assert blocks.collections["second"] == ("stage1/2/conv/kernel", "stage1/2/conv/bias", "stage1/2/bn/gamma",
                                            "stage1/2/bn/beta", "stage1/2/bn/moving_mean", "stage1/2/bn/moving_variance")
    assert blocks.node("stage1/1/conv").shape == (None, 8, 8, 8)


def test_a_spec_without_blocks_is_not_expanded() -> None:
    assert load_spec_text(FLAT, "s.yaml").origins is None
    assert load_spec_text(STACK, "s.yaml").origins is not None


NESTED = HEAD + """\
blocks:
  conv_bn:
    params: {filters: ~, kernel: 1}
    inputs: [x]
    outputs: {out: bn}
    layers:
      - {name: conv, op: conv2d, filters: $filters, kernel: $kernel, padding: same, kernel_init: $init}
      - {name: bn, op: batch_norm}
    params: {filters: ~, kernel: 1, init: {kind: he_normal}}
  pair:
    params: {width: ~}
    inputs: [a, b]
    outputs: {left: l, right: r, both: sum}
    layers:
      - {name: l, block: conv_bn, input: a, with: {filters: $width, kernel: 3}}
      - {name: r, block: conv_bn, input: b, with: {filters: $width}}
      - {name: sum, op: add, inputs: [l, r]}
layers:
  - {name: stem, op: conv2d, filters: 4, kernel: 1}
  - {name: p, block: pair, inputs: [stem, image], with: {width: 6}}
  - {name: cat, op: concat, inputs: [p/left, p/right, p/both, p/l]}
  - {name: pool, op: global_avg_pool}
  - {name: head, op: dense, units: 10}
"""


def test_nested_blocks_several_inputs_and_outputs() -> None:
    ir = build_ir(load_spec_text(NESTED.replace("    params: {filters: ~, kernel: 1}\n", ""), "s.yaml"))
    names = [n.name for n in ir.nodes]
    assert names[:6] == ["stem", "p/l/conv", "p/l/bn", "p/r/conv", "p/r/bn", "p/sum"]
    assert ir.node("p/l/conv").inputs == ("stem",) and ir.node("p/r/conv").inputs == ("image",)
    assert ir.node("cat").inputs == ("p/l/bn", "p/r/bn", "p/sum", "p/l/bn")  # outputs and instances by name
    assert ir.node("p/l/conv").params["kernel"] != ir.node("p/r/conv").params["kernel"]  # default 1 vs 3
    assert ir.node("p/r/conv").variables["kernel"].init.kind == "he_normal"  # a mapping as a whole value
    assert "p/l/conv/kernel" in ir.collections["model"]


def test_the_duplicate_params_key_is_a_yaml_error() -> None:
    assert errors(NESTED)[0].startswith(f"s.yaml:{line_of(NESTED, 'params: {filters: ~, kernel: 1, init')}:5: error: "
                                        "duplicate key 'params'")


def test_outputs_and_later_layers_read_instances() -> None:
    text = STACK.replace("logits: head", "logits: head\n  features: stage1").replace(
        "  - {name: pool, op: global_avg_pool}", "  - {name: pool, op: global_avg_pool, input: stage1/2}")
    ir = build_ir(load_spec_text(text, "s.yaml"))
    assert ir.outputs["features"] == "stage1/3/relu"  # a repeat is its last instance
    assert ir.node("pool").inputs == ("stage1/2/relu",)
    assert ir.node("stage1/3/conv").inputs == ("stage1/2/relu",)  # a left-out input: the entry before
    assert ir.node("head").inputs == ("pool",)


def test_report_prints_the_expanded_layers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "s.yaml").write_text(STACK)
    assert main(["report", str(tmp_path / "s.yaml")]) == 0
    out = capsys.readouterr().out
    assert "12 layers" in out
    for name in ("stage1/1/conv", "stage1/2/bn", "stage1/3/relu"):
        assert re.search(rf"^{re.escape(name)}\s", out, re.M), name
    assert re.search(r"^stage\s+18\s", out, re.M)  # 'stage1/*' over the expanded paths: 6 variables x 3 instances


# --- mistakes: at the block's line, with the instance's line ---------------------------------------------------


def test_a_value_error_points_at_the_block_and_the_instance() -> None:
    text = STACK.replace("with: {filters: 8}", "with: {filters: -8}")
    block, instance = line_of(text, "{name: conv, op: conv2d"), line_of(text, "name: stage1")
    assert errors(text) == [
        f"s.yaml:{block}:43: error: filters: received -8, expected a value > 0 (in layer 'stage1/1/conv') "
        f"(in instance 'stage1/1' of block 'unit' at s.yaml:{instance}:5; $filters is -8, set at s.yaml:{instance}:60)"]


def test_a_shape_error_points_at_the_block_and_the_instance() -> None:
    text = STACK.replace("kernel: 3, strides: $strides, padding: same", "kernel: 20, strides: $strides")
    (message,) = errors(text)
    assert message.startswith(f"s.yaml:{line_of(text, 'kernel: 20')}:")  # at the key the op's rule names
    assert ": error: layer 'stage1/1/conv' (conv2d): a window of 20 " in message
    assert message.endswith(f"(in instance 'stage1/1' of block 'unit' at {pos(text, '{name: stage1')})")


def test_nested_instances_name_every_instance_line() -> None:
    text = NESTED.replace("    params: {filters: ~, kernel: 1}\n", "").replace("with: {width: 6}", "with: {width: 0}")
    found = errors(text)
    block, inner, outer = line_of(text, "{name: conv, op: conv2d"), line_of(text, "{name: l, block"), line_of(
        text, "{name: p, block")
    assert found[0] == (
        f"s.yaml:{block}:43: error: filters: received 0, expected a value > 0 (in layer 'p/l/conv') "
        f"(in instance 'p/l' of block 'conv_bn' at s.yaml:{inner}:9, in instance 'p' of block 'pair' at "
        f"s.yaml:{outer}:5; $filters is 0, set at {pos(text, 'width: |0}')})")


@pytest.mark.parametrize(("old", "new", "at", "expected"), [
    ("block: unit, repeat", "block: unti, repeat", "unti",
     "instance 'stage1' uses block 'unti', which is not defined; did you mean 'unit'? (blocks: unit)"),
    ("with: {filters: 8}", "with: {filtres: 8}", "filtres",
     "block 'unit' has no parameter 'filtres'; did you mean 'filters'? (parameters: filters, strides)"),
    ("with: {filters: 8}, ", "", "{name: stage1",
     "instance 'stage1' must set parameter(s) 'filters' of block 'unit' for its first instance in 'with' "
     "(they have no default)"),
    ("with: {filters: 8}, ", "", "{name: stage1",
     "instance 'stage1' must set parameter(s) 'filters' of block 'unit' for instances 2 and on in 'with' "
     "(they have no default)"),
    ("strides: $strides", "strides: $stride", "$stride",
     "block 'unit' has no parameter 'stride'; did you mean 'strides'? (parameters: filters, strides; declare it in "
     "'params')"),
    ("{name: bn, op: batch_norm}", "{name: bn, op: batch_norm, input: cnv}", "cnv",
     "block 'unit': layer 'bn' reads 'cnv', which is not an input, a layer or an instance of the block; did you mean "
     "'conv'? (a block reads only its own inputs)"),
    ("{name: bn, op: batch_norm}", "{name: bn, op: batch_norm, input: stem}", "stem}",
     "block 'unit': layer 'bn' reads 'stem', which is not an input, a layer or an instance of the block (a block "
     "reads only its own inputs)"),
    ("outputs: {out: relu}", "outputs: {out: rel}", "rel}",
     "block 'unit': output 'out' names 'rel', which is not a layer or an instance of the block; did you mean 'relu'?"),
    ("{name: bn, op: batch_norm}", "{name: bn, op: batch_nrom}", "batch_nrom",
     "unknown op 'batch_nrom'; did you mean 'batch_norm'? (in block 'unit', layer 'bn'; ops cannot be parameters)"),
    ("{name: bn, op: batch_norm}", "{name: $bn, op: batch_norm}", "$bn",
     "block 'unit': layer name '$bn' is not a layer name"),
    ("{name: stem, op: conv2d", "{name: stage1, op: conv2d", "{name: stage1, block",
     "instance name 'stage1' is already used by a layer"),
    ("first: {with: {strides: 2}}", "first: {with: {strides: $s}}", "$s}",
     "'$s' refers to a parameter, but instance 'stage1' is not inside a block; write the value itself"),
    ("{name: bn, op: batch_norm}", "{name: bn, op: batch_norm, inputs: 3}", "inputs: |3}",
     "block 'unit': 'inputs' of layer 'bn' must be a list of layer names; inputs cannot be parameters"),
    ("{name: bn, op: batch_norm}", "{name: bn, block: unit, op: batch_norm}", "{name: bn",
     "block 'unit': layer 'bn' needs exactly one of 'op' (a layer) or 'block' (an instance of another block)"),
    (", first: {with: {strides: 2}}", ", first: {block: other}", "other",
     "instance 'stage1' uses block 'other', which is not defined (blocks: unit)"),
    ("repeat: 3, ", "", "first",
     "instance 'stage1': 'first' applies to the first of 'repeat' instances; add 'repeat' or write its values in "
     "'with'"),
])
def test_block_mistakes(old: str, new: str, at: str, expected: str) -> None:
    assert old in STACK
    text = STACK.replace(old, new, 1)
    found = errors(text)
    assert any(line.startswith(f"{pos(text, at)}: error: {expected}") for line in found), found


def test_block_cycles_are_positioned_errors() -> None:
    text = HEAD + """\
blocks:
  a:
    inputs: [x]
    outputs: {out: b}
    layers:
      - {name: b, block: b, input: x}
  b:
    inputs: [x]
    outputs: {out: a}
    layers:
      - {name: a, block: a, input: x}
layers:
  - {name: one, block: a}
  - {name: head, op: dense, units: 10}
"""
    assert errors(text) == [f"{pos(text, 'a, input')}: error: block 'a' uses itself: a -> b -> a; "
                            "blocks cannot be recursive"]
    itself = text.replace("{name: b, block: b, input: x}", "{name: b, block: a, input: x}")
    assert errors(itself)[0].endswith("block 'a' uses itself: a -> a; blocks cannot be recursive")


def test_repeat_needs_one_input_and_one_output() -> None:
    text = NESTED.replace("    params: {filters: ~, kernel: 1}\n", "").replace(
        "inputs: [stem, image], with: {width: 6}", "inputs: [stem, image], repeat: 2, with: {width: 6}")
    assert any("'repeat' stacks instances that each read the one before, so block 'pair' needs one input and one "
               "output; it has 2 and 3" in line for line in errors(text))


def test_an_instance_with_several_outputs_must_be_named_with_its_output() -> None:
    text = NESTED.replace("    params: {filters: ~, kernel: 1}\n", "").replace(
        "{name: cat, op: concat, inputs: [p/left, p/right, p/both, p/l]}", "{name: cat, op: relu}")
    assert any("layer 'cat' must name its input: the instance before it has several outputs" in line
               for line in errors(text))


def test_expanded_names_stay_within_eight_parts() -> None:
    deep = HEAD + UNIT + """\
layers:
  - {name: a/b/c/d/e/f/g, block: unit, repeat: 2, with: {filters: 4}}
  - {name: pool, op: global_avg_pool}
  - {name: head, op: dense, units: 10}
"""
    found = errors(deep)
    assert any("the expanded layer name 'a/b/c/d/e/f/g/1/conv' is not a valid layer name (at most 8 parts" in line
               for line in found), found
    ok = deep.replace("a/b/c/d/e/f/g", "a/b/c/d/e/f")  # 8 parts: a/b/c/d/e/f/1/conv
    assert build_ir(load_spec_text(ok, "s.yaml")).variables[0].path == "a/b/c/d/e/f/1/conv/kernel"


def test_generated_names_of_instances_are_checked_for_collisions() -> None:
    text = STACK.replace("{name: stem, op: conv2d", "{name: stage1_1/conv, op: conv2d")
    assert any("layer 'stage1/1/conv' and layer 'stage1_1/conv' both become 'stage1_1_conv'" in line
               for line in errors(text))


def test_expansion_is_bounded() -> None:
    text = HEAD + UNIT + """\
  many:
    inputs: [x]
    outputs: {out: u}
    layers:
      - {name: u, block: unit, repeat: 1000, with: {filters: 1}}
layers:
  - {name: lots, block: many, repeat: 1000}
  - {name: head, op: dense, units: 10}
"""
    start = time.process_time()  # CPU seconds of this process: other xdist workers and jobs on the shared cores do not count
    found = errors(text)
    # 0.3 s here. A hang guard only (an uncapped expansion builds 1,000,000 layers); the message proves the cap.
    assert time.process_time() - start < 30
    assert found == [f"{pos(text, '{name: lots')}: error: the spec expands to more than {MAX_LAYERS} "
                     "layers; specgen stops there (fewer or smaller repeats)"]
