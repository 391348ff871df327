"""`specgen export`: checkpoint -> model.onnx with trained weights, checked against TensorFlow.

The `model` collection's values are read from the checkpoint (the EMA shadows of
trainable weights when `export.onnx.weights: ema`; batch-norm statistics and
frozen weights are always the raw ones), or, without a checkpoint, are the spec's
initializers (seeded) with its `checkpoint.restore` plan applied, all or nothing, as a
new training run would start; they are put into the built graph, and the result
is compared with the generated TensorFlow module on the same inputs. Nothing is
written unless every weight read and every output of both sides is finite and
the max abs diff is within 1e-4 of each output's magnitude (at least 1): a NaN weight can give finite outputs on the
sample (relu hides it), and a NaN difference passes a plain `diff > limit` test. onnxruntime runs the sample in
chunks of the graph's batch where `export.onnx.dynamic_batch: false` fixes it (runtime/graph_runs.py), and its
failures are one line at the spec (`_graph_failures`).

TensorFlow (the generated module, the checkpoint reader, the restore plan) is imported only once the command
line and the spec have been checked: `export` without a weight source says so at once, not after TensorFlow's
import (about 12 s). The files are written as one set (runtime/file_set.py): export.json, which describes
model.onnx, goes last, and is removed before model.onnx is replaced.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from specgen.atomic import probe_writable, refuse_links, writing
from specgen.diagnostics import Diagnostic, SpecError
from specgen.ir.exported import exported
from specgen.ir.model import ModelIR
from specgen.ir.restore_rules import RestorePlan
from specgen.ir.restore_targets import mask_targets, restore_targets
from specgen.kinds.features.ema import shadow
from specgen.paths import shown
from specgen.pipeline import Built
from specgen.progress import Phases
from specgen.render.build_lock import locked
from specgen.runtime import data
from specgen.runtime.file_set import write_set
from specgen.runtime.graph_runs import GraphRunError, reported, run_rows
from specgen.runtime.lib.generated import load_generated
from specgen.runtime.lib.interface import GeneratedModel, GeneratedTrainer
from specgen.runtime.onnx_export import node_counts, variance_problem, with_weights
from specgen.runtime.parity import accuracy, check_sizes, first_non_finite, max_abs_diff, random_inputs, within
from specgen.runtime.precision import REGISTRY as PRECISIONS
from specgen.runtime.precision.step import PrecisionRequest, make_variant
from specgen.runtime.predictor import Predictor
from specgen.runtime.pruning_state import mask_variables, masked_values
from specgen.runtime.rounding import nudged, refusal
from specgen.runtime.triton import plan_repository, remove_leftovers
from specgen.spec.load import LoadedSpec

PARITY_LIMIT = 1e-4  # of each output's magnitude, max(1, max |TensorFlow output|): see scaled_diff
Run = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]  # inputs to outputs, one side of the check


def scaled_diff(expected: dict[str, np.ndarray], actual: dict[str, np.ndarray]) -> float:
    """Largest |TF - ORT| of an output divided by max(1, max |TF output|); NaN when any difference is NaN.

    Relative, not absolute: two correct float32 evaluations of a deep network (different summation order
    in convolutions; onnxruntime fuses each conv with its batch norm) differ by about 1e-6 of the output's
    magnitude, so an absolute 1e-4 fails outputs of 1e3 and more (EfficientNetV2B0 with random weights and
    no softmax: outputs of 5e14, difference 1e9, 2e-6 of it). Outputs up to 1 in magnitude (probabilities,
    most logits) keep the absolute 1e-4. Per output, so a large output never loosens a small one's limit.
    """
    ratios = [max_abs_diff({k: expected[k]}, {k: actual[k]}) / max(1.0, float(np.max(np.abs(expected[k]), initial=0.0)))
              for k in expected]
    return float(np.max(ratios, initial=0.0))  # np.max keeps NaN


def checkpoint_keys(ir: ModelIR, weights: str) -> dict[str, str]:
    """Model variable path -> the checkpoint key its exported value comes from."""
    return {v.path: (shadow(v.path) if weights == "ema" and "trainable" in v.collections else v.path)
            for v in ir.model_variables}


def _sample_inputs(loaded: LoadedSpec, ir: ModelIR) -> tuple[dict[str, np.ndarray], np.ndarray | None, str]:
    """The eval set (all of it, for accuracy) when the spec has one, else random inputs; and which it is.

    data.read_stage has checked the eval set: at least one example, finite values, labels in range.
    """
    source = data.read_stage(loaded, ir, "eval")
    if source is None:
        return random_inputs(ir, 16, np.random.default_rng(0)), None, "random sample inputs"
    features, labels = next(iter(source.dataset.batch(source.examples)))
    loss = ir.training.loss if ir.training else None
    label = loss.labels if loss else None
    return ({k: v.numpy() for k, v in features.items()}, (labels[label].numpy() if label in labels else None),
            "eval set")


def _accuracy(out: Path, logits: np.ndarray, labels: np.ndarray | None, target: str | None) -> float | None:
    """Top-1 accuracy against class indices (label form `sparse`, specgen/kinds/losses/); None otherwise."""
    if labels is None or target != "sparse":
        return None
    try:
        return accuracy(logits, labels)  # already checked (labels by data.py, logits for finiteness): belt and braces
    except ValueError as exc:
        raise SpecError([Diagnostic(shown(out), None, f"eval accuracy: {exc}; nothing was written")]) from None


def _tf_model(ir: ModelIR, model_py: bytes, values: dict[str, np.ndarray]) -> Run:
    """The generated TensorFlow module holding `values`, loaded once, as a function of inputs to outputs
    (inference mode): the parity check, its nudge and its other sizes all call the one model."""
    import tensorflow as tf  # here, not at the top: see the module's docstring

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.py"
        path.write_bytes(model_py)
        model = getattr(load_generated(path), ir.class_name)()
    for path_key, variable in model.variables_by_path().items():
        variable.assign(values[path_key])

    def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = model({k: tf.constant(v) for k, v in inputs.items()}, training=False)
        return {k: v.numpy() for k, v in outputs.items()}

    return run


def _refuse_bad_weights(ir: ModelIR, prefix: Path, keys: dict[str, str], values: dict[str, np.ndarray]) -> None:
    """Every weight finite (a NaN kernel behind a relu can still give finite outputs on the sample), and every
    variance one its layer can take the square root of (onnx_export.variance_problem), named by checkpoint key."""
    problem = first_non_finite({keys[path]: value for path, value in values.items()})
    if problem is not None:
        raise SpecError([Diagnostic(shown(prefix), None, f"checkpoint variable {problem}; training diverged or the "
                                    "checkpoint is damaged. Nothing was written; export an earlier checkpoint "
                                    "or retrain (check the data and the learning rate)")])
    problem = variance_problem(ir, values, keys)
    if problem is not None:
        raise SpecError([Diagnostic(shown(prefix), None, f"checkpoint variable {problem}; the checkpoint is damaged "
                                    "or was edited. Nothing was written; export an earlier checkpoint or retrain")])


def _refuse_non_finite_outputs(out: Path, sample: str, outputs: dict[str, dict[str, np.ndarray]]) -> None:
    for side, values in outputs.items():
        problem = first_non_finite(values)
        if problem is not None:
            raise SpecError([Diagnostic(shown(out), None, f"{side} output {problem} on the {sample}; nothing was "
                                        "written (the weights are finite: look for very large weights or a "
                                        "negative batch-norm moving_variance)")])


def _check_other_sizes(loaded: LoadedSpec, ir: ModelIR, tensorflow: Run, onnxruntime: Predictor) -> None:
    """Named dimensions: a graph can be right at the sample's sizes and wrong at others (a strided SAME window's pads
    move with the size), so both sides also run at up to 3 more size sets the model accepts (runtime/sample_sizes.py).
    A model without named dimensions runs nothing more."""
    view = exported(ir)
    with _graph_failures(loaded, "the parity check at other sizes of the named dimensions"):
        problem = check_sizes(ir, tensorflow, lambda x: run_rows(onnxruntime, {i.name: x[i.name] for i in view.inputs}),
                              PARITY_LIMIT, np.random.default_rng(1))
    if problem is not None:
        raise SpecError([Diagnostic(loaded.display, None, f"parity at other sizes of the named dimensions: {problem}; "
                                    "nothing was written; please report this with the spec")])


@contextmanager
def _graph_failures(loaded: LoadedSpec, what: str) -> Iterator[None]:
    """onnxruntime failing on the graph just exported (which onnx.checker passed) is a specgen bug: one error line
    at the spec, naming what ran and the node, never a traceback. It happens before any write."""
    try:
        with reported(what):
            yield
    except GraphRunError as exc:
        raise SpecError([Diagnostic(loaded.display, None, str(exc))]) from None


def _check_output(out: Path) -> None:
    """Refuse a link or a folder where export writes, and an unwritable folder, before any TensorFlow work. Nothing
    is made here: the output folder is made by the write (write_set), once every check passed, and the probe is made
    in the nearest folder there with its times put back, so a refused export leaves every folder as it was,
    modification times included (`-o runs/<name>/export` is inside the run folder, which a refusal must not touch)."""
    for name in ("model.onnx", "export.json", *(d.file_name for d in PRECISIONS.values())):
        refuse_links(out / name)  # also refuses a file on the way (its lstat fails: not a directory)
    there = next(p for p in (out, *out.parents) if p.exists() or p.is_symlink())
    with writing(out):
        if not there.is_dir():  # a link to nothing on the way: write_set's mkdir would fail, after all the work
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(there))
        probe_writable(there, keep_times=True)


def _planned_values(built: Built) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The variables a new `specgen train` run holds at step 0: the spec's initializers (seeded with `train.seed`),
    the restore plan applied, then the after-restore step (target networks copied from the restored online
    weights, pruning masks applied: fine_tuning.new_weights); and, for export.json, where each one came from."""
    from specgen.runtime.commands.fine_tuning import new_weights  # TensorFlow
    from specgen.runtime.commands.restore import summary_line

    loaded, ir = built.loaded, built.ir
    training = ir.training
    assert training is not None
    model, trainer = _fresh_model(built, training.train.seed if training.train else 0)
    masks = mask_variables(ir, model)
    # all or nothing: prints the table and raises when the plan has problems
    plan = new_weights(loaded, ir, model, trainer) if trainer is not None else _without_trainer(loaded, ir, model)
    assert plan is not None  # _refuse_no_source: the spec has a `checkpoint.restore`
    variables = model.variables_by_path()
    origin = {r.path: (f"{r.source}:{r.key}" if r.status == "restored" else
                       r.note if r.status == "copied" else "initialized") for r in plan.rows if r.path in variables}
    values = masked_values(ir, {p: v.numpy() for p, v in variables.items()}, {k: m.numpy() for k, m in masks.items()})
    return values, {"summary": summary_line(plan), "variables": origin}


def _fresh_model(built: Built, seed: int) -> tuple[GeneratedModel, GeneratedTrainer | None]:
    """The generated model and, for a spec that can train, its trainer (which makes target copies and EMA shadows
    as a run's start does), built from the generated code in a temporary folder."""
    with tempfile.TemporaryDirectory() as folder:
        for name, content in built.training_files.items():
            (Path(folder) / name).write_bytes(content)
        model: GeneratedModel = getattr(load_generated(Path(folder) / "model.py"), built.ir.class_name)(seed=seed)
        if "train.py" not in built.training_files:
            return model, None
        module = load_generated(Path(folder) / "train.py")
        trainer: GeneratedTrainer = getattr(module, f"{built.ir.class_name}Training")(model)
        return model, trainer


def _without_trainer(loaded: LoadedSpec, ir: ModelIR, model: GeneratedModel) -> RestorePlan:
    """A spec that cannot train has no trainer, so nothing derived from the weights (no target copies, no EMA):
    the plan alone, masks included (masked_values applies them)."""
    from specgen.runtime.commands.restore import apply_plan, plan_restore  # TensorFlow

    plan = plan_restore(loaded, restore_targets(ir))
    apply_plan(plan, model.variables_by_path() | mask_variables(ir, model))
    return plan


def export(built: Built, checkpoint: Path | None, out: Path, triton: bool = False,
           precision: PrecisionRequest | None = None) -> dict[str, Any]:
    """Export, or change nothing: a failed export also removes the output folder it created (while empty).
    `built`: the spec, its IR and its generated code (model.py computes TensorFlow's outputs, model.onnx gets the
    weights), built once by the command.

    The result is export.json's record (docs/export.md documents its keys), returned as the dict that is written:
    it is a document users and `specgen serve` read, so it has one schema, not a dataclass beside a JSON copy."""
    _refuse_no_source(built, checkpoint)  # before any folder is made or TensorFlow imported
    created = not out.exists()
    try:
        return _export(built, checkpoint, out, triton, precision or PrecisionRequest())
    except BaseException:
        if created and out.is_dir() and not out.is_symlink() and not any(out.iterdir()):
            out.rmdir()
        raise


def _refuse_no_source(built: Built, checkpoint: Path | None) -> None:
    """No --checkpoint and no `checkpoint.restore`: nothing to take weights from (bare initializers are never what
    was meant). A check of the command line and the spec alone, so it comes before TensorFlow's import."""
    training = built.ir.training
    if checkpoint is None and (training is None or not training.checkpoint.restore):
        raise SpecError([Diagnostic(built.loaded.display, None, "nothing to export from: pass --checkpoint, or give "
                                    "the spec a 'checkpoint.restore' section to export its restore plan")])


STEPS = ("weights", "TensorFlow outputs", "onnxruntime outputs", "precision", "write")


def _export(built: Built, checkpoint: Path | None, out: Path, triton: bool,
            precision: PrecisionRequest) -> dict[str, Any]:
    with Phases("export", STEPS) as phases:
        return _export_steps(built, checkpoint, out, triton, precision, phases)


def _export_steps(built: Built, checkpoint: Path | None, out: Path, triton: bool,
                  precision: PrecisionRequest, phases: Phases) -> dict[str, Any]:
    loaded, ir, files = built.loaded, built.ir, built.files
    training = ir.training
    assert training is not None
    _check_output(out)
    restore: dict[str, Any] | None = None
    phases.start("weights")
    if checkpoint is None:  # `export.onnx.weights` picks among a checkpoint's keys: the plan already chose
        weights, source = "restore plan", Path(loaded.display)
        values, restore = _planned_values(built)
        keys = {p: p if o == "initialized" or o.startswith("copied") else f"{p} (from {o})"
                for p, o in restore["variables"].items()}
    else:
        from specgen.runtime.checkpoint import checkpoint_prefix, read_arrays  # TensorFlow's checkpoint reader

        weights = training.export.weights
        keys = checkpoint_keys(ir, weights)
        shapes = {v.path: (v.shape, v.dtype) for v in ir.model_variables}
        source = checkpoint_prefix(checkpoint)
        masks = mask_targets(ir)  # pruned weights are exported through the checkpoint's masks: exact zeros
        arrays = read_arrays(source, {keys[p]: shapes[p] for p in keys} | masks)
        values = masked_values(ir, {p: arrays[keys[p]] for p in keys}, {k: arrays[k] for k in masks})
    _refuse_bad_weights(ir, source, keys, values)
    model = with_weights(onnx.load_from_string(files["model.onnx"]), ir, values)
    model_bytes = model.SerializeToString(deterministic=True)
    inputs, labels, sample = _sample_inputs(loaded, ir)
    view = exported(ir)  # TensorFlow computes every output; model.onnx those of export.onnx.outputs
    phases.start("TensorFlow outputs")
    tensorflow = _tf_model(ir, files["model.py"], values)
    expected = {k: v for k, v in tensorflow(inputs).items() if k in view.outputs}
    phases.start("onnxruntime outputs")
    onnxruntime = Predictor(model_bytes, provider="cpu")
    with _graph_failures(loaded, "the parity check against TensorFlow"):
        actual = run_rows(onnxruntime, {i.name: inputs[i.name] for i in view.inputs})
    _refuse_non_finite_outputs(out, sample, {"TensorFlow": expected, "onnxruntime": actual})
    diff, scaled = max_abs_diff(expected, actual), scaled_diff(expected, actual)
    loss = training.loss
    logits = loss.logits if loss and loss.logits in view.outputs else None
    report = {
        "spec": ir.name, "checkpoint": None if checkpoint is None else str(source), "weights": weights,
        "restore": restore, "opset": ir.opset,
        # the digest of the file parity and accuracy are about, as a variant's (precision/step.py): a reader of
        # export.json (specgen report) tells a model.onnx replaced since from the one measured
        "model_sha256": hashlib.sha256(model_bytes).hexdigest(),
        "ir_version": ir.ir_version, "nodes": node_counts(model), "parity_max_abs_diff": diff,
        "parity_scaled_diff": scaled,
        "compared_examples": int(next(iter(inputs.values())).shape[0]),
        "tensorflow_accuracy": _accuracy(out, expected[logits], labels, loss.target) if loss and logits else None,
        "onnxruntime_accuracy": _accuracy(out, actual[logits], labels, loss.target) if loss and logits else None,
    }
    if not within(scaled, PARITY_LIMIT):  # a chaotic model misses the limit against itself: say which it is
        nudge = nudged(inputs) if np.isfinite(scaled) else None
        moved = None if nudge is None else scaled_diff(expected, tensorflow(nudge))
        raise SpecError([Diagnostic(shown(out), None, refusal(diff, scaled, PARITY_LIMIT, moved))])
    _check_other_sizes(loaded, ir, tensorflow, onnxruntime)
    # the float32 graph is the variant's reference: gated here, in memory, so a refusal writes nothing
    phases.start("precision")
    model_inputs = {i.name: inputs[i.name] for i in view.inputs}
    asked = precision.precision or training.export.precision
    with _graph_failures(loaded, f"the {asked} variant's calibration and gates"):
        variant = make_variant(loaded, ir, model_bytes, model_inputs, labels, sample, precision)
    report["precision"] = variant.report if variant else {"precision": "fp32"}
    # a variant's Triton version folder also holds its float32 reference and gate sample, so the server can
    # gate it on the provider it gets (runtime/precision/verify.py); made here, so a refusal writes nothing
    triton_extra = _variant_extra(loaded, variant, model_bytes, model_inputs, labels) if triton and variant else {}
    repository = None
    if triton:  # the repository serves what was asked for: the variant (float32 IO, so the config is the same);
        # checked before anything is written, so a refused next version leaves the export's own files as they were
        repository = plan_repository(out, ir, variant.model_bytes if variant else model_bytes, **triton_extra)
    phases.start("write")
    files = {"model.onnx": model_bytes, **({variant.file_name: variant.model_bytes} if variant else {}),
             "export.json": (json.dumps(report, indent=2, sort_keys=True) + "\n").encode()}
    # one export at a time writes `out` (two at once could interleave their sets, and choose one next version)
    with locked(out, "export"):
        since = time.time()
        if repository is not None:  # chosen again under the lock: another export may have added a version since
            repository = plan_repository(out, ir, variant.model_bytes if variant else model_bytes, **triton_extra)
        remove_leftovers(out, out, since, files)  # a killed export's temporaries (the repository's: write())
        write_set(out, files, last="export.json")  # one set: never a new model.onnx beside an old export.json
        if repository is not None:
            report["triton"], report["triton_version"] = str(repository.write(since)), repository.number
    return report


def _variant_extra(loaded: LoadedSpec, variant: Any, model_bytes: bytes, inputs: dict[str, np.ndarray],
                   labels: np.ndarray | None) -> dict[str, Any]:
    """write_repository's `files` (reference, sample, variant.json) and config `parameters` for a variant."""
    from specgen.runtime.precision.base import PrecisionRefusal
    from specgen.runtime.precision.verify import config_parameters, version_files

    try:
        files = version_files(variant.info, model_bytes, inputs, labels)
    except PrecisionRefusal as exc:
        raise SpecError([Diagnostic(loaded.display, None, f"--triton: {exc}; nothing was written")]) from None
    return {"files": files, "parameters": config_parameters(variant.info)}
