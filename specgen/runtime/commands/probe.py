"""`specgen train --probe`: one batch through the generated model and trainer, and what it did, per variable and layer.

For each trained weight: its norm, its gradient's norm and the first update's size relative to
the weight (the trainer's own `apply`: clipping, weight decay and each optimizer's formula at the
current step, applied and then undone), with zero and missing (None) gradients flagged, and a note for an
optimizer whose learning rate is 0 at that step (a warm-up's step 0): its updates are zero steps; then the mean
and standard deviation of every layer's output on that batch, in training mode (dropout on,
batch norms on batch statistics), as the gradient saw them.

Nothing is written: the generated code is rendered in memory and imported from a temporary
folder, the run folder is neither created nor read (unless --resume / --resume-from name a
checkpoint to probe, which is only read), and every variable the update changed is restored.
A checkpoint is probed under the spec --resume trains from it: with the `--set` overrides the
run kept (resume.py with_kept_overrides), then this command's; and it says what --resume says first, with the same
functions: the notes on other damaged checkpoints in the run folder (resume.py damage_notes), and the refusal of a
checkpoint whose saved state the spec would reinterpret (resume_fit.py check_fit).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tensorflow as tf

from specgen import text
from specgen.diagnostics import Diagnostic, SpecError
from specgen.ir.model import ModelIR
from specgen.ir.training.build import run_folder
from specgen.kinds.features import accumulate
from specgen.paths import shown
from specgen.pipeline import Built, build
from specgen.runtime import data, hooks
from specgen.runtime.checkpoint import CheckpointFolder, read_values
from specgen.runtime.commands.fine_tuning import new_weights
from specgen.runtime.commands.resume import Start, damage_notes, verified_meta, with_kept_overrides
from specgen.runtime.commands.resume_fit import check_fit
from specgen.runtime.commands.resume_rates import follow_spec_rates, rates_before_restore
from specgen.runtime.lib.generated import load_generated
from specgen.runtime.lib.interface import GeneratedModel, GeneratedTrainer
from specgen.runtime.lib.optimizers import dense
from specgen.spec.load import LoadedSpec
from specgen.spec.overrides import overridden_learning_rates

NEAR_ZERO = 1e-5  # a gradient norm under this share of the batch's largest is flagged


@dataclass(frozen=True)
class VariableRow:
    path: str
    shape: tuple[int, ...]
    weight_norm: float
    grad_norm: float | None  # None: TensorFlow returned no gradient
    update_norm: float
    # The learning rate its optimizer ran the probed update at; None where the probe did not read one. At rate 0 a
    # zero |update| says nothing about the gradient: no step was taken, so none could round away.
    rate: float | None = None
    optimizer: str = ""  # the optimizer that updates it ("" for hand-made rows)

    @property
    def ratio(self) -> float | None:
        """|update| / |weight|; None for a weight that is all zeros (a bias at its start)."""
        return self.update_norm / self.weight_norm if self.weight_norm > 0 else None

    def flag(self, largest: float, step: int = 0) -> str:
        """Empty, or what is wrong with this gradient, or why the weight did not move (its optimizer's learning rate
        is 0 at `step`, the global step the update was measured at); `largest`: the batch's largest gradient norm."""
        if self.grad_norm is None:
            return "MISSING: no gradient (None), the loss does not depend on it"
        if not math.isfinite(self.grad_norm):
            return "NON-FINITE gradient"
        if self.grad_norm == 0:
            return "ZERO gradient"
        small = self.grad_norm < NEAR_ZERO * largest
        if self.update_norm == 0 and self.rate == 0:  # no step was taken, so whether one would round away is unknown
            near = f"near zero (under {NEAR_ZERO:g} of the largest); " if small else ""
            return f"{near}no update: learning rate 0 at step {step}"
        if not small:
            return ""
        if self.update_norm == 0:  # a gradient so small that the step rounds away: the weight cannot move
            return f"vanishing: update is exactly 0 (gradient under {NEAR_ZERO:g} of the largest)"
        # Float rounding leaves about this much where the exact gradient is 0 (a bias before a batch norm).
        return f"near zero (under {NEAR_ZERO:g} of the largest)"


@dataclass(frozen=True)
class LayerRow:
    name: str
    op: str
    shape: tuple[int, ...]
    mean: float
    std: float


@dataclass(frozen=True)
class Probe:
    source: str  # where the weights came from
    examples: int
    loss: float
    variables: tuple[VariableRow, ...]
    layers: tuple[LayerRow, ...]
    step: int = 0  # the global step the update was measured at
    # Optimizers whose learning rate was exactly 0 at that step: (name, its warmup_steps, how many weights it updates).
    zero_rates: tuple[tuple[str, int, int], ...] = ()
    notes: tuple[str, ...] = ()  # what starting from `source` said (--resume's learning-rate notes)


def _load(built: Built, folder: Path) -> tuple[GeneratedModel, GeneratedTrainer, int]:
    ir = built.ir
    for name, content in built.training_files.items():
        (folder / name).write_bytes(content)
    assert ir.training is not None and ir.training.train is not None
    seed = ir.training.train.seed
    model: GeneratedModel = load_generated(folder / "model.py").__dict__[ir.class_name](seed=seed)
    trainer: GeneratedTrainer = load_generated(folder / "train.py").__dict__[f"{ir.class_name}Training"](model)
    return model, trainer, seed


def _start(built: Built, model: GeneratedModel, trainer: GeneratedTrainer,
           begin: Start | None) -> tuple[str, tuple[str, ...]]:
    """Put the weights the probe looks at in place: a checkpoint's (`begin`: resumed_spec's), the restore plan's, or
    the initializers'. Where they came from, and the notes --resume prints on the way (a learning rate edited since
    the checkpoint)."""
    ir = built.ir
    assert ir.training is not None
    if begin is not None and begin.checkpoint is not None:
        checkpoint = begin.checkpoint
        variables = model.variables_by_path() | trainer.state_by_path()
        rates = rates_before_restore(ir.training.optimizers, trainer)
        for name, value in read_values(checkpoint / "variables", variables).items():
            variables[name].assign(value)
        # The step --resume would take: at the spec's learning rates (a kept --set's included), not the checkpoint's
        # (session.py says why), with its notes; none for a rate this command's --set gives, as --resume shows that
        # --set on its own line (session.py Session.start).
        notes = follow_spec_rates(ir.training.optimizers, trainer, rates, int(trainer.global_step.numpy()),
                                  checkpoint.name, overridden_learning_rates(begin.overrides[len(begin.kept):]))
        return f"the checkpoint {shown(checkpoint)}{_kept_shown(begin.kept)}", (*begin.notes, *notes)
    if not ir.training.checkpoint.restore:
        return "the initializers", ()
    new_weights(built.loaded, ir, model, trainer)  # as a new run's step 0: plan, then targets copied, masks applied
    return "the initializers and checkpoint.restore", ()


def newest_checkpoint(loaded: LoadedSpec, ir: ModelIR) -> tuple[Path, str]:
    """The checkpoint `--resume` would continue from (refused, as --resume refuses, when it or a newer one is
    damaged), and --resume's note when `latest` names another; an error when the run folder holds none."""
    assert ir.training is not None
    folder = ir.training.checkpoint.dir
    path, note = CheckpointFolder(folder, 1).choose() if folder.is_dir() else (None, "")
    if path is None:
        raise SpecError([Diagnostic(shown(folder), None, "--probe --resume: no checkpoint in this run folder")])
    return path, note


def _norm(value: tf.Tensor | tf.IndexedSlices) -> float:
    """The L2 norm in float64 (an embedding's gradient comes as IndexedSlices: made dense first)."""
    return float(np.linalg.norm(np.asarray(tf.convert_to_tensor(value), dtype=np.float64).ravel()))


def _kept_shown(kept: list[str]) -> str:
    """The `--set` overrides the run kept, as --resume's `resumed from` line shows them (this command's own are on
    its command line)."""
    return " with " + ", ".join(f"--set {text} (kept from the run)" for text in kept) if kept else ""


def probe(built: Built, begin: Start | None = None) -> Probe:
    """Run the probe on the first training batch (as a fresh run shuffles it) and undo its update. `begin`: the
    checkpoint to start from and its overrides (resumed_spec's; `built` is built from `begin.loaded`)."""
    loaded, ir = built.loaded, built.ir
    training = ir.training
    assert training is not None
    if not training.can_train or "train" not in training.data or training.train is None:
        raise SpecError([Diagnostic(loaded.display, None, "--probe needs the 'loss', 'optimizers', 'train' and "
                                    "'data.train' sections")])
    if (why := hooks.refusal(ir, "probe")) is not None:
        raise SpecError([Diagnostic(loaded.display, None, why)])
    train = training.train
    source = data.read_stage(loaded, ir, "train")
    assert source is not None
    if begin is not None:  # where Session checks it too: a spec whose shapes changed gets --resume's refusal
        begin.notes += check_fit(ir, begin)
    batch = train.batch_size or source.examples  # `batch_size: full`: the whole training set
    with tempfile.TemporaryDirectory(prefix="specgen-probe-") as folder:
        model, trainer, seed = _load(built, Path(folder))
        origin, notes = _start(built, model, trainer, begin)
        features, labels = next(iter(data.training_batches(source, batch, seed, train.shuffle_buffer)))
        step_seed = tf.constant([int(trainer.global_step.numpy()) * accumulate.of(train), seed], tf.int64)
        loss, gradients = trainer.gradients(features, labels, step_seed)
        values = model.layer_outputs(features, training=True, seed=step_seed)
        step, rates = int(trainer.global_step.numpy()), dict[str, float]()
        updates = first_update(model, trainer, gradients, rates, [o.name for o in training.optimizers
                                                                   if o.learning_rate_key])
    owner = {path: o.name for o in training.optimizers for path in o.paths}
    rows = tuple(VariableRow(path, tuple(var.shape), _norm(var), None if g is None else _norm(g), updates[path],
                             rates.get(owner.get(path, "")), owner.get(path, ""))
                 for path, var, g in zip(trainer.trainable_paths, trainer.trainable, gradients, strict=True))
    layers = tuple(_layer_row(node.name, node.op, values[node.name]) for node in ir.nodes
                   if values[node.name].dtype.is_floating)
    zero = tuple((o.name, o.schedule.warmup_steps if o.schedule else 0, len(o.paths)) for o in training.optimizers
                 if rates.get(o.name) == 0)
    return Probe(origin, batch, float(loss), rows, layers, step, zero, notes)


def first_update(model: GeneratedModel, trainer: GeneratedTrainer, gradients: list[tf.Tensor | None],
                 rates: dict[str, float] | None = None, optimizers: Sequence[str] = ()) -> dict[str, float]:
    """|w_after - w_before| of the optimizers' step on these gradients (None as zeros); then every variable
    (weights, slots, step, EMA shadows, batch-norm statistics) gets its value back. `rates` receives the learning
    rate each of `optimizers` ran that step at (the schedule's value, read before it is put back)."""
    everything = model.variables_by_path() | trainer.state_by_path()
    saved = {name: var.read_value() for name, var in everything.items()}
    before = [w.read_value() for w in trainer.trainable]
    # Dense, as the training step's gradients are (runtime/lib/optimizers.py global_gradients): an embedding's
    # IndexedSlices crashed the kinds written with Python arithmetic (rmsprop centered, lion).
    trainer.apply([tf.zeros_like(w) if g is None else dense(g) for w, g in zip(trainer.trainable, gradients, strict=True)])
    moved = {path: _norm(w.read_value() - b)
             for path, w, b in zip(trainer.trainable_paths, trainer.trainable, before, strict=True)}
    if rates is not None:
        rates.update({name: float(trainer.learning_rate(name).numpy()) for name in optimizers})
    for name, var in everything.items():
        var.assign(saved[name])
    return moved


def _layer_row(name: str, op: str, value: tf.Tensor) -> LayerRow:
    array = np.asarray(value, dtype=np.float64)
    return LayerRow(name, op, tuple(array.shape[1:]), float(array.mean()), float(array.std()))


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3e}"


def _shape(dims: tuple[int, ...], batch: bool = False) -> str:
    return text.shape(((None,) if batch else ()) + tuple(dims))


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    return text.table_lines(header, rows, right, rule=False)


def format_probe(result: Probe) -> str:
    """The two tables `specgen train --probe` prints."""
    largest = max((r.grad_norm for r in result.variables if r.grad_norm is not None and math.isfinite(r.grad_norm)),
                  default=0.0)
    flags = [r.flag(largest, result.step) for r in result.variables]
    rows = [[r.path, _shape(r.shape), _number(r.weight_norm), "None" if r.grad_norm is None else _number(r.grad_norm),
             _number(r.update_norm), _number(r.ratio), flag] for r, flag in zip(result.variables, flags, strict=True)]
    count = sum(bool(f) for f in flags)
    lines = [f"probe: one batch of {result.examples} examples, weights from {result.source}; "
             f"training-mode loss {result.loss:.6g}; nothing is saved", *(f"note: {n}" for n in result.notes), ""]
    lines += _table(["variable", "shape", "|weight|", "|grad|", "|update|", "|update|/|weight|", "flag"], rows,
                    {2, 3, 4, 5})
    lines.append(f"{count} of {len(rows)} trained variables flagged" if count
                 else f"all {len(rows)} trained variables have a non-zero gradient")
    lines += [_zero_rate(name, warmup, weights, result.step, _moved(result, name))
              for name, warmup, weights in result.zero_rates]
    layers = [[x.name, x.op, _shape(x.shape, batch=True), f"{x.mean:.3e}", f"{x.std:.3e}"] for x in result.layers]
    return "\n".join([*lines, "", *_table(["layer", "op", "shape", "mean", "std"], layers, {3, 4})])


def _moved(result: Probe, optimizer: str) -> bool:
    """Whether any weight of `optimizer` moved: at rate 0 only a velocity a checkpoint carries can move it."""
    return any(r.update_norm > 0 for r in result.variables if r.optimizer == optimizer)


def _zero_rate(name: str, warmup: int, weights: int, step: int, moved: bool = False) -> str:
    """Why an optimizer's |update| column is all zeros although its gradients are not; or, where a momentum's
    velocity still moved its weights (sgd, rmsprop with `momentum`, from a checkpoint), that no gradient step did."""
    why = f" (its warm-up of {warmup} steps starts from 0)" if warmup and step == 0 else ""
    plural = "s" if weights != 1 else ""
    if moved:
        return (f"note: optimizer '{name}' runs at learning rate 0 at step {step}{why}, so the |update| of its "
                f"{weights} weight{plural} is only what its momentum carries over, not a gradient step")
    return (f"note: optimizer '{name}' runs at learning rate 0 at step {step}{why}, so the |update| of its "
            f"{weights} weight{plural} is a zero step, not the size of a training update")


def checked_resume_from(resume_from: Path | None) -> Path | None:
    """`--probe --resume-from CKPT`: the checkpoint folder, resolved, or one line when it is not one (checked
    before the spec is built: its error comes first)."""
    checkpoint = resume_from.resolve() if resume_from is not None else None
    if checkpoint is not None and not (checkpoint / "variables.index").is_file():
        raise SpecError([Diagnostic(shown(resume_from or checkpoint), None, "--resume-from: not a checkpoint folder "
                                    "(expected a ckpt-* folder holding meta.json and variables.*)")])
    return checkpoint


def resumed_spec(built: Built, checkpoint: Path) -> tuple[Built, Start]:
    """The spec --resume would train from `checkpoint`, built, and its start: the checks --resume makes (the
    checkpoint reads back whole and belongs to this spec), then the `--set` overrides the run kept before this
    command's, as resume.py applies them (a kept learning rate is the one --resume trains at)."""
    loaded = built.loaded
    meta = verified_meta(checkpoint, loaded)
    begin = with_kept_overrides(Start(loaded, checkpoint, meta), meta, [text for _, text in loaded.overrides])
    return (built if begin.loaded is loaded else build(begin.loaded)), begin


def run_probe(built: Built, resume: bool = False, checkpoint: Path | None = None) -> int:
    """`specgen train --probe [--resume | --resume-from CKPT]`: print the tables; exit 0 (flags are findings).
    `checkpoint`: --resume-from's, as `checked_resume_from` returned it."""
    note, begin = "", None
    if resume:
        checkpoint, note = newest_checkpoint(built.loaded, built.ir)
    if checkpoint is not None:
        folder = CheckpointFolder(run_folder(built.loaded), 1)  # the one --resume's notes are about (resume.py)
        built, begin = resumed_spec(built, checkpoint)
        # Printed as --resume prints them, in its order: `latest`'s note, the other damaged checkpoints, then
        # check_fit's and the learning rates' (probe).
        begin.notes += ([note] if note else []) + damage_notes(folder, checkpoint)
    print(format_probe(probe(built, begin)))
    return 0
