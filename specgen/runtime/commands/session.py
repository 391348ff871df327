"""The training session of `specgen train`: the generated modules, data, checkpoints and their restore.

`Session` builds one run (renders and imports the generated code, opens the data and the
checkpoint folder), starts it (a resume, a fine-tuning restore or a fresh start) and offers
the pieces the loop in `train.py` drives: updates, evaluation, summaries and saves. Kept apart
from the loop so that each file stays readable on its own.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tensorflow as tf

from specgen.atomic import write_atomic
from specgen.diagnostics import Diagnostic, SpecError
from specgen.kinds.features import accumulate, distribute, precision
from specgen.kinds.features.levenberg_marquardt import size_check
from specgen.paths import shown
from specgen.pipeline import Built
from specgen.runtime import data, hooks, provenance
from specgen.runtime.checkpoint import CheckpointFolder, checkpoint_keys, read_values, write_failure
from specgen.runtime.commands import data_position, fine_tuning, run_end
from specgen.runtime.commands.resume import Options, Start, open_run_folder, skipped_updates
from specgen.runtime.commands.resume_fit import check_fit
from specgen.runtime.commands.resume_rates import follow_spec_rates, rates_before_restore
from specgen.runtime.lib.generated import load_generated
from specgen.runtime.lib.interface import AccumulatingTrainer, GeneratedModel, GeneratedTrainer
from specgen.runtime.placement.default import Distribution
from specgen.runtime.sources.base import source_text
from specgen.spec.overrides import overridden_learning_rates
from specgen.tracking import Tracker

__all__ = ["Session"]


class Session:
    """One training run: the generated model and training module, data and checkpoints.

    It reaches the generated classes through their Protocols (lib/interface.py), the features through
    runtime/hooks.py and the devices through one `Distribution`, so it names no feature and no strategy.
    """

    def __init__(self, built: Built, options: Options, begin: Start | None = None,
                 distribution: Distribution | None = None):
        """`built`: the spec, its IR and its generated code (built once by the command)."""
        loaded, self.ir, self.built = built.loaded, built.ir, built
        training = self.ir.training
        assert training is not None
        if not training.can_train or "train" not in training.data:
            raise SpecError([Diagnostic(loaded.display, None, "training needs the 'loss', 'optimizers', 'train' and "
                                        "'data.train' sections")])
        assert training.train is not None
        self.loaded, self.options, self.training, self.train_ir = loaded, options, training, training.train
        self.begin = begin if begin is not None else Start(loaded)
        self.saved_at: int | None = None  # the step of the newest checkpoint this run has (saved or resumed)
        self.last_path: Path | None = None
        self.folder = training.checkpoint.dir
        self.distribution = distribution if distribution is not None else Distribution()  # one device by default
        # Under a strategy only the chief writes the run folder; the other workers write a temporary one.
        self.writes = self.distribution.write_folder(self.folder)
        lock = self.begin.lock if self.begin.lock is not None and self.begin.lock.folder == self.writes else None
        # `positions` set once data is read; `lock`: the chief's, so each save first checks its folder is still there
        self.checkpoints = CheckpointFolder(self.writes, training.checkpoint.keep, lock=lock)
        self.every = training.checkpoint.every_steps
        train = self.train_ir
        train_source = data.read_stage(loaded, self.ir, "train")
        eval_source = data.read_stage(loaded, self.ir, "eval")
        assert train_source is not None
        # A fine-tuning run's restore sources are read and matched before the run folder's first write too.
        self.restore_plan, self.restore_values = (fine_tuning.plan_and_read(self.loaded, self.ir)
                                                  if self.begin.checkpoint is None else (None, {}))
        self.restore_record: list[dict[str, Any]] | None = None  # what the restore read, once it is applied
        # A resumed checkpoint must hold exactly the state this spec saves (resume_fit.py): checked from the IR,
        # before the run folder's first write, so a refused --resume leaves the folder byte for byte as it was.
        self.begin.notes += check_fit(self.ir, self.begin)
        too_large = size_check(loaded, self.ir, train_source.examples)  # a levenberg_marquardt Jacobian past its bound
        if too_large:
            raise SpecError(too_large)
        self.examples = train_source.examples
        self.files = data_position.TrainingFiles(loaded)  # hashed at start(), where needed (data_position.py)
        self.files_sha256: str | None = None  # each checkpoint's `train_files_sha256`, once start() has it
        self.batch_size = train.batch_size or self.examples  # `batch_size: full`: the whole set, one batch
        # An epoch is one pass: its full batches cut into whole updates (runtime/data.py builds the same cut into the
        # pipeline, so epoch ends fall on pass ends; a spec whose pass holds no whole update is refused there).
        self.updates_per_epoch = data.updates_per_pass(self.examples, self.batch_size, accumulate.of(train))
        # The run's end (run_end.py), before the first write: a plain --resume of a run at its end writes nothing,
        # on every worker alike (each reads the same checkpoint).
        position = self._saved_position()
        self.end = run_end.planned(options, self.begin, position, self.updates_per_epoch, train.epochs)
        self.begin.notes += run_end.check_not_ended(options, self.begin, self.end, position, self.updates_per_epoch)
        if self.writes == self.folder:  # the chief: every check on user input has passed (resume.py)
            open_run_folder(self.begin, self.folder, options.fresh)
        # This process's examples and batch: under multi_worker with sharded files, its own share (distribute.py).
        self.train_source, self.worker_batch = self.distribution.training_data(
            train_source, self.batch_size, train, self.folder,
            source_text(loaded, training.data["train"], lambda path: path.name))  # a list: the list (base.py)
        self.checkpoints.positions = self.distribution.positions
        self._load_code()
        tf.config.experimental.enable_op_determinism()
        with self.distribution.scope(frozenset(self.ir.collections.get("update", ()))):
            self.model: GeneratedModel = self.model_module.__dict__[self.ir.class_name](seed=train.seed)
            self.trainer: GeneratedTrainer = self.train_module.__dict__[f"{self.ir.class_name}Training"](self.model)
        self.iterator: Any = iter(self.training_batches(train.seed))  # a tf.data iterator; data_position.py restores it
        self.eval_data = data.eval_batches(eval_source, self.batch_size) if eval_source else None
        self.writers: dict[str, tf.summary.SummaryWriter] = {}  # opened by `start`, once the restore succeeded
        self.tracker = Tracker()  # off until train.py starts one: it gets every scalar TensorBoard gets
        self.read_step()
        # Updates attempted, made or skipped (mixed_float16's loss scale skips some without advancing the global
        # step): each reads its micro-batches, so this is the position in the data that epochs count (train.py).
        self.attempts = self.step
        # Where the data's current pass began, in attempts: the loop's epoch ends (train.py) are its pass ends, and
        # its pipeline is shuffled with train.seed + pass_start (data_position.py). 0 for a run from its start; a
        # resume reads it from meta.json, or sets it where it starts a new pass (start()).
        self.pass_start = 0

    def _load_code(self) -> None:
        code = self.writes / "code"
        code.mkdir(parents=True, exist_ok=True)
        for name, content in self.built.training_files.items():
            write_atomic(code / name, content)
        self.model_module = load_generated(code / "model.py")
        self.train_module = load_generated(code / "train.py")

    def _saved_position(self) -> tuple[int, int]:
        """(global step, attempted updates) of the checkpoint a resume starts from, read before any restore (meta.json's
        step, checked against the checkpoint's global_step; the skipped updates it counts); (0, 0) for a new run."""
        path = self.begin.checkpoint
        if path is None:
            return 0, 0
        step = int(self.begin.meta["step"])
        return step, step + skipped_updates(path / "variables", checkpoint_keys(path / "variables"))

    def saved_variables(self) -> dict[str, tf.Variable]:
        return self.model.variables_by_path() | self.trainer.state_by_path()

    def read_step(self) -> int:
        """The global step, read from its variable (after a restore); kept as `self.step` between updates."""
        self.step = int(self.trainer.global_step.numpy())
        return self.step

    def start(self) -> str:
        """Restore what `prepare` chose (checked before any variable is assigned), or begin a new run."""
        path = self.begin.checkpoint
        if path is None:
            restored = ""
            if self.restore_plan is not None:
                restored = fine_tuning.restore(self.restore_plan, self.ir, self.model, self.trainer, self.restore_values)
                self.restore_record = fine_tuning.record(self.restore_plan, self.restore_values)  # provenance.json's
                self.restore_values = {}  # assigned: the arrays need not live as long as the run
            notes = self._open_records()
            return f"started a new run in {shown(self.folder)}" + (f"\nrestore: {restored}" if restored else "") + notes
        spec_rates = rates_before_restore(self.training.optimizers, self.trainer)
        variables = self.saved_variables()
        saved = checkpoint_keys(path / "variables")
        absent = hooks.absent_optional(self.trainer, saved)
        variables = {k: v for k, v in variables.items() if k not in absent}
        values = read_values(path / "variables", variables)
        attempts = int(self.begin.meta["step"]) + skipped_updates(path / "variables", saved)
        note, self.pass_start = data_position.restore(self, path, attempts)
        for name, var in variables.items():
            var.assign(values[name])
        self.saved_at, self.last_path = self.read_step(), path
        # The spec's learning rates, not the checkpoint's: this command's own --set of one is shown on the resume line.
        rates = follow_spec_rates(self.training.optimizers, self.trainer, spec_rates, self.step, path.name,
                                  overridden_learning_rates(self.begin.overrides[len(self.begin.kept):]))
        self.attempts = attempts
        said = rates + (self._new_pass(note) if note else [])
        return (f"resumed from {shown(path)} at step {self.step}{self._overrides_shown()}"
                + "".join(f"\nnote: {n}" for n in said) + self._open_records())

    def _new_pass(self, note: str) -> list[str]:
        """The data started a new pass here (`note`: data_position.py's): an epochs end inside a pass moves to the
        new pass's end (run_end.aligned). The notes to print."""
        end = self.end
        self.end = run_end.aligned(end, self.attempts)
        return [note] + ([self.end.note] if self.end is not end else [])

    def _open_records(self) -> str:
        """The run's record (provenance.py) and TensorBoard's writers, once the start succeeded: a start refused on
        the way (a checkpoint that does not restore) leaves the record of the run as it was, and adds no event
        files. The record's notes (a provenance.json that did not read), as lines; a change of the training files
        is said by the resume's data note (data_position.py), against the checkpoint's files."""
        notes = []
        if self.writes == self.folder:  # the chief records what made the run (specgen diff RUN RUN reads it)
            resumed = self.step if self.begin.checkpoint is not None else None
            notes = provenance.record(self.folder, self.loaded, self.begin.overrides, _devices(), resumed,
                                      self.files.fingerprint(), self.restore_record)
            # Its checkpoints' digest, now, from the files just hashed: never at a save, mid-training. A worker that
            # is not the chief leaves it None: its checkpoints are removed (Distribution.saved), and hashing the
            # data for them would hold up the others at the next collective.
            self.files_sha256 = self.files.digest()
        self.writers = {stage: tf.summary.create_file_writer(str(self.writes / "tensorboard" / stage))
                        for stage in ("train", "eval")}
        return "".join(f"\nnote: {note}" for note in notes)

    def _overrides_shown(self) -> str:
        begin = self.begin
        new = begin.overrides[len(begin.kept):]
        shown = [self._override_shown(t, True) for t in begin.kept] + [self._override_shown(t, False) for t in new]
        return " with " + ", ".join(shown) if shown else ""

    def _override_shown(self, text: str, kept: bool) -> str:
        """`--set KEY=VALUE`, with whether the run kept it and whether it acts in this command (a kept
        train.distribute.cpu_devices without --strategy does not: kinds/features/distribute.py STRATEGY_ONLY)."""
        said = ["kept from the run"] if kept else []
        if not self.distribution.distributed and distribute.without_strategy(text):
            said.append(distribute.IDLE)
        return f"--set {text}" + (f" ({'; '.join(said)})" if said else "")

    def data_settings(self) -> dict[str, int]:
        """What the saved data position depends on: restoring it under other values would misfit or mislead."""
        train = self.train_ir
        return {"batch_size": self.batch_size, "examples": self.examples, "seed": train.seed,
                "shuffle_buffer": train.shuffle_buffer}

    def training_batches(self, seed: int) -> tf.data.Dataset:
        """This process's training pipeline, each pass cut into whole updates (runtime/data.py)."""
        return data.training_batches(self.train_source, self.worker_batch, seed, self.train_ir.shuffle_buffer,
                                     accumulate.of(self.train_ir))

    def target_step(self) -> int:
        """The step the run ends at (`self.end`, run_end.py): counted in made updates (--steps); or the end of its
        epochs' passes, `updates_per_epoch` attempts each (train.py), which end that many steps short when updates
        are skipped (mixed_float16)."""
        return self.end.step if self.end.by == "steps" else self.step + self.end.step - self.attempts

    @property
    def one_graph(self) -> bool:
        """Whether `updates` runs a whole chunk in one graph call (gradient steps: `train_steps` is a tf.function).
        Levenberg-Marquardt's `train_steps` and accumulating trainers call TensorFlow from Python once an update
        or micro-batch, so the loop can stop (Ctrl-C) between two of their updates."""
        steps = getattr(self.trainer, "train_steps", None)
        return not isinstance(self.trainer, AccumulatingTrainer) and isinstance(
            steps, tf.types.experimental.GenericFunction)

    def updates(self, count: int) -> tf.Tensor:
        """Attempt `count` updates; returns the last micro-batch's loss (a tensor: no host sync per step). Seeded by
        attempt (the global step unless updates were skipped), so a resume draws as the uninterrupted run did."""
        loss = self.distribution.updates(self.trainer, self.iterator, self.attempts, count, self.train_ir)
        # The global step, not `count`: under train.precision mixed_float16 a skipped update does not advance it.
        self.read_step()
        self.attempts += count
        for line in hooks.notes(self.trainer):  # generated code keeps its log lines; printing is the command's
            print(line, file=sys.stderr)
        return loss

    def metrics(self) -> dict[str, float]:
        return {m.name: float(m.result().numpy()) for m in self.trainer.metrics}

    def loss_terms(self, loss: float) -> dict[str, float]:
        """TensorBoard's `loss/<term name>` scalars of the last micro-batch (a lone term is the loss itself)."""
        return hooks.loss_scalars(self.trainer, self.training.terms, loss)

    def learning_rates(self) -> dict[str, float]:
        """TensorBoard's `learning_rate/<optimizer>` scalars: each optimizer's rate at this step (after its
        schedule), for `specgen curves`. An optimizer without one (levenberg_marquardt: its damping sets the step,
        `learning_rate_key` empty) logs none."""
        return {f"learning_rate/{o.name}": float(self.trainer.learning_rate(o.name).numpy())
                for o in self.training.optimizers if o.learning_rate_key}

    def reset_metrics(self) -> None:
        for metric in self.trainer.metrics:
            metric.reset()

    def evaluate(self, between: Callable[[], None] = lambda: None) -> dict[str, float]:
        """The eval stage: metrics reset first; on the weights the features choose (EMA shadows when asked).
        `between` runs after each batch (the loop's Ctrl-C check: it raises to stop)."""
        if self.eval_data is None:
            return {}
        self.reset_metrics()
        with hooks.evaluation_weights(self.trainer, self.train_ir):
            for features, labels in self.eval_data:
                self.distribution.eval_step(self.trainer, features, labels)
                between()
            results = self.metrics()
        self.reset_metrics()
        self._summaries("eval", results)
        self.writers["eval"].flush()  # on disk now (once an epoch): `specgen sweep`'s pruner reads each eval as it comes
        return results

    def _summaries(self, stage: str, values: dict[str, float]) -> None:
        with self.writers[stage].as_default(step=self.step):
            for name, value in values.items():
                tf.summary.scalar(name, value)
        self.tracker.scalars(stage, self.step, values)

    def flush_summaries(self) -> None:
        for writer in self.writers.values():
            writer.flush()

    def refuse_non_finite(self, loss: float = 0.0) -> None:
        """Stop a diverged run before it saves: a NaN or infinite loss or weight would overwrite good
        checkpoints with state that exports and resumes can only refuse (the numeric gates of issue 9)."""
        bad = [] if math.isfinite(loss) else [f"the loss is {loss}"]
        if not bad:
            floats = {k: v for k, v in self.model.variables_by_path().items() if v.dtype.is_floating}
            finite = tf.stack([tf.reduce_all(tf.math.is_finite(v)) for v in floats.values()]).numpy()
            bad = [f"'{name}' holds NaN or infinity" for name, ok in zip(floats, finite, strict=True) if not ok][:5]
        if not bad:
            return
        kept = self.last_path or self.checkpoints.newest()[0]
        newest = f"the newest checkpoint, {kept.name}, is left as it was" if kept else "no checkpoint was written"
        raise SpecError([Diagnostic(str(self.loaded.display), None, f"training diverged by step {self.step}: "
                                    f"{'; '.join(bad)}. Nothing was saved for it; {newest}. {self._advice(loss)}, "
                                    "then train again (--resume continues from the newest checkpoint)")])

    def _advice(self, loss: float) -> str:
        """What can help. Under mixed_float16 a non-finite loss comes from the forward pass: an update whose
        gradients overflow is skipped by the loss scale, so only an activation float16 rounds to inf (>= 65520; then
        NaN) makes the loss itself non-finite, which no learning rate changes at step 0."""
        if precision.of(self.train_ir) != "mixed_float16" or math.isfinite(loss):
            return "Lower the learning rate, add train.clip, or check the data"
        grown = "" if self.step == 0 else (" (after finite steps the weights may have grown too: a lower learning "
                                           "rate or train.clip helps there)")
        return ("The forward pass overflowed float16 (train.precision mixed_float16): an activation of 65520 or more "
                "(float16's largest value, 65504, plus half its step) rounds to inf and the loss becomes NaN, and loss "
                f"scaling protects only the gradients{grown}. Train with precision mixed_bfloat16 (float32's range) "
                "or float32, or scale the inputs down (normalize them) so the activations stay within float16")

    def save(self) -> Path:
        """A checkpoint of this step, once: the end of a run that just saved it writes nothing more."""
        if self.saved_at == self.step and self.last_path is not None:
            return self.last_path
        # TensorBoard's writers flush on their own thread (every 120 s or 10 events queued): flushed here, what is
        # on disk at a save is the same every run (a full disk fails at the same file) and the event files hold
        # every point up to the checkpoint's step. A failed flush is an OpError, reported by train.py.
        self.flush_summaries()
        # `optimizers`: each one's kind, which --resume must find unchanged (resume_fit.py: adam and adamw save the
        # same slots, and only this record tells them apart).
        meta = {"spec": self.ir.name, "overrides": self.begin.overrides, "data": self.data_settings(),
                "accumulate": accumulate.of(self.train_ir),  # the cut of each pass (data_position.py)
                "train_files_sha256": self.files_sha256,  # data_position.py; hashed at start (_open_records)
                "optimizers": {o.name: o.kind for o in self.training.optimizers}, **hooks.checkpoint_meta(self.trainer),
                "pass_start": self.pass_start,  # where the data's pass began: epochs end on its pass ends
                **self.end.meta()}  # the run's end, where a plain --resume goes on to (run_end.py)
        self.refuse_non_finite()
        try:
            path = self.checkpoints.save(self.step, self.saved_variables(), self.iterator, meta)
            self.distribution.saved(path)  # a worker that is not the chief removes its copy (TensorFlow's pattern)
        except OSError as exc:  # a full disk, a quota, a file-size limit (TensorFlow's errors too: checkpoint.py)
            target = getattr(exc, "specgen_target", None) or exc.filename or ""  # write_atomic's file, or TF's
            file = _published(Path(str(target)))
            name = f"checkpoint ckpt-{self.step:08d} (step {self.step})"
            inside = any(part.startswith(".ckpt-") for part in Path(str(target)).parts)  # the unpublished folder
            what = f"{file} of {name}" if inside and file and not file.startswith(".") else name if inside \
                else f"{shown(target)} after saving {name}"
            raise write_failure(exc, self.folder, what) from None
        self.saved_at, self.last_path = self.step, path
        return path


def _published(written: Path) -> str:
    """The name a checkpoint file TensorFlow was writing has once saved: its writers write `<name>.tempstate<n>`
    and rename it, and a sharded save (the data iterator's) writes `data_temp/part-00000-of-00001.<suffix>` and
    merges it into `data.<suffix>`; a message names the file the user finds in a checkpoint folder."""
    file = re.sub(r"\.tempstate\d+$", "", written.name)
    part = re.fullmatch(r"part-\d+-of-\d+\.(.+)", file)
    if part and written.parent.name.endswith("_temp"):
        return f"{written.parent.name.removesuffix('_temp')}.{part[1]}"
    return file


def _devices() -> list[str]:
    """The accelerators TensorFlow sees, by model name (`GPU: NVIDIA H100 80GB HBM3`)."""
    found = []
    for device in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(device)
        found.append(f"GPU: {details.get('device_name', device.name)}")
    return found

