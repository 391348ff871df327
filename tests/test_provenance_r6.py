"""Provenance of composed specs (red-team rt6): defaults of specs with blocks (F1), the file a block note names
(F2), `--set` places on lists and mappings (F5), `extends` suffixes in any case (F7), and a variant's new layer
without an op (F8)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import run_cli

BLOCKS = """\
specgen: 1
name: k
inputs: {image: {shape: [8, 8, 1]}}
outputs: {y: fc}
blocks:
  unit: {inputs: [x], outputs: {out: r2}, layers: [{name: r1, op: relu, input: x}, {name: r2, op: relu}]}
layers:
  - {name: conv1, op: conv2d, filters: 4, kernel: 3}
  - {name: u, block: unit}
  - {name: flat, op: flatten}
  - {name: fc, op: dense, units: 2}
"""

BASE = """\
specgen: 1
name: b
inputs: {x: {shape: [4]}}
outputs: {y: out}
layers:
  - {name: h1, op: dense, units: 8}
  - {name: out, op: dense, units: 2}
"""

BLOCK_BASE = """\
specgen: 1
abstract: true
inputs: {image: {shape: [8, 8, 1]}}
outputs: {y: fc}
blocks:
  unit:
    params: {filters: ~}
    inputs: [x]
    outputs: {out: conv}
    layers:
      - {name: conv, op: conv2d, input: x, filters: $filters, kernel: 3, padding: same}
layers:
  - {name: stage, block: unit, with: {filters: FILTERS}}
  - {name: flat, op: flatten}
  - {name: fc, op: dense, units: 2}
"""


def write(folder: Path, files: dict[str, str]) -> Path:
    (folder / ".git").mkdir(parents=True, exist_ok=True)  # the repository `extends` stays inside
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


# --- F1: a block instance that expands to several layers keeps every layer's defaults ----------------------------


def test_resolved_lists_the_defaults_of_every_layer_beside_a_block_instance(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"k.yaml": BLOCKS})
    code, out, err = run_cli(["validate", "k.yaml", "--resolved"], capsys, tmp_path)
    assert (code, err) == (0, "")
    layers = out[out.index("layers:"):out.index("blocks:")].splitlines()
    assert layers == [
        "layers:  # k.yaml:8:3",
        "  - name: conv1  # k.yaml:8:12",
        "    op: conv2d  # k.yaml:8:23",
        "    filters: 4  # k.yaml:8:40",
        "    kernel: 3  # k.yaml:8:51",
        "    strides: 1  # default",
        "    padding: valid  # default",
        "    dilation: 1  # default",
        "    use_bias: true  # default",
        "    kernel_init: glorot_uniform  # default",
        "    bias_init: zeros  # default",
        "    groups: 1  # default",
        "  - name: u  # k.yaml:9:12",
        "    block: unit  # k.yaml:9:22",
        # no `input: u/r2  # default`: expansion wires the layer after an instance, no schema default does
        "  - name: flat  # k.yaml:10:12",
        "    op: flatten  # k.yaml:10:22",
        "  - name: fc  # k.yaml:11:12",
        "    op: dense  # k.yaml:11:20",
        "    units: 2  # k.yaml:11:34",
        "    use_bias: true  # default",
        "    kernel_init: glorot_uniform  # default",
        "    bias_init: zeros  # default",
    ]


def test_a_one_layer_block_gives_the_next_layer_no_input_default(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"k.yaml": BLOCKS.replace(", {name: r2, op: relu}", "").replace("out: r2", "out: r1")})
    code, out, _ = run_cli(["validate", "k.yaml", "--resolved"], capsys, tmp_path)
    assert code == 0 and "input: u" not in out
    assert "  - name: flat  # k.yaml:10:12\n    op: flatten  # k.yaml:10:22\n" in out


def test_explain_a_default_of_a_layer_beside_an_instance(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"k.yaml": BLOCKS})
    code, out, err = run_cli(["explain", "k.yaml", "layers[conv1].strides"], capsys, tmp_path)
    assert (code, err) == (0, "")
    assert out.splitlines() == ["layers[conv1].strides = 1", "  1. default  1  <- wins"]


def test_explain_an_expanded_layer_points_at_the_blocks_layer(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"k.yaml": BLOCKS})
    code, _, err = run_cli(["explain", "k.yaml", "layers[u/r1].op"], capsys, tmp_path)
    assert code == 1
    assert err.splitlines()[0] == (
        "k.yaml: error: no key 'layers[u/r1].op' in the resolved spec: 'u/r1' lies in instance 'u' of block 'unit', "
        "and the resolved spec keeps the instance as written, not the layers it expands to; explain "
        "'blocks.unit.layers[r1].op' (the instance's `with` sets the block's parameters)")
    code, out, _ = run_cli(["explain", "k.yaml", "blocks.unit.layers[r1].op"], capsys, tmp_path)
    assert code == 0 and out.splitlines() == ["blocks.unit.layers[r1].op = relu", "  1. k.yaml:6:67  relu  <- wins"]


# --- F2: a note about a block instance names the file that wrote it, or the `--set` -------------------------------


def test_a_block_note_names_the_base_that_wrote_the_instance(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"base.yaml": BLOCK_BASE.replace("FILTERS", "-4"), "small.yaml": "extends: base.yaml\nname: small\n"})
    code, _, err = run_cli(["validate", "small.yaml"], capsys, tmp_path)
    assert code == 1
    assert err.splitlines() == [
        "base.yaml:11:53: error: filters: received -4, expected a value > 0 (in layer 'stage/conv') (in instance "
        "'stage' of block 'unit' at base.yaml:13:5; $filters is -4, set at base.yaml:13:48) (via small.yaml:1:10)",
        "1 error found"]


@pytest.mark.parametrize(("override", "instance", "param"), [
    ("layers[stage].with.filters=-1", "at base.yaml:13:5", "set by --set layers[stage].with.filters"),
    ("layers.0.with={filters: -1}", "at base.yaml:13:5", "set by --set layers.0.with"),
    ("layers.0={name: stage, block: unit, with: {filters: -1}}", "set by --set layers.0", "set by --set layers.0"),
])
def test_a_block_note_names_the_set_that_wrote_a_parameter(tmp_path: Path, capsys, override: str, instance: str,
                                                          param: str) -> None:
    write(tmp_path, {"base.yaml": BLOCK_BASE.replace("FILTERS", "4"), "small.yaml": "extends: base.yaml\nname: small\n"})
    code, _, err = run_cli(["validate", "small.yaml", "--set", override], capsys, tmp_path)
    assert code == 1
    assert err.splitlines() == [
        f"--set {override}: error: filters: received -1, expected a value > 0 (in layer 'stage/conv') (in instance "
        f"'stage' of block 'unit' {instance}; $filters is -1, {param})", "1 error found"]


# --- F5: a `--set` inside a list or mapping is a place of that list or mapping ------------------------------------


def test_resolved_credits_a_set_list_item_to_the_set(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"base.yaml": BASE})
    code, out, _ = run_cli(["validate", "base.yaml", "--resolved", "--set", "inputs.x.shape.0=6"], capsys, tmp_path)
    assert code == 0
    assert ("inputs:  # --set inputs.x.shape.0\n  x:  # --set inputs.x.shape.0\n"
            "    shape: [6]  # --set inputs.x.shape.0\n") in out


@pytest.mark.parametrize(("key", "override", "lines"), [
    ("inputs.x.shape", "inputs.x.shape.0=6",
     ["inputs.x.shape = [6]", "  1. base.yaml:3:21  [4]", "  2. --set inputs.x.shape.0  6  <- wins"]),
    ("layers[h1]", "layers[h1].units=3",
     ["layers[h1] = {bias_init: zeros, kernel_init: glorot_uniform, name: h1, op: dense, units: 3, use_bias: true}",
      "  1. base.yaml:6:5  {name: h1, op: dense, units: 8}", "  2. --set layers[h1].units  3  <- wins"]),
    ("layers[h1]", "layers[h1].activation=null",
     ["layers[h1] = {activation: null, bias_init: zeros, kernel_init: glorot_uniform, name: h1, op: dense, units: 8, "
      "use_bias: true}",
      "  1. base.yaml:6:5  {name: h1, op: dense, units: 8}", "  2. --set layers[h1].activation  null  <- wins"]),
    # a `--set` that replaces a list or mapping whole keeps the places its values had, as the file merge does
    ("layers[out].units", "layers.1={name: out, op: dense, units: 7}",
     ["layers[out].units = 7", "  1. base.yaml:7:35  2", "  2. --set layers.1  7  <- wins"]),
    ("inputs.x.shape", "inputs.x={shape: [5]}",
     ["inputs.x.shape = [5]", "  1. base.yaml:3:21  [4]", "  2. --set inputs.x  [5]  <- wins"]),
])
def test_explain_lists_a_set_inside_a_list_or_mapping(tmp_path: Path, capsys, key: str, override: str,
                                                      lines: list[str]) -> None:
    write(tmp_path, {"base.yaml": BASE})
    code, out, err = run_cli(["explain", "base.yaml", key, "--set", override], capsys, tmp_path)
    assert (code, err) == (0, "")
    assert out.splitlines() == lines


# --- F7: `extends` takes a spec's suffix in any case, as the command line does ------------------------------------


def test_extends_takes_an_upper_case_suffix(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"Up.YAML": BASE, "b.Yml": "extends: Up.YAML\nname: mid\n", "v.yaml": "extends: b.Yml\nname: v\n",
                     "t.yaml": "extends: Up.txt\nname: t\n"})
    code, out, err = run_cli(["validate", "v.yaml"], capsys, tmp_path)
    assert (code, out, err) == (0, "ok: v.yaml (v: 2 layers, 4 variables)\n", "")
    code, _, err = run_cli(["validate", "t.yaml"], capsys, tmp_path)
    assert err.splitlines()[0] == "t.yaml:1:10: error: extends: 'Up.txt' is not a spec file; expected a .yaml or .yml file"


# --- F8: a variant's layer that no base defines and that has no op --------------------------------------------------


@pytest.mark.parametrize(("layers", "message"), [
    ("  - {name: hidden, units: 16}\n",
     "v.yaml:4:5: error: layer 'hidden' is not in any base (their layers: h1, out): a new layer needs an 'op' (or a "
     "'block'); to change a layer of the bases, name it"),
    ("  - {name: h1x, units: 16, after: h1}\n",
     "v.yaml:4:5: error: layer 'h1x' is not in any base (their layers: h1, out; did you mean 'h1'?): a new layer needs "
     "an 'op' (or a 'block'); to change a layer of the bases, name it"),
])
def test_a_new_layer_without_an_op_names_the_bases_layers(tmp_path: Path, capsys, layers: str, message: str) -> None:
    write(tmp_path, {"base.yaml": BASE, "v.yaml": f"extends: base.yaml\nname: v\nlayers:\n{layers}"})
    code, _, err = run_cli(["validate", "v.yaml"], capsys, tmp_path)
    assert code == 1 and err.splitlines() == [message, "1 error found"]


def test_a_new_layer_a_later_file_gives_an_op_is_valid(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"base.yaml": BASE,
                     "mid.yaml": "extends: base.yaml\nabstract: true\nlayers:\n  - {name: h2, units: 16, after: h1}\n",
                     "v.yaml": "extends: mid.yaml\nname: v\nlayers:\n  - {name: h2, op: dense}\n",
                     "w.yaml": "extends: mid.yaml\nname: w\n"})
    code, out, _ = run_cli(["validate", "v.yaml"], capsys, tmp_path)
    assert code == 0 and "ok: v.yaml (v: 3 layers, 6 variables)" in out
    code, _, err = run_cli(["validate", "w.yaml"], capsys, tmp_path)
    assert err.splitlines() == [
        "mid.yaml:4:5: error: layer 'h2' is not in any base (their layers: h1, out): a new layer needs an 'op' (or a "
        "'block'); to change a layer of the bases, name it (via w.yaml:1:10)", "1 error found"]


def test_a_new_layer_in_a_blocks_layers_without_an_op(tmp_path: Path, capsys) -> None:
    base = BLOCK_BASE.replace("FILTERS", "4").replace("abstract: true", "name: b")
    write(tmp_path, {"base.yaml": base, "v.yaml": "extends: base.yaml\nblocks:\n  unit:\n    layers:\n"
                                                  "      - {name: cnv, filters: 8}\n"})
    code, _, err = run_cli(["validate", "v.yaml"], capsys, tmp_path)
    assert code == 1 and err.splitlines()[0] == (
        "v.yaml:5:9: error: layer 'cnv' is not in any base (their layers: conv; did you mean 'conv'?): a new layer "
        "needs an 'op' (or a 'block'); to change a layer of the bases, name it")
