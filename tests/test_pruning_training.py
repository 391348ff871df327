"""Pruning with real TensorFlow: schedules and masks against float64 numpy, a small training run of the example,
its checkpoints, the masked forward pass, the export's exact zeros, and restore maps with and without masks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specgen.cli import main
from specgen.ir.resolve import build_ir
from specgen.runtime.lib.onnx_layout import to_onnx
from specgen.spec.load import load_spec

tf = pytest.importorskip("tensorflow")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "specs" / "digits_cnn_pruned.yaml"
DIGITS = ROOT / "examples" / "data" / "digits.npz"
PRUNED = ("head/fc/kernel", "head/out/kernel")
# The CI-sized run: masks at steps 5, 9, 13 and 17 (update b is step b, as in TFMOT 0.8), from 30% to 80%, each from
# the weights of the checkpoint before it (a checkpoint every 4 updates).
BEGIN, END, FREQUENCY, STEPS, INITIAL, FINAL, POWER = 5, 17, 4, 20, 0.3, 0.8, 3.0


def tfmot_schedule(step: np.ndarray, kind: str, begin: int, end: int | None, frequency: int,
                   initial: float, final: float, power: float) -> tuple[np.ndarray, np.ndarray]:
    """TF Model Optimization's documented schedules (pruning_schedule.py), in float64 numpy."""
    step = np.asarray(step, np.int64)
    inside = (step >= begin) & ((step <= end) if end is not None else True)
    prune = inside & (np.mod(step - begin, frequency) == 0)
    if kind == "constant_sparsity":
        return prune, np.full(step.shape, final, np.float64)
    p = np.minimum(1.0, np.maximum(0.0, (step - begin).astype(np.float64) / (end - begin)))
    return prune, (initial - final) * np.power(1.0 - p, power) + final


def reference_mask(weight: np.ndarray, sparsity: float) -> np.ndarray:
    """Keep max(round-half-even(n (1 - s)), 1) largest |w|, equal magnitudes in flat index order (a stable sort)."""
    flat = np.abs(weight.astype(np.float64)).ravel()
    keep = int(max(np.round(flat.size * (1.0 - sparsity)), 1))
    order = np.argsort(-flat, kind="stable")
    mask = np.zeros(flat.size, np.float32)
    mask[order[:keep]] = 1.0
    return mask.reshape(weight.shape)


@pytest.mark.parametrize(("kind", "begin", "end", "frequency", "initial", "final", "power"), [
    ("constant_sparsity", 0, None, 1, 0.5, 0.5, 1.0),
    ("constant_sparsity", 7, 40, 5, 0.9, 0.9, 1.0),
    ("polynomial_decay", 0, 100, 10, 0.0, 0.8, 3.0),
    ("polynomial_decay", 13, 77, 3, 0.25, 0.95, 1.5),
    ("polynomial_decay", 5, 6, 1, 0.6, 0.1, 2.0),  # decreasing sparsity is allowed, as in TFMOT
])
def test_schedules_follow_tfmot_formulas(kind: str, begin: int, end: int | None, frequency: int, initial: float,
                                         final: float, power: float) -> None:
    from specgen.runtime.lib import pruning

    schedule = (pruning.constant_sparsity(final, begin_step=begin, end_step=end, frequency=frequency)
                if kind == "constant_sparsity" else
                pruning.polynomial_decay(initial, final, begin_step=begin, end_step=end or 0, frequency=frequency,
                                         power=power))
    steps = np.arange(0, 260)
    prune, sparsity = schedule(tf.constant(steps, tf.int64))
    want_prune, want_sparsity = tfmot_schedule(steps, kind, begin, end, frequency, initial, final, power)
    np.testing.assert_array_equal(prune.numpy(), want_prune)
    np.testing.assert_allclose(np.broadcast_to(sparsity.numpy(), steps.shape), want_sparsity, rtol=0, atol=1e-15)


@pytest.mark.parametrize("shape", [(3, 3, 1, 16), (256, 64), (10,), (1,)])
@pytest.mark.parametrize("sparsity", [0.0, 0.25, 0.35, 0.5, 0.8, 0.12345, 0.999])
def test_mask_keeps_exactly_the_largest_magnitudes(shape: tuple[int, ...], sparsity: float) -> None:
    from specgen.runtime.lib import pruning

    rng = np.random.default_rng(sum(shape))
    # One decimal: many equal magnitudes (and signs), so the tie rule decides which are kept.
    weight = np.round(rng.standard_normal(shape), 1).astype(np.float32)
    mask = pruning.magnitude_mask(tf.constant(weight), tf.constant(sparsity, tf.float64)).numpy()
    expected = reference_mask(weight, sparsity)
    np.testing.assert_array_equal(mask, expected)
    assert int((mask == 0).sum()) == weight.size - max(round(weight.size * (1 - sparsity)), 1)


def spec_text(run: Path, restore: str = "") -> str:
    text = EXAMPLE.read_text().replace("../data/digits.npz", str(DIGITS))
    schedule = (f"{{kind: polynomial_decay, initial_sparsity: {INITIAL}, final_sparsity: {FINAL}, "
                f"begin_step: {BEGIN}, end_step: {END}, frequency: {FREQUENCY}}}")
    start = text.index("  schedule: {kind: polynomial_decay")
    text = text[:start] + f"  schedule: {schedule}\n" + text[text.index("\n\n", start):]
    checkpoint = text.index("checkpoint:")
    end = text.index("\n\n", checkpoint)
    return text[:checkpoint] + f"checkpoint:\n  dir: {run}\n  every_steps: 4\n  keep: 10\n{restore}" + text[end:]


def read(run: Path, step: int) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(str(run / f"ckpt-{step:08d}" / "variables"))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("pruned")
    spec = folder / "spec.yaml"
    spec.write_text(spec_text(folder / "run"))
    assert main(["train", str(spec), "--steps", str(STEPS), "--quiet"]) == 0
    return {"folder": folder, "spec": spec, "run": folder / "run",
            "checkpoints": {s: read(folder / "run", s) for s in range(4, STEPS + 1, 4)}}


def test_masks_reach_the_scheduled_sparsity_exactly(trained: dict[str, Any]) -> None:
    """The checkpoint after update t holds the masks of the last pruning step s <= t (update s), with exactly the
    scheduled count of zeros; each is the top-k of the weights saved at step s - 1."""
    saved = trained["checkpoints"]
    for step, values in saved.items():
        mask_steps = [s for s in range(1, step + 1) if tfmot_schedule(np.array(s), "polynomial_decay", BEGIN, END,
                                                                FREQUENCY, INITIAL, FINAL, POWER)[0]]
        for path in PRUNED:
            mask = values[f"pruning/{path}"]
            assert set(np.unique(mask)) <= {0.0, 1.0}
            if not mask_steps:
                assert mask.min() == 1.0, (step, path)
                continue
            last = mask_steps[-1]
            sparsity = float(tfmot_schedule(np.array(last), "polynomial_decay", BEGIN, END, FREQUENCY, INITIAL,
                                            FINAL, POWER)[1])
            assert int((mask == 0).sum()) == mask.size - max(round(mask.size * (1 - sparsity)), 1), (step, path)
            assert last - 1 in saved  # the weights the mask was computed from
            np.testing.assert_array_equal(mask, reference_mask(saved[last - 1][path], sparsity), err_msg=path)
    final = saved[STEPS]
    assert [int((final[f"pruning/{p}"] == 0).sum()) for p in PRUNED] == [16384 - 3277, 640 - 128]  # 80%


def test_pruned_weights_and_shadows_are_exact_zeros_after_every_update(trained: dict[str, Any]) -> None:
    for step, values in trained["checkpoints"].items():
        for path in PRUNED:
            pruned = values[f"pruning/{path}"] == 0
            for key in (path, f"ema/{path}"):
                assert np.all(values[key][pruned] == 0) and not np.signbit(values[key][pruned]).any(), (step, key)
            assert np.count_nonzero(values[path][~pruned]) == np.count_nonzero(~pruned)  # kept ones stay nonzero


def test_forward_reads_masked_weights_and_pruned_entries_get_no_gradient(trained: dict[str, Any]) -> None:
    from specgen.runtime.lib.generated import load_generated
    from specgen.runtime.lib.interface import PrunedModel

    ir = build_ir(load_spec(trained["spec"]))
    pruned_model = getattr(load_generated(trained["run"] / "code" / "model.py"), ir.class_name)()
    assert isinstance(pruned_model, PrunedModel)
    plain = load_generated(ROOT / "generated" / "digits_cnn" / "model.py").DigitsCnn()  # no masks
    rng = np.random.default_rng(0)
    values = {p: rng.standard_normal(v.shape).astype(np.float32) for p, v in pruned_model.variables_by_path().items()}
    values["bn1/moving_variance"] = np.abs(values["bn1/moving_variance"]) + 0.5
    masks = {p: (rng.random(values[p].shape) < 0.3).astype(np.float32) for p in PRUNED}  # weights stay nonzero
    for path, var in pruned_model.variables_by_path().items():
        var.assign(values[path])
        plain.variables_by_path()[path].assign(values[path] * masks[path] if path in masks else values[path])
    for path, mask in masks.items():
        pruned_model.masks[path].assign(mask)
    image = tf.constant(rng.standard_normal((5, 8, 8, 1)).astype(np.float32))
    with tf.GradientTape() as tape:
        logits = pruned_model({"image": image})["logits"]
        total = tf.reduce_sum(logits * logits)
    np.testing.assert_array_equal(logits.numpy(), plain({"image": image})["logits"].numpy())
    kernels = [pruned_model.variables_by_path()[p] for p in PRUNED]
    for path, gradient in zip(PRUNED, tape.gradient(total, kernels), strict=True):
        assert np.all(gradient.numpy()[masks[path] == 0] == 0), path
        assert np.count_nonzero(gradient.numpy()[masks[path] == 1]) > 0, path


def test_export_writes_exact_zeros(trained: dict[str, Any]) -> None:
    import onnx
    from onnx import numpy_helper

    out = trained["folder"] / "export"
    assert main(["export", str(trained["spec"]), "--checkpoint", str(trained["run"]), "-o", str(out)]) == 0
    ir = build_ir(load_spec(trained["spec"]))
    initializers = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(out / "model.onnx")).graph.initializer}
    final = trained["checkpoints"][STEPS]
    for var in (v for v in ir.model_variables if v.path in PRUNED):
        exported, mask = initializers[var.onnx_name], to_onnx(var, final[f"pruning/{var.path}"])  # ONNX layout
        # weights: ema, masked by the checkpoint's masks: +0.0 exactly where pruned, the shadow elsewhere
        assert np.all(exported[mask == 0] == 0) and not np.signbit(exported[mask == 0]).any(), var.path
        assert np.count_nonzero(exported) == np.count_nonzero(mask), var.path


@pytest.mark.parametrize("mode", ["along", "excluded", "over unpruned weights"])
def test_restore_brings_masks_along_or_leaves_them_all_ones(trained: dict[str, Any], mode: str,
                                                            tmp_path: Path) -> None:
    source = trained["run"] / f"ckpt-{STEPS:08d}"
    restore = {
        "along": f"  restore:\n    - from: {source}\n",
        "excluded": f'  restore:\n    - from: {source}\n      exclude: ["pruning/*"]\n',
        # weights from step 4 (nothing pruned yet: the first mask update is update 5), masks from step 20
        "over unpruned weights": (f"  restore:\n    - from: {trained['run'] / 'ckpt-00000004'}\n    - from: {source}\n"
                                  '      exclude: ["conv1/*", "bn1/*", "head/*"]\n'),
    }[mode]
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text(tmp_path / "run", restore))
    assert main(["train", str(spec), "--steps", "0", "--quiet"]) == 0
    started, final = read(tmp_path / "run", 0), trained["checkpoints"][STEPS]
    weights = trained["checkpoints"][4] if mode == "over unpruned weights" else final
    for path in PRUNED:
        mask = started[f"pruning/{path}"]
        if mode == "excluded":
            assert mask.min() == 1.0, path
            np.testing.assert_array_equal(started[path], final[path])  # the pruned zeros came with the weights
        else:
            np.testing.assert_array_equal(mask, final[f"pruning/{path}"])
            np.testing.assert_array_equal(started[path], np.where(mask > 0, weights[path], np.float32(0)))


MLP = f"""\
specgen: 1
name: pruned_mlp
inputs: {{image: {{shape: [8, 8, 1]}}}}
outputs: {{logits: out}}
layers:
  - {{name: flat, op: flatten}}
  - {{name: hidden, op: dense, units: 24, activation: relu}}
  - {{name: out, op: dense, units: 10}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers: {{all: {{kind: sgd, momentum: 0.9, learning_rate: 0.05, weight_decay: 0.01}}}}
train: {{batch_size: 16, accumulate: 2, seed: 1}}
prune:
  variables: trainable
  schedule: {{kind: constant_sparsity, sparsity: 0.6, begin_step: 3, frequency: 2}}
data:
  train: {{npz: {DIGITS}, features: {{image: x_train}}, labels: {{label: y_train}}}}
checkpoint: {{dir: run, every_steps: 1, keep: 10}}
"""


def test_accumulating_run_with_momentum_and_weight_decay_keeps_exact_sparsity(tmp_path: Path) -> None:
    """accumulate: 2 (masks recomputed on an update's first micro-batch only), bare `trainable` (biases too), a
    constant schedule without end; SGD momentum and weight decay would move pruned entries off zero."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(MLP)
    assert main(["train", str(spec), "--steps", "9", "--quiet"]) == 0
    saved = {s: read(tmp_path / "run", s) for s in range(1, 10)}
    for path in ("hidden/kernel", "hidden/bias", "out/kernel", "out/bias"):
        masks = {s: v[f"pruning/{path}"] for s, v in saved.items()}
        assert all(masks[s].min() == 1.0 for s in (1, 2)), path  # the first recomputation is in update 3
        for step in (3, 5, 7):  # recomputed before update `step` from the weights saved at step - 1
            np.testing.assert_array_equal(masks[step], reference_mask(saved[step - 1][path], 0.6), err_msg=path)
            np.testing.assert_array_equal(masks[step + 1], masks[step], err_msg=path)  # none in update step + 1
        for step in range(3, 10):
            mask, value = masks[step], saved[step][path]
            assert int((mask == 0).sum()) == mask.size - max(round(mask.size * 0.4), 1), (step, path)
            assert np.all(value[mask == 0] == 0) and not np.signbit(value[mask == 0]).any(), (step, path)


def test_report_reads_the_sparsity_of_a_checkpoints_masks(trained: dict[str, Any],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = trained["run"] / "ckpt-00000012"
    assert main(["report", str(trained["spec"]), "--checkpoint", str(checkpoint)]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    masks = trained["checkpoints"][12]
    zeros = {p: int((masks[f"pruning/{p}"] == 0).sum()) for p in PRUNED}
    sparsity = float(tfmot_schedule(np.array(9), "polynomial_decay", BEGIN, END, FREQUENCY, INITIAL, FINAL, POWER)[1])
    for path in PRUNED:
        size = masks[f"pruning/{path}"].size
        row = next(line for line in lines if line[:1] == [path] and line[2:3] == [f"{size:,}"])
        assert zeros[path] == size - max(round(size * (1 - sparsity)), 1)  # the mask of step 9: 0.652 of 16,384
        assert row[-1] == f"{zeros[path] / size:.4f}"
    total = next(line for line in lines if line[:1] == ["total"] and len(line) == 6)
    assert total[-1] == f"{sum(zeros.values()) / (16384 + 640):.4f}"
    assert next(line for line in lines if line[:1] == ["pruned"])[-3:] == ["kept", "checkpoint", "sparsity"]


def test_export_of_a_restore_plan_applies_the_restored_masks(trained: dict[str, Any], tmp_path: Path) -> None:
    """`specgen export` without --checkpoint: weights from step 4 (no entry pruned yet), masks from step 20; the
    export holds the step-4 weights with +0.0 where the step-20 masks prune."""
    import json

    import onnx
    from onnx import numpy_helper

    dense, masks = trained["run"] / "ckpt-00000004", trained["run"] / "ckpt-00000020"
    restore = (f"  restore:\n    - from: {dense}\n    - from: {masks}\n"
               '      exclude: ["conv1/*", "bn1/*", "head/*"]\n')  # only the masks from the second
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text(tmp_path / "run", restore))
    out = tmp_path / "export"
    assert main(["export", str(spec), "-o", str(out)]) == 0
    weights, final = trained["checkpoints"][4], trained["checkpoints"][STEPS]
    initializers = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(out / "model.onnx")).graph.initializer}
    for var in (v for v in build_ir(load_spec(spec)).model_variables if v.path in PRUNED):
        mask = final[f"pruning/{var.path}"]
        assert np.count_nonzero(weights[var.path]) == weights[var.path].size  # nothing pruned at step 4
        expected = np.where(mask > 0, weights[var.path], np.float32(0))
        exported = initializers[var.onnx_name]
        np.testing.assert_array_equal(exported, to_onnx(var, expected))  # head/fc's rows follow the NCHW flatten
        assert not np.signbit(exported[exported == 0]).any()
    origins = json.loads((out / "export.json").read_text())["restore"]["variables"]
    assert not any(path.startswith("pruning/") for path in origins)  # export.json lists model variables only


def test_resume_continues_the_masks_as_an_uninterrupted_run(trained: dict[str, Any], tmp_path: Path) -> None:
    """Masks are checkpoint state: 8 updates, then --resume for 4 more, ends where the 20-update run was at 12
    (mask updates 5 and 9 straddle the resume: the resumed run's first update is step 9)."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text(tmp_path / "run"))
    assert main(["train", str(spec), "--steps", "8", "--quiet"]) == 0
    assert main(["train", str(spec), "--resume", "--steps", "4", "--quiet"]) == 0
    resumed, straight = read(tmp_path / "run", 12), trained["checkpoints"][12]
    for path in PRUNED:
        np.testing.assert_array_equal(resumed[f"pruning/{path}"], straight[f"pruning/{path}"], err_msg=path)
        np.testing.assert_allclose(resumed[path], straight[path], rtol=0, atol=1e-6, err_msg=path)
