"""IR resolution: graph order, collections and their glob semantics, generated names."""

from __future__ import annotations

import textwrap
import zlib

import pytest

from specgen.diagnostics import SpecError
from specgen.ir.model import ModelIR
from specgen.ir.resolve import build_ir
from specgen.spec.load import load_spec_text

BASE = """\
specgen: 1
name: net
inputs: {x: {shape: [4, 4, 2]}}
outputs: {y: head/out}
layers:
  - {name: body/conv, op: conv2d, input: x, filters: 3, kernel: 3, padding: same}
  - {name: body/bn, op: batch_norm}
  - {name: pool, op: global_avg_pool}
  - {name: head/fc, op: dense, units: 5}
  - {name: head/out, op: dense, units: 2}
loss: {kind: sparse_softmax_cross_entropy, logits: y, labels: label}
"""


def resolve(extra: str, base: str = BASE) -> ModelIR:
    return build_ir(load_spec_text(base + textwrap.dedent(extra), "net.yaml"))


def test_star_matches_across_slashes_and_bare_names_stand_for_collections() -> None:
    ir = resolve("""
        collections:
          body: ["body/*"]
          everything: [body, "head/*"]
        optimizers:
          all: {variables: everything, kind: sgd, learning_rate: 0.1}
        """)
    assert ir.collections["body"] == ("body/conv/kernel", "body/conv/bias", "body/bn/gamma", "body/bn/beta",
                                      "body/bn/moving_mean", "body/bn/moving_variance")
    assert ir.collections["everything"] == ir.collections["body"] + (
        "head/fc/kernel", "head/fc/bias", "head/out/kernel", "head/out/bias")
    # batch-norm statistics are matched by the collection but never claimed by an optimizer
    assert ir.optimizers["all"] == tuple(p for p in ir.collections["everything"] if "moving" not in p)
    assert ir.collections["update"] == ("body/bn/moving_mean", "body/bn/moving_variance")
    assert ir.collections["frozen"] == ()


def test_frozen_weights_are_in_frozen_not_trainable() -> None:
    ir = resolve("""
        frozen: ["body/*"]
        optimizers:
          head: {variables: "head/*", kind: adam, learning_rate: 0.001}
        train: {batch_size: 8, accumulate: 2, ema: {decay: 0.9}}
        """)
    assert ir.collections["frozen"] == ("body/conv/kernel", "body/conv/bias", "body/bn/gamma", "body/bn/beta")
    assert ir.collections["trainable"] == ("head/fc/kernel", "head/fc/bias", "head/out/kernel", "head/out/bias")
    assert ir.collections["ema"] == tuple(f"ema/{p}" for p in ir.collections["trainable"])
    accumulators = [f"accumulators/{p}" for p in ir.collections["trainable"]]
    assert [p for p in ir.collections["optimizer"] if p.startswith("accumulators/")] == [
        *accumulators, "accumulators/micro_batches"]
    # body/bn's weights are all frozen: it runs in inference mode, so nothing updates its statistics (not
    # in `update`); they stay in `model`, and `frozen` still holds weights only.
    assert ir.collections["update"] == ()
    held = {"body/bn/moving_mean", "body/bn/moving_variance"}
    model = set(ir.collections["model"])
    assert model == set(ir.collections["frozen"]) | set(ir.collections["trainable"]) | held
    assert ir.node("body/bn").inference_mode


def test_no_optimizers_means_every_weight_is_frozen() -> None:
    ir = resolve("", BASE.replace("loss: {kind: sparse_softmax_cross_entropy, logits: y, labels: label}\n", ""))
    assert ir.collections["trainable"] == ()
    assert len(ir.collections["frozen"]) == 8
    assert "global_step" not in {v.path for v in ir.variables}


def test_layers_may_be_listed_before_their_inputs() -> None:
    text = """\
specgen: 1
name: late
inputs: {x: {shape: [3]}}
outputs: {y: sum}
layers:
  - {name: sum, op: add, inputs: [a, b]}
  - {name: a, op: relu, input: x}
  - {name: b, op: tanh, input: a}
"""
    ir = build_ir(load_spec_text(text, "late.yaml"))
    assert [n.name for n in ir.nodes] == ["a", "b", "sum"]


def test_names_that_collide_once_mangled_are_an_error() -> None:
    text = """\
specgen: 1
name: clash
inputs: {x: {shape: [3]}}
outputs: {y: a_b}
layers:
  - {name: a/b, op: relu, input: x}
  - {name: a_b, op: relu}
"""
    with pytest.raises(SpecError) as info:
        build_ir(load_spec_text(text, "clash.yaml"))
    assert str(info.value) == ("clash.yaml:7:12: error: layer 'a_b' and layer 'a/b' both become 'a_b' in the generated "
                               "Python code; rename one of them")


def test_python_keywords_and_reserved_names_get_a_suffix() -> None:
    text = """\
specgen: 1
name: words
inputs: {class: {shape: [3]}}
outputs: {y: tf}
layers:
  - {name: tf, op: relu, input: class}
"""
    ir = build_ir(load_spec_text(text, "words.yaml"))
    assert ir.inputs[0].py_name == "class_"
    assert ir.nodes[0].py_name == "tf_"


def test_variable_seeds_are_stable() -> None:
    """Seeds come from the path (crc32), so reordering layers does not change initial weights."""
    ir = resolve("optimizers: {all: {variables: '*', kind: sgd, learning_rate: 0.1}}\n")
    seeds = {v.path: v.seed for v in ir.model_variables}
    assert len(set(seeds.values())) == len(seeds)
    assert all(seed == zlib.crc32(path.encode()) & 0x7FFFFFFF for path, seed in seeds.items())
