"""Fine-tuning, round 13: the second stage is a new run (docs/finetune.md); a fine-tuning start records what it
restored (provenance.json, `specgen diff RUN RUN`); float16 and bfloat16 weights widen exactly into float32
variables; export without --checkpoint and `train --probe` compute with a new run's step 0 (target networks
copied, pruning masks applied), and restore-plan's rows say `copied` for the targets."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import yaml
from cli_helpers import run_cli

tf = pytest.importorskip("tensorflow")

from specgen.ir.resolve import build_ir  # noqa: E402
from specgen.ir.restore_rules import Entry, RestorePlan, combine, plan_source, summary_line  # noqa: E402
from specgen.ir.restore_targets import restore_targets, saved_keys  # noqa: E402
from specgen.runtime.commands.restore import plan_restore, read_plan  # noqa: E402
from specgen.spec.io import RestoreSource  # noqa: E402
from specgen.spec.load import load_spec, load_spec_text  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"
CHAIN = ROOT / "examples" / "chain_dqn" / "chain.npz"


def _checkpoint(prefix: Path) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(str(prefix))
    return {k: np.asarray(reader.get_tensor(k)) for k in reader.get_variable_to_shape_map()}


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# --- 1. the second stage of docs/finetune.md: a new run that restores the first -------------------------------

STAGE1 = """\
specgen: 1
name: ft
inputs:
  image: {shape: [8, 8, 1], dtype: float32}
outputs:
  logits: cls/out
layers:
  - {name: stem/conv, op: conv2d, input: image, filters: 4, kernel: 3, padding: same}
  - {name: stem/bn, op: batch_norm, momentum: 0.9}
  - {name: relu1, op: relu}
  - {name: flat, op: flatten}
  - {name: cls/out, op: dense, units: 10}
collections:
  stem: ["stem/*"]
frozen: [stem]
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers:
  rest: {kind: adam, learning_rate: 0.001}
train: {batch_size: 64, epochs: 1, seed: 7}
data:
  train: {npz: digits.npz, features: {image: x_train}, labels: {label: y_train}}
checkpoint: {dir: run_ft}
"""
# What finetune.md's second stage changes: the stem out of `frozen`, an optimizer of its own, a new run folder.
STAGE2 = STAGE1.replace("frozen: [stem]\n", "").replace(
    "  rest: {kind: adam, learning_rate: 0.001}\n",
    "  rest: {kind: adam, learning_rate: 0.001, variables: [\"cls/*\"]}\n"
    "  body: {kind: adam, learning_rate: 0.0001, variables: stem}\n")


def test_the_second_stage_is_a_new_run_that_restores_the_first(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(DIGITS, tmp_path)
    (tmp_path / "ft.yaml").write_text(STAGE1)
    (tmp_path / "resume.yaml").write_text(STAGE2)
    (tmp_path / "stage2.yaml").write_text(STAGE2.replace(
        "checkpoint: {dir: run_ft}", "checkpoint: {dir: run_s2, restore: [{from: run_ft}]}"))
    assert run_cli(["train", "ft.yaml", "--steps", "2", "--quiet"], capsys, tmp_path)[0] == 0
    code, _, err = run_cli(["train", "resume.yaml", "--resume", "--steps", "2", "--quiet"], capsys, tmp_path)
    assert code == 1 and "lacks 'optimizers/body/" in err and "checkpoint.restore: [{from: run_ft/ckpt-00000002}]" in err
    code, out, _ = run_cli(["train", "stage2.yaml", "--steps", "0", "--quiet"], capsys, tmp_path)
    assert code == 0
    assert "restore: restored 8, initialized 0, unused 7, mismatched 0" in out.splitlines()
    stage1, start = _checkpoint(tmp_path / "run_ft/ckpt-00000002/variables"), \
        _checkpoint(tmp_path / "run_s2/ckpt-00000000/variables")
    for path in ("stem/conv/kernel", "stem/bn/gamma", "stem/bn/moving_mean", "cls/out/kernel", "cls/out/bias"):
        assert _same_bits(start[path], stage1[path]), path  # every model variable carries over
    assert int(start["global_step"]) == 0 and int(stage1["global_step"]) == 2  # the step restarts
    for name in ("rest", "body"):  # both optimizers start fresh: no step taken, moments zero
        assert int(start[f"optimizers/{name}/iterations"]) == 0
    assert int(stage1["optimizers/rest/iterations"]) == 2
    assert not np.any(start["optimizers/rest/m/cls/out/kernel"]) and np.any(stage1["optimizers/rest/m/cls/out/kernel"])
    code, out, _ = run_cli(["train", "stage2.yaml", "--resume", "--steps", "2", "--quiet"], capsys, tmp_path)
    assert code == 0 and "step 2" in out  # and the second stage trains on, resumable as any run


def _doc_stage2() -> dict[str, Any]:
    text = (ROOT / "docs" / "finetune.md").read_text()
    section = text[text.index("### A second stage"):]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block is not None
    return dict(yaml.safe_load(block.group(1)))


def test_the_docs_second_stage_fits_the_shipped_spec_and_restores_every_model_variable() -> None:
    """finetune.md's YAML sections on the shipped spec: they build (each glob selects, the split of the backbone
    is whole), and a checkpoint of stage 1 (its keys, as `specgen diff` plans) restores every model variable."""
    shipped = ROOT / "examples" / "finetune" / "mobilenet_v2_digits.yaml"
    stage1 = build_ir(load_spec(shipped))
    tree = yaml.safe_load(shipped.read_text()) | _doc_stage2()
    loaded = load_spec_text(yaml.safe_dump(tree, sort_keys=False), "stage2.yaml", shipped.parent / "stage2.yaml")
    stage2 = build_ir(loaded)
    assert stage2.training is not None
    assert {o.name: len(o.paths) for o in stage2.training.optimizers} == {"head": 2, "top": 12}
    keys = {k: Entry(k, shape, dtype) for k, (shape, dtype) in saved_keys(stage1).items()}
    source = RestoreSource.model_validate({"from": "../../runs/mobilenet_v2_digits"})
    targets = restore_targets(stage2)
    plan = combine([(source, plan_source("stage1", Path("stage1"), keys, source, targets))], targets,
                   RestorePlan([]))
    assert summary_line(plan).startswith("restored 262, initialized 0, ")


# --- 4. export without --checkpoint and --probe compute with the run's step 0 ----------------------------------

def _onnx_outputs(folder: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    return [np.asarray(x) for x in session.run(None, {i.name: feeds[i.name] for i in session.get_inputs()})]


def _cells(line: str) -> list[str]:
    """A plan table row's non-empty cells (columns are two spaces or more apart)."""
    return re.split(r"\s{2,}", line.strip())


def _probe_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("probe: "))


def _loss(line: str) -> str:
    found = re.search(r"training-mode loss (\S+);", line)
    assert found is not None, line
    return found.group(1)


def test_targets_are_copied_after_the_restore_in_train_export_and_probe(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(CHAIN, tmp_path)
    spec = (ROOT / "examples" / "specs" / "chain_dqn.yaml").read_text().replace("../chain_dqn/chain.npz", "chain.npz")
    (tmp_path / "dqn.yaml").write_text(spec + "checkpoint: {dir: run_dqn}\n")
    (tmp_path / "ft.yaml").write_text(spec.replace("onnx: {outputs: [q]}", "onnx: {outputs: [q, td_target]}")
                                      + "checkpoint: {dir: run_ft0, restore: [{from: run_dqn, exclude: "
                                        "[\"target_qnet/*\"]}]}\n")
    assert run_cli(["train", "dqn.yaml", "--steps", "3", "--quiet"], capsys, tmp_path)[0] == 0
    code, out, _ = run_cli(["restore-plan", "ft.yaml"], capsys, tmp_path)
    assert code == 0
    rows = [_cells(line) for line in out.splitlines() if line.startswith("target_qnet/")]
    assert rows == [
        [f"target_qnet/{p}", "copied", shape, f"copied from 'qnet/{p}' after the restore"]
        for p, shape in (("hidden/kernel", "float32[6, 32]"), ("hidden/bias", "float32[32]"),
                         ("out/kernel", "float32[32, 2]"), ("out/bias", "float32[2]"))]
    summary = "restored 4, copied 4, initialized 0, unused 15, mismatched 0"
    assert out.splitlines()[-1] == summary
    code, out, _ = run_cli(["train", "ft.yaml", "--steps", "0", "--quiet"], capsys, tmp_path)
    assert code == 0 and f"restore: {summary}" in out.splitlines()
    code, out, _ = run_cli(["export", "ft.yaml", "-o", "exp_plan"], capsys, tmp_path)
    assert code == 0 and f"restore: {summary}" in out.splitlines()
    assert run_cli(["export", "ft.yaml", "--checkpoint", "run_ft0", "-o", "exp_ck0"], capsys, tmp_path)[0] == 0
    data = np.load(tmp_path / "chain.npz")
    feeds = {k: data[k][:16].astype(np.int32 if k == "action" else np.float32) for k in data.files}
    plan, step0 = _onnx_outputs(tmp_path / "exp_plan", feeds), _onnx_outputs(tmp_path / "exp_ck0", feeds)
    for a, b in zip(plan, step0, strict=True):  # q and td_target: the run's step 0
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    origin = json.loads((tmp_path / "exp_plan" / "export.json").read_text())["restore"]["variables"]
    assert origin["target_qnet/out/bias"] == "copied from 'qnet/out/bias' after the restore"
    resumed = _probe_line(run_cli(["train", "ft.yaml", "--probe", "--resume"], capsys, tmp_path)[1])
    fresh = _probe_line(run_cli(["train", "ft.yaml", "--probe"], capsys, tmp_path)[1])
    assert "weights from the initializers and checkpoint.restore" in fresh
    assert _loss(fresh) == _loss(resumed)


PRUNED = """\
specgen: 1
name: pp
inputs:
  image: {shape: [8, 8, 1], dtype: float32}
outputs:
  logits: out
layers:
  - {name: flat, op: flatten, input: image}
  - {name: fc, op: dense, units: 16, activation: relu}
  - {name: out, op: dense, units: 10}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers:
  all: {kind: adam, learning_rate: 0.01}
prune:
  variables: ["fc/kernel"]
  schedule: {kind: constant_sparsity, sparsity: 0.5, begin_step: 0, frequency: 1}
train: {batch_size: 64, epochs: 1, seed: 0}
data:
  train: {npz: digits.npz, features: {image: x_train}, labels: {label: y_train}}
checkpoint: {dir: run_pp}
"""


def test_probe_applies_restored_pruning_masks_as_the_run_does(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(DIGITS, tmp_path)
    (tmp_path / "pp.yaml").write_text(PRUNED)
    (tmp_path / "ft.yaml").write_text(PRUNED.replace(
        "checkpoint: {dir: run_pp}", "checkpoint: {dir: run_ft, restore: [{from: run_pp, exclude: [\"fc/kernel\"]}]}"))
    assert run_cli(["train", "pp.yaml", "--steps", "3", "--quiet"], capsys, tmp_path)[0] == 0
    assert run_cli(["train", "ft.yaml", "--steps", "0", "--quiet"], capsys, tmp_path)[0] == 0
    kernel = _checkpoint(tmp_path / "run_ft/ckpt-00000000/variables")["fc/kernel"]
    assert np.count_nonzero(kernel == 0) == kernel.size // 2  # the restored mask zeroed the fresh weight
    resumed = _probe_line(run_cli(["train", "ft.yaml", "--probe", "--resume"], capsys, tmp_path)[1])
    fresh = _probe_line(run_cli(["train", "ft.yaml", "--probe"], capsys, tmp_path)[1])
    assert _loss(fresh) == _loss(resumed)


# --- 2. a fine-tuning start records what it restored -----------------------------------------------------------

PRE = """\
specgen: 1
name: pre
inputs:
  image: {shape: [8, 8, 1], dtype: float32}
outputs:
  logits: out
layers:
  - {name: fc, op: dense, input: image, units: 8, activation: relu}
  - {name: flat, op: flatten}
  - {name: out, op: dense, units: 10}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers:
  all: {kind: adam, learning_rate: 0.01}
train: {batch_size: 64, epochs: 1, seed: 0}
data:
  train: {npz: digits.npz, features: {image: x_train}, labels: {label: y_train}}
checkpoint: {dir: run_pre}
"""


def _digest(values: dict[str, np.ndarray], paths: list[str]) -> str:
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(f"{path}\0{values[path].dtype.name}\0{list(values[path].shape)}\n".encode())
        digest.update(np.ascontiguousarray(values[path]).tobytes())
    return digest.hexdigest()


def test_a_fine_tuning_start_records_what_it_restored_and_diff_shows_a_change(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(DIGITS, tmp_path)
    (tmp_path / "pre.yaml").write_text(PRE)
    (tmp_path / "ft.yaml").write_text(PRE.replace("name: pre", "name: ft").replace(
        "dir: run_pre}", "dir: run_a, restore: [{from: run_pre}]}"))
    assert run_cli(["train", "pre.yaml", "--steps", "3", "--quiet"], capsys, tmp_path)[0] == 0
    assert run_cli(["train", "ft.yaml", "--steps", "1", "--quiet"], capsys, tmp_path)[0] == 0
    assert run_cli(["train", "pre.yaml", "--resume", "--steps", "3", "--quiet"], capsys, tmp_path)[0] == 0
    args = ["train", "ft.yaml", "--steps", "1", "--quiet", "--set", "checkpoint.dir=run_b"]
    assert run_cli(args, capsys, tmp_path)[0] == 0
    weights = ["fc/kernel", "fc/bias", "out/kernel", "out/bias"]
    digests = {}
    for run, step in (("run_a", 3), ("run_b", 6)):
        record = json.loads((tmp_path / run / "provenance.json").read_text())["restore"]
        digests[run] = _digest(_checkpoint(tmp_path / f"run_pre/ckpt-{step:08d}/variables"), weights)
        assert record == [{"from": "run_pre", "read": f"run_pre/ckpt-{step:08d}/variables", "kind": "checkpoint",
                           "restored": 4, "values_sha256": digests[run]}]
    _, out, _ = run_cli(["diff", "run_a", "run_b"], capsys, tmp_path)
    rows = [line.split() for line in out[out.index("\nrun: "):].splitlines() if line.startswith("  changed")]
    assert [r[1:] for r in rows] == [
        ["overrides", "[]", '["checkpoint.dir=run_b"]'],
        ["restore[0].read", "run_pre/ckpt-00000003/variables", "run_pre/ckpt-00000006/variables"],
        ["restore[0].values_sha256", digests["run_a"], digests["run_b"]]]
    # A resume restores nothing again: it keeps the record of the start that did.
    assert run_cli(["train", "ft.yaml", "--resume", "--steps", "2", "--quiet"], capsys, tmp_path)[0] == 0
    record = json.loads((tmp_path / "run_a" / "provenance.json").read_text())
    assert record["restore"][0]["values_sha256"] == digests["run_a"]
    assert [sorted(start) for start in record["starts"]][1] == ["step"]


# --- 3. half-precision weights widen exactly -------------------------------------------------------------------

SMALL = """\
specgen: 1
name: s
inputs:
  x: {shape: [4]}
outputs:
  y: fc
layers:
  - {name: fc, op: dense, input: x, units: 3}
"""


def _plan_lines(out: str) -> list[str]:
    """The note cell of each row of the plan table."""
    return [_cells(line)[-1] for line in out.splitlines() if line.startswith("fc/")]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_keras_weights_widen_exactly_as_keras_loads_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], dtype: str) -> None:
    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(3)
    half = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="fc", dtype=dtype)], name="k")
    half.layers[0].bias.assign(np.array([0.1, -2.3, 7.77], np.float32))  # a bias that is not all zeros
    half.save(tmp_path / "k.keras")
    half.save_weights(tmp_path / "k.weights.h5")
    full = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="fc")], name="k")
    full.load_weights(tmp_path / "k.weights.h5")  # Keras' own widening: the reference
    expected = {"fc/kernel": full.layers[0].kernel.numpy(), "fc/bias": full.layers[0].bias.numpy()}
    (tmp_path / "s.yaml").write_text(SMALL)
    loaded = load_spec(tmp_path / "s.yaml")
    for name in ("k.keras", "k.weights.h5"):
        code, out, _ = run_cli(["restore-plan", "s.yaml", "--from", name], capsys, tmp_path)
        assert code == 0
        assert _plan_lines(out) == [f"{dtype} -> float32, exact"] * 2
        source = RestoreSource.model_construct(from_=name)
        values = read_plan(plan_restore(loaded, restore_targets(build_ir(loaded)), [(tmp_path / name, source)]))
        for path, value in expected.items():
            assert value.dtype == np.float32 and _same_bits(values[path], value), (name, path)


def _tf1(prefix: Path, values: dict[str, np.ndarray]) -> None:
    graph = tf.Graph()
    with graph.as_default():
        variables = [tf.compat.v1.Variable(value, name=name) for name, value in values.items()]
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, str(prefix))


def test_half_precision_checkpoints_widen_and_rounding_casts_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import ml_dtypes

    rng = np.random.default_rng(0)
    kernel16 = rng.normal(0, 1, (4, 3)).astype(np.float16)
    bias_bf16 = rng.normal(0, 1, (3,)).astype(ml_dtypes.bfloat16)
    _tf1(tmp_path / "half" / "model.ckpt", {"fc/kernel": kernel16, "fc/bias": bias_bf16})
    _tf1(tmp_path / "wide" / "model.ckpt", {"fc/kernel": kernel16.astype(np.float32),
                                            "fc/bias": bias_bf16.astype(np.float64)})
    (tmp_path / "s.yaml").write_text(SMALL)
    code, out, _ = run_cli(["restore-plan", "s.yaml", "--from", "half/model.ckpt"], capsys, tmp_path)
    assert code == 0 and _plan_lines(out) == [
        "float16 -> float32, exact", "bfloat16 -> float32, exact"]
    loaded = load_spec(tmp_path / "s.yaml")
    source = RestoreSource.model_construct(from_="half/model.ckpt")
    values = read_plan(plan_restore(loaded, restore_targets(build_ir(loaded)),
                                    [(tmp_path / "half/model.ckpt", source)]))
    assert _same_bits(values["fc/kernel"], kernel16.astype(np.float32))
    assert _same_bits(values["fc/bias"], bias_bf16.astype(np.float32))
    code, out, _ = run_cli(["restore-plan", "s.yaml", "--from", "wide/model.ckpt"], capsys, tmp_path)
    assert code == 1
    assert _plan_lines(out)[1] == (
        "dtype differs: float64 -> float32 would round; only float16 and bfloat16 widen into float32 exactly: "
        "convert the weights to float32 first")


def test_opaque_values_without_keras_bfloat16_tag_are_one_line(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    keras = pytest.importorskip("keras")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="fc", dtype="bfloat16")], name="k")
    model.save_weights(tmp_path / "k.weights.h5")
    with h5py.File(tmp_path / "k.weights.h5", "r+") as h5:
        del h5["layers/dense/vars/0"].attrs["dtype"]
    (tmp_path / "s.yaml").write_text(SMALL)
    code, out, err = run_cli(["restore-plan", "s.yaml", "--from", "k.weights.h5"], capsys, tmp_path)
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "k.weights.h5: error: cannot read Keras weight file k.weights.h5: '/layers/dense/vars/0' holds |V2 values, "
        "not numbers specgen reads (numbers, or Keras' bfloat16: 2-byte values tagged dtype 'bfloat16'); save the "
        "weights as float32", "1 error found"]


def test_a_mixed_precision_sources_loss_scale_is_training_state() -> None:
    """`loss_scale/*` of a mixed_float16 run is unused as training state, like the step and the slots, even in a
    spec whose own run has those keys (they are not model variables)."""
    from specgen.ir.restore_rules import TRAINING_STATE

    entries = {"loss_scale/scale": Entry("loss_scale/scale", (), "float32"), "fc/bias": Entry("fc/bias", (3,), "float32")}
    source = RestoreSource.model_validate({"from": "run"})
    part = plan_source("run", Path("run"), entries, source, {"fc/bias": ((3,), "float32")})
    assert "loss_scale/" in TRAINING_STATE
    assert [(u.key, u.reason.split(":")[0]) for u in part.unused] == [
        ("loss_scale/scale", "training state (the step, an optimizer's slots and counters, accumulators)")]
