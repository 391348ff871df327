"""Pruning against TF Model Optimization 0.8's step counter (the reference docs/pruning.md cites), and the refusals and
report line that name the real mask updates.

TFMOT 0.8.0's rule, from its source (tensorflow_model_optimization/python/core/sparsity/keras/):
- pruning_callbacks.py:59-64, UpdatePruningStep.on_train_begin: a new model's `pruning_step` is set to 0;
- pruning_wrapper.py:283-291, PruneLowMagnitude.call: `increment_step` assigns pruning_step + 1, and the mask update
  runs after `assert_greater_equal(pruning_step, 1)`, so batch b (1-based) evaluates the schedule at step b;
- pruning_schedule.py:55-64, PruningSchedule._should_prune_in_step: masks update when begin_step <= step (<= end_step,
  or end_step < 0) and (step - begin_step) % frequency == 0.
RECORDED holds what that TFMOT (0.8.0, tf_keras) printed for ConstantSparsity(0.5, begin_step, frequency=3) on a Dense(4)
over 4 inputs: the mask's zeros (of 16) after each of 8 batches.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from specgen.diagnostics import SpecError
from specgen.ir.pruning import pruned_count
from specgen.ir.resolve import build_ir
from specgen.ir.restore_rules import Entry, Targets, plan_source
from specgen.report.pruning import pruning_table
from specgen.runtime.onnx_export import fold_batch_norms
from specgen.spec.io import RestoreSource
from specgen.spec.load import LoadedSpec, load_spec_text

RECORDED = {0: [0, 0, 8, 8, 8, 8, 8, 8], 2: [0, 8, 8, 8, 8, 8, 8, 8]}  # begin_step -> zeros after batches 1..8

SPEC = """\
specgen: 1
name: tiny
inputs: {{x: {{shape: [4]}}}}
outputs: {{y: bn}}
layers:
  - {{name: fc, op: dense, input: x, units: 4}}
  - {{name: bn, op: batch_norm}}
loss: {{kind: mean_squared_error, predictions: y, labels: t}}
optimizers: {{all: {{kind: sgd, learning_rate: 0.1}}}}
train: {{batch_size: 8, seed: 0}}
prune:
  variables: {variables}
  schedule: {schedule}
"""


def tfmot_mask_batches(begin: int, end: int | None, frequency: int, batches: int) -> list[int]:
    """The 1-based batches in which TFMOT 0.8 recomputes masks (the module docstring's three lines of its source)."""
    return [b for b in range(1, batches + 1) if b >= begin and (end is None or b <= end) and (b - begin) % frequency == 0]


def load(schedule: str, variables: str = '["fc/kernel"]') -> LoadedSpec:
    return load_spec_text(SPEC.format(schedule=schedule, variables=variables), "s.yaml", Path("/specs/s.yaml"))


def error(schedule: str, variables: str = '["fc/kernel"]') -> str:
    with pytest.raises(SpecError) as caught:
        build_ir(load(schedule, variables))
    return str(caught.value)


@pytest.mark.parametrize("begin", [0, 2])
def test_encoded_tfmot_rule_matches_the_recorded_tfmot_run(begin: int) -> None:
    batches = tfmot_mask_batches(begin, None, 3, 8)
    assert batches == {0: [3, 6], 2: [2, 5, 8]}[begin]
    assert RECORDED[begin] == [8 if any(u <= b for u in batches) else 0 for b in range(1, 9)]


def zeros_after_each_update(tmp_path: Path, schedule: str, updates: int) -> list[int]:
    """Train the tiny spec through its generated train_steps (the graph the CLI runs), one update per call; the mask's
    zeros after each."""
    tf = pytest.importorskip("tensorflow")
    from specgen.render.files import render_files
    from specgen.runtime.lib.generated import load_generated

    ir = build_ir(load(schedule))
    for name, content in render_files(ir).items():
        if name.endswith(".py"):
            (tmp_path / name).write_bytes(content)
    model = load_generated(tmp_path / "model.py").Tiny(seed=0)
    trainer = load_generated(tmp_path / "train.py").TinyTraining(model)
    rng = np.random.default_rng(0)
    data = tf.data.Dataset.from_tensors(({"x": rng.normal(size=(8, 4)).astype(np.float32)},
                                         {"t": rng.normal(size=(8, 4)).astype(np.float32)})).repeat()
    iterator, zeros = iter(data), []
    for b in range(updates):
        trainer.train_steps(iterator, tf.constant(b, tf.int64), tf.constant(1, tf.int64))
        zeros.append(int((model.masks["fc/kernel"].numpy() == 0).sum()))
    return zeros


@pytest.mark.parametrize("begin", [0, 2])
def test_masks_change_in_the_batches_tfmot_changes_them(tmp_path: Path, begin: int) -> None:
    """constant_sparsity 0.5, frequency 3 on a 16-entry kernel: the zeros after each batch are TFMOT's recorded ones
    (begin_step 0 prunes nothing before batch 3: the random initialization is never ranked)."""
    zeros = zeros_after_each_update(tmp_path, f"{{kind: constant_sparsity, sparsity: 0.5, begin_step: {begin}, "
                                              "frequency: 3}", 8)
    assert zeros == RECORDED[begin]


def test_a_decaying_schedule_updates_in_exactly_tfmot_batches(tmp_path: Path) -> None:
    """polynomial_decay 0.2 -> 0.8 over steps 0..9, frequency 3: every update raises the count, so each batch in
    which it changes is a mask update; they are TFMOT's 3, 6 and 9, at the formula's sparsity of steps 3, 6, 9."""
    zeros = zeros_after_each_update(tmp_path, "{kind: polynomial_decay, initial_sparsity: 0.2, final_sparsity: 0.8, "
                                              "begin_step: 0, end_step: 9, frequency: 3, power: 1.0}", 10)
    changed = [b for b in range(1, 11) if zeros[b - 1] != (zeros[b - 2] if b > 1 else 0)]
    assert changed == tfmot_mask_batches(0, 9, 3, 10) == [3, 6, 9]
    expected = [pruned_count(16, 0.8 - 0.6 * (1 - step / 9)) for step in (3, 6, 9)]  # 6, 10, 13 of 16
    assert [zeros[b - 1] for b in changed] == expected == [6, 10, 13]
    assert zeros[-1] == 13  # nothing after end_step


@pytest.mark.parametrize(("schedule", "line"), [
    ("{kind: constant_sparsity, sparsity: 0.5, begin_step: 5, end_step: 5}", "at step 5 (once)"),
    ("{kind: constant_sparsity, sparsity: 0.5, begin_step: 5, end_step: 9, frequency: 3}", "at steps 5 and 8 (twice)"),
    ("{kind: constant_sparsity, sparsity: 0.5, end_step: 12, frequency: 3}", "at steps 3, 6, 9 and 12 (4 times)"),
    ("{kind: polynomial_decay, final_sparsity: 0.5, end_step: 99, frequency: 3}",
     "at steps 3, 6, 9, then every 3 until 99 (33 times)"),
    ("{kind: constant_sparsity, sparsity: 0.5, frequency: 7}", "at step 7 and every 7 updates after it, until "
     "training stops"),
    ("{kind: constant_sparsity, sparsity: 0.5, begin_step: 2, frequency: 7}", "at step 2 and every 7 updates after "
     "it, until training stops"),
])
def test_report_names_only_the_real_update_steps(schedule: str, line: str) -> None:
    table = pruning_table(build_ir(load(schedule)))
    assert table is not None
    assert table.splitlines()[-1].startswith(f"Masks are recomputed {line}: ")


@pytest.mark.parametrize(("schedule", "expected"), [
    ("{kind: polynomial_decay, final_sparsity: 0.8, end_step: 250}",
     "s.yaml:13:69: error: end_step 250 is not begin_step + k * frequency (0 + k * 100): masks would be recomputed at "
     "steps 100 and 200 (twice), and the last target would be sparsity 0.7936, not final_sparsity 0.8 (TF Model "
     "Optimization falls short the same way, silently); set end_step to 200 or 300, or frequency to 50"),
    ("{kind: polynomial_decay, final_sparsity: 0.8, begin_step: 5, end_step: 50}",
     "s.yaml:13:84: error: end_step 50 is not begin_step + k * frequency (5 + k * 100): masks would be recomputed at "
     "step 5 (once), and the last target would be sparsity 0, not final_sparsity 0.8 (TF Model Optimization "
     "falls short the same way, silently); set end_step to 105, or frequency to 45"),
    ("{kind: polynomial_decay, final_sparsity: 0.8, end_step: 10}",
     "s.yaml:13:69: error: end_step 10: no update would recompute the masks, so no weight would be pruned: update b is "
     "schedule step b (never 0, as in TF Model Optimization 0.8), and the first pruning step, 100, comes after "
     "end_step (TF Model Optimization falls short the same way, silently); set end_step to 100, or frequency to 10"),
    ("{kind: constant_sparsity, sparsity: 0.5, end_step: 0, frequency: 4}",
     "s.yaml:13:64: error: end_step 0: no update would recompute the masks, so no weight would be pruned: update b is "
     "schedule step b (never 0, as in TF Model Optimization 0.8), and the first pruning step, 4, comes after end_step "
     "(TF Model Optimization falls short the same way, silently); set end_step to 4"),
    ("{kind: constant_sparsity, sparsity: 0.5, end_step: -1}",
     "s.yaml:13:64: error: end_step: received -1: to prune until training stops (TF Model Optimization's end_step -1), "
     "leave end_step out"),
    ("{kind: polynomial_decay, final_sparsity: 0.5, end_step: -1}",
     "s.yaml:13:69: error: end_step: received -1: polynomial_decay needs the step at which final_sparsity is reached "
     "(TF Model Optimization refuses -1 here too); only constant_sparsity prunes until training stops, without "
     "end_step"),
], ids=["off grid", "before the second update", "no update", "constant without update", "constant -1",
        "polynomial -1"])
def test_schedules_that_fall_short_are_refused_with_the_real_updates(schedule: str, expected: str) -> None:
    assert error(schedule).splitlines()[0] == expected


def test_on_grid_and_constant_off_grid_schedules_are_accepted() -> None:
    for schedule in ("{kind: polynomial_decay, final_sparsity: 0.8, end_step: 300}",
                     "{kind: polynomial_decay, final_sparsity: 0.8, begin_step: 5, end_step: 105}",
                     "{kind: constant_sparsity, sparsity: 0.5, begin_step: 5, end_step: 50}"):
        assert build_ir(load(schedule)).pruning is not None


@pytest.mark.parametrize(("variables", "named"), [
    ('["bn/gamma"]', "variable 'bn/gamma'"),
    ('["fc/kernel", "bn/*"]', "variables 'bn/gamma', 'bn/beta'"),
    ("trainable", "variables 'bn/gamma', 'bn/beta'"),
])
def test_batch_norm_parameters_are_refused(variables: str, named: str) -> None:
    message = error("{kind: constant_sparsity, sparsity: 0.5}", variables)
    assert message.splitlines()[0].split(": error: ")[1] == (
        f"prune selects batch-norm {named}; gamma and beta hold one value per channel, so a zero gamma makes a whole "
        "channel constant, which stays in the graph and costs what it did (pruning zeroes single weights, and TF Model "
        "Optimization prunes no batch-norm weight): select kernels, e.g. ['conv1/kernel', 'head/*/kernel']")


def test_a_batch_norm_with_nothing_to_fold_into_is_refused_for_what_pruning_does_not_for_a_fold() -> None:
    """After an input nothing folds it (export keeps a BatchNormalization node, its zero gamma in it): the refusal's
    reason is the per-channel effect, which holds there too; it used to say export folds it into the layer before."""
    spec = SPEC.replace("outputs: {{y: bn}}", "outputs: {{y: fc}}").replace(
        "  - {{name: fc, op: dense, input: x, units: 4}}\n  - {{name: bn, op: batch_norm}}",
        "  - {{name: bn, op: batch_norm, input: x}}\n  - {{name: fc, op: dense, units: 4}}")
    with pytest.raises(SpecError) as caught:
        build_ir(load_spec_text(spec.format(schedule="{kind: constant_sparsity, sparsity: 0.5}",
                                            variables='["bn/gamma"]'), "s.yaml", Path("/specs/s.yaml")))
    assert "'bn/gamma'; gamma and beta hold one value per channel, so a zero gamma makes a whole channel constant" \
        in str(caught.value) and "fold" not in str(caught.value)
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("BatchNormalization", ["x", "gamma", "beta", "mean", "var"], ["y"])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 2])])
    weights = {"gamma": np.array([0.0, 2.0], np.float32), "beta": np.ones(2, np.float32),
               "mean": np.zeros(2, np.float32), "var": np.ones(2, np.float32)}
    assert fold_batch_norms(graph, weights) == 0 and [n.op_type for n in graph.node] == ["BatchNormalization"]


def test_folding_a_negative_scale_keeps_pruned_kernel_entries_plus_zero() -> None:
    """A pruned (+0.0) kernel entry times a negative batch-norm scale was written as -0.0."""
    helper = onnx.helper
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["g"]),
         helper.make_node("BatchNormalization", ["g", "gamma", "beta", "mean", "var"], ["y"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 2])])
    weights = {"w": np.array([[0.0, 1.5], [-2.0, 0.0]], np.float32), "b": np.zeros(2, np.float32),
               "gamma": np.array([-1.0, 2.0], np.float32), "beta": np.zeros(2, np.float32),
               "mean": np.zeros(2, np.float32), "var": np.ones(2, np.float32)}
    assert fold_batch_norms(graph, weights) == 1
    kernel = weights["w"]
    assert np.count_nonzero(kernel) == 2 and not np.signbit(kernel[kernel == 0]).any()


def test_restore_plan_says_why_a_mask_is_not_taken() -> None:
    entries = {"pruning/fc/kernel": Entry("pruning/fc/kernel", (4, 4), "float32")}
    source = RestoreSource.model_validate({"from": "run"})
    dense: Targets = {"fc/kernel": ((4, 4), "float32")}
    other: Targets = dense | {"pruning/out/kernel": ((4, 2), "float32")}
    pruned: Targets = dense | {"pruning/fc/kernel": ((4, 4), "float32")}
    reasons = [[u.reason for u in plan_source("run", Path("run"), entries, source, t).unused] for t in (dense, other)]
    assert reasons == [["pruning mask of 'fc/kernel': restored only into a spec that prunes that weight, and this one "
                        "has no prune section"],
                       ["pruning mask of 'fc/kernel': restored only into a spec that prunes that weight, and this one "
                        "does not prune it"]]
    assert list(plan_source("run", Path("run"), entries, source, pruned).rows) == ["pruning/fc/kernel"]
