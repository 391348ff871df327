"""Deep specs never end in RecursionError (issue 17, section 4): blocks nested past the name limit stop
with a positioned error, and a chain of 10,000 layers (the documented limit) goes through every walk
that validate, build and report make: shapes, gradient reach, collections, targets, lints, rendering.

Python's default recursion limit is 1,000 frames, so any walk that recursed once per layer or per
nested block would fail here; the specs are generated at test time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specgen.cli import main
from specgen.ir.lints import init_scale_warnings
from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.report import report
from specgen.spec.expand import MAX_LAYERS
from specgen.spec.load import load_spec_text


def block_chain(count: int) -> str:
    """Blocks b0 ... b<count-1>, each an instance of the one before; the spec uses the last once."""
    lines = ["specgen: 1", "name: chain", "inputs:", "  x: {shape: [4]}", "outputs:", "  y: top", "layers:",
             f"  - {{name: top, block: b{count - 1}}}", "blocks:",
             "  b0:\n    inputs: [i]\n    outputs: {o: d}\n    layers:\n      - {name: d, op: dense, units: 4}"]
    lines += [f"  b{k}:\n    inputs: [i]\n    outputs: {{o: c}}\n    layers:\n      - {{name: c, block: b{k - 1}}}"
              for k in range(1, count)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("command", ["validate", "build", "report"])
def test_600_nested_blocks_stop_at_the_name_limit(tmp_path: Path, command: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "chain.yaml"
    path.write_text(block_chain(600))
    extra = ["--out", str(tmp_path / "out")] if command == "build" else []
    assert main([command, str(path), *extra]) == 1
    first, count = capsys.readouterr().err.splitlines()
    # The instance that makes the 9th part, written in block b591, with the 8 instances it came through.
    assert first.startswith(f"{path}:2974:9: error: instance 'top/c/c/c/c/c/c/c/c' nests blocks too deep: its name "
                            "has more than 8 parts joined by '/', the most a layer name has (nest fewer blocks or "
                            f"shorten the names) (in instance 'top/c/c/c/c/c/c/c' of block 'b592' at {path}:2979:9, ")
    assert first.endswith(f"in instance 'top' of block 'b599' at {path}:8:5)") and first.count("in instance '") == 8
    assert count == "1 error found"
    assert not (tmp_path / "out").exists()


def test_blocks_nested_to_the_name_limit_build() -> None:
    """Seven instances nested in each other and the layer inside: 8 parts, the most a name has, and it builds."""
    loaded = load_spec_text(block_chain(7))
    ir = build_ir(loaded)
    assert [n.name for n in ir.nodes] == ["top/c/c/c/c/c/c/d"]
    assert render_files(ir)["model.onnx"]


def layer_chain(count: int) -> str:
    """`count` layers: dense(tanh), relu, add of the two before, in turn; a shared dense; a training setup with
    collections, a frozen group, a regularizer, a target network, EMA and pruning (each walks the layers)."""
    rows = ["  - {name: l0, op: dense, units: 4, kernel_init: glorot_uniform}", "  - {name: l1, op: relu}"]
    for k in range(2, count - 1):
        rows.append([f"  - {{name: l{k}, op: add, inputs: [l{k - 1}, l{k - 2}]}}",
                     f"  - {{name: l{k}, op: dense, units: 4, activation: tanh}}",
                     f"  - {{name: l{k}, op: relu}}"][k % 3])
    rows.append(f"  - {{name: last, share: l97, op: dense, units: 4, activation: tanh, input: l{count - 2}}}")
    return "\n".join([
        "specgen: 1", "name: deep", "inputs: {x: {shape: [4]}}", "outputs: {y: last}", "layers:", *rows,
        "collections: {early: ['l1*'], late: ['l9*']}", "frozen: [early]",
        "loss: [{kind: mean_squared_error, predictions: y, labels: t}, {kind: l2, variables: late, weight: 0.001}]",
        "optimizers: {all: {kind: adam, learning_rate: 0.001}}",
        "targets: {slow: {online: 'l4/*', target: 'l7/*', tau: 0.01}}",
        "train: {batch_size: 4, ema: {decay: 0.99}}",
        "data: {train: {npz: d.npz, features: {x: x}, labels: {t: t}}}", "checkpoint: {dir: run}",
        "prune: {variables: ['l9*/kernel'], schedule: {kind: polynomial_decay, initial_sparsity: 0.0, "
        "final_sparsity: 0.8, begin_step: 4, end_step: 20, frequency: 2}}"]) + "\n"


def test_a_chain_of_the_most_layers_validates_builds_and_reports() -> None:
    loaded = load_spec_text(layer_chain(MAX_LAYERS))
    ir = build_ir(loaded)
    assert len(ir.nodes) == MAX_LAYERS
    assert init_scale_warnings(loaded, ir) == []
    files = render_files(ir)
    assert sorted(files) == ["collections.yaml", "model.onnx", "model.onnx.txt", "model.py", "train.py"]
    assert report(ir, "deep.yaml", loaded.spec.optimizers).startswith(f"deep (deep.yaml): {MAX_LAYERS} layers")
