"""The `prune` section without TensorFlow: positioned errors, the `pruning` collection, generated code, report."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from specgen.cli import main
from specgen.diagnostics import SpecError
from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.spec.load import load_spec, load_spec_text

ROOT = Path(__file__).resolve().parents[1]
PRUNED = ROOT / "examples" / "specs" / "digits_cnn_pruned.yaml"

BASE = """\
specgen: 1
name: net
inputs: {x: {shape: [4]}}
outputs: {y: out}
layers:
  - {name: hidden, op: dense, input: x, units: 3}
  - {name: bn, op: batch_norm}
  - {name: out, op: dense, units: 2}
loss: {kind: sparse_softmax_cross_entropy, logits: y, labels: label}
optimizers: {all: {kind: sgd, learning_rate: 0.1}}
train: {batch_size: 2}
"""
PRUNE = """\
prune:
  variables: {variables}
  schedule: {schedule}
"""
POLY = "{kind: polynomial_decay, final_sparsity: 0.5, end_step: 10, frequency: 2}"


def build(variables: str = '["*/kernel"]', schedule: str = POLY, base: str = BASE, frozen: str = ""):
    text = base + frozen + PRUNE.format(variables=variables, schedule=schedule)
    return build_ir(load_spec_text(text, "net.yaml", Path("/specs/net.yaml")))


def error(**kwargs: str) -> str:
    with pytest.raises(SpecError) as caught:
        build(**kwargs)
    return str(caught.value)


def test_masks_are_training_state_in_the_pruning_collection() -> None:
    ir = build()
    assert ir.pruning is not None and ir.pruning.paths == ("hidden/kernel", "out/kernel")
    assert ir.collections["pruning"] == ("pruning/hidden/kernel", "pruning/out/kernel")
    # After the other built-ins, before user collections; masks are not model variables (not exported).
    assert list(ir.collections)[:9] == ["trainable", "frozen", "model", "update", "optimizer", "ema", "step",
                                        "metrics", "pruning"]
    masks = {v.path: v for v in ir.variables if "pruning" in v.collections}
    assert {p: (v.shape, v.collections) for p, v in masks.items()} == {
        "pruning/hidden/kernel": ((4, 3), ("pruning",)), "pruning/out/kernel": ((3, 2), ("pruning",))}
    assert not any("pruning" in v.collections for v in ir.model_variables)


def test_specs_without_prune_have_no_pruning_collection() -> None:
    ir = build_ir(load_spec(ROOT / "examples" / "specs" / "digits_cnn.yaml"))
    assert ir.pruning is None and "pruning" not in ir.collections


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"schedule": "{kind: constant_sparsity, sparsity: 0.5, begin_step: 10, end_step: 4}"},
     "net.yaml:14:13: error: schedule: end_step must not come before begin_step; "
     "received begin_step 10 and end_step 4"),
    ({"schedule": "{kind: polynomial_decay, final_sparsity: 0.5, begin_step: 10, end_step: 10}"},
     "net.yaml:14:13: error: schedule: end_step must come after begin_step; "
     "received begin_step 10 and end_step 10"),
    ({"schedule": "{kind: constant_sparsity, sparsity: 1.0}"},
     "net.yaml:14:49: error: sparsity: received 1.0, expected a value < 1.0"),
    ({"variables": '["hidden/kernel", "bn/moving_mean"]', "frozen": "frozen: [hidden/kernel]\n"},
     "net.yaml:14:14: error: prune selects frozen variable 'hidden/kernel'; no optimizer updates frozen weights "
     "and pruning would change them: remove them from 'prune.variables' or from 'frozen'"),
    ({"variables": '"bn/moving_*"'},
     "net.yaml:13:14: error: prune selects no trained weight (batch-norm statistics and constants are never "
     "pruned); name kernels, e.g. ['conv1/kernel', 'head/*/kernel']"),
    ({"variables": '["hiden/kernel"]'},
     "net.yaml:13:15: error: pattern 'hiden/kernel' matches no variable; did you mean 'hidden/kernel'?"),
], ids=["constant end before begin", "polynomial without a span", "sparsity 1", "frozen weight", "statistics only",
        "typo"])
def test_user_mistakes_are_positioned_and_say_what_was_expected(kwargs: dict[str, str], expected: str) -> None:
    assert expected in error(**kwargs)


def test_prune_needs_training_sections() -> None:
    base = BASE.replace("optimizers: {all: {kind: sgd, learning_rate: 0.1}}\n", "")
    message = error(base=base.replace("train: {batch_size: 2}\n", ""))
    assert ("net.yaml:10:1: error: pruning happens during training and needs the 'loss', 'optimizers' and "
            "'train' sections") in message


def test_a_layer_under_pruning_is_refused() -> None:
    with pytest.raises(SpecError) as caught:
        build_ir(load_spec_text(BASE.replace("name: out,", "name: pruning/out,").replace("outputs: {y: out}",
                                                                                          "outputs: {y: pruning/out}"),
                                "net.yaml"))
    assert "layer name 'pruning/out' starts with 'pruning', which specgen keeps for training-state" in str(caught.value)


def test_generated_code_reads_weights_through_masks() -> None:
    ir = build_ir(load_spec(PRUNED))
    files = render_files(ir)
    model, train = files["model.py"].decode(), files["train.py"].decode()
    assert 'tf.matmul(flat, self.head_fc_kernel * self.masks["head/fc/kernel"])' in model
    assert '"head/out/kernel": tf.Variable(init.ones([64, 10]), name="pruning/head/out/kernel", trainable=False)' in model
    assert ("pruning.polynomial_decay(\n            initial_sparsity=0.0, final_sparsity=0.8, begin_step=44, "
            "end_step=220, frequency=11, power=3.0\n        )") in train
    # The masks are saved under their keys; unpruned weights are read as they are.
    assert 'zip(["pruning/head/fc/kernel", "pruning/head/out/kernel"], self.masks, strict=True)' in train
    assert "tf.nn.conv2d(image, self.conv1_kernel, " in model
    assert files == render_files(build_ir(load_spec(PRUNED)))  # deterministic


def test_report_prints_the_pruning_collection_and_planned_sparsity(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(PRUNED)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert ["pruning", "2", "17,024"] in [line.split() for line in lines]  # 16,384 + 640 mask entries
    rows = {line.split()[0]: line.split()[1:] for line in lines
            if line.split()[:1] in (["head/fc/kernel"], ["head/out/kernel"], ["total"]) and "0.8000" in line}
    # Kept: round(16,384 x 0.2) = round(3,276.8) = 3,277 and 640 x 0.2 = 128; pruned: the rest.
    assert rows["head/fc/kernel"] == ["head/fc", "16,384", "0.8000", "13,107", "3,277"]
    assert rows["head/out/kernel"] == ["head/out", "640", "0.8000", "512", "128"]
    assert rows["total"] == ["17,024", "0.8000", "13,619", "3,405"]
    assert ("Masks are recomputed at steps 44, 55, 66, then every 11 until 220 (17 times): polynomial_decay from 0.0 "
            "to 0.8, power 3.0; step b is update b (docs/pruning.md).") in lines


def test_schema_describes_prune() -> None:
    text = (ROOT / "schemas" / "specgen.schema.json").read_text()
    for key in ("constant_sparsity", "polynomial_decay", "initial_sparsity", "final_sparsity", "frequency"):
        assert f'"{key}"' in text
    assert textwrap.dedent(PRUNE)  # the template above is the documented shape
