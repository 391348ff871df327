"""`specgen train`: run the generated training step on the spec's data, with checkpoints.

The spec is rendered in memory (exactly what `specgen build` writes), the two
generated modules are written to `<run>/code/` and imported from there (see
`session.py`), and the loop below drives them: micro-batches, updates, an eval stage
per epoch, TensorBoard summaries (one writer per stage), checkpoints every
`checkpoint.every_steps` updates, and a final summary.

Ctrl-C, at any moment of the command (runtime/interrupt.py notes it, the checks below act on it): one line, exit
status 130, never a traceback; the line says what --resume would continue from, or, before the first checkpoint,
that the run must be started again (a --resume there has nothing to continue). SIGTERM (`timeout`, `docker stop`,
a Kubernetes eviction, Slurm's preemption), once the command's Interrupts is entered, stops at the same points with
the same line, saying so, and exit status 143; a tracked MLflow run ends KILLED either way.
"""

from __future__ import annotations

import math
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import tensorflow as tf

from specgen.ir.lints import momentum_warnings
from specgen.ir.training.build import run_folder
from specgen.kinds.features import accumulate
from specgen.paths import shown
from specgen.pipeline import Built, build
from specgen.progress import TrainProgress
from specgen.runtime import data, hooks, hparams
from specgen.runtime.checkpoint import CheckpointFolder, write_failure
from specgen.runtime.commands.resume import Options, Start, prepare
from specgen.runtime.commands.run_end import RunEnded
from specgen.runtime.commands.session import Session
from specgen.runtime.disk import os_error
from specgen.runtime.interrupt import Interrupts, exit_status, stoppable
from specgen.runtime.placement import replicas as distribute
from specgen.runtime.placement.default import Distribution
from specgen.tracking import start as start_tracking

__all__ = ["Options", "Session", "run_folder", "train"]


def _format(values: dict[str, float]) -> str:
    return "  ".join(f"{k} {v:.4f}" for k, v in values.items())


LOG_EVERY = 20  # updates between progress lines and TensorBoard points (and at epoch ends)


def _end(session: Session) -> int | None:
    """Where the run's epochs end, in attempted updates (Session.attempts: made or skipped, each reads its
    micro-batches, so E passes are E x updates_per_epoch attempts); None for an end counted in made updates
    (--steps N), which is `stop`, the global step. The run's end is its own (run_end.py): a plain --resume goes
    on to the end the checkpoint records, --steps/--epochs extend it."""
    return None if session.end.by == "steps" else session.end.step


def _left(session: Session, stop: int, end: int | None) -> int:
    """Updates still to attempt at least: up to `stop` made ones under --steps, else up to `end` attempted."""
    return stop - session.step if end is None else end - session.attempts


def _chunk(session: Session, stop: int, end: int | None) -> int:
    """How many updates to attempt before the loop must look up: the end, a log, a checkpoint or an epoch end.
    Logs, checkpoints and --steps count made updates (the global step); epochs count attempted ones, so that each
    ends at its pass's end even when mixed_float16 skips updates. An attempt advances each count by at most 1:
    the nearest mark of either is never passed (a chunk that skips some stops short of a step mark instead)."""
    step, tried, every, per = session.step, session.attempts - session.pass_start, session.every, session.updates_per_epoch
    return min(_left(session, stop, end), LOG_EVERY - step % LOG_EVERY, every - step % every, per - tried % per)


def _updates(session: Session, count: int, interrupts: Interrupts) -> tf.Tensor:
    """`count` updates, stopping for Ctrl-C between graph calls: after the chunk's one graph call (gradient steps),
    after each update where Python drives TensorFlow update by update (Levenberg-Marquardt, accumulation)."""
    if session.one_graph:
        loss = session.updates(count)
    else:
        loss = tf.constant(0.0)
        for _ in range(count):
            loss = session.updates(1)
            interrupts.check()
    interrupts.check()
    return loss


def _interrupted(built: Built, options: Options, when: str, signum: int | None = signal.SIGINT) -> SystemExit:
    """Ctrl-C (or SIGTERM, `signum`): one line, no traceback, exit status 130 (a shell's for SIGINT; 143 for
    SIGTERM; None, Python's own KeyboardInterrupt, is Ctrl-C). Nothing is saved then: a save
    could itself be cut short, and the newest checkpoint, whole (saves are atomic), is where --resume goes on.
    It is read from the folder, as --resume reads it: a Ctrl-C inside a save can land after the checkpoint was
    published and before the session noted it (`last_path` would name the one before). A plain --resume goes on
    to the run's end, which the checkpoint records (run_end.py), so it ends where the uninterrupted run would.
    With none there, the advice is to start the run again: --resume would only say that the folder holds no
    checkpoint."""
    path = CheckpointFolder(run_folder(built.loaded), 1).newest()[0]
    if path is not None:
        advice = f"the newest checkpoint is {shown(path)}: continue with --resume"
    else:
        again = " ".join(["specgen train", built.loaded.display, *(f"--set {t}" for t in options.overrides)])
        advice = f"no checkpoint was saved yet: start the run again with {again} (without --resume)"
    number = signal.SIGINT if signum is None else signum
    how = "interrupted" if number == signal.SIGINT else f"stopped by {signal.Signals(number).name}"
    print(f"\nspecgen train: {how} {when}; {advice}", file=sys.stderr)
    return SystemExit(exit_status(number))


def train(built: Built, options: Options) -> dict[str, Any]:
    """`built`: the spec, its IR and its generated code, built once by the command."""
    # Ctrl-C is noted for the whole command, start-up included, and acted on at `check()`s: between start-up
    # phases (where nothing of the run folder has been written yet, see resume.Start.before_writes) and between
    # TensorFlow calls in the loop. A KeyboardInterrupt raised inside TensorFlow's Python code could leave a
    # traced function half built or be swallowed (interrupt.py), and one raised anywhere else was a traceback.
    # The strategy's start stays interruptible at once: under multi_worker it waits for the other workers.
    # A stop signal while the strategy starts (multi_worker waits there for every worker, inside TensorFlow's C++,
    # which also takes SIGTERM over) ends the process from a thread, with the line below (interrupt.stoppable).
    try:
        with stoppable(lambda signum: _interrupted(built, options, "before training started", signum)):
            distribution = distribute.start(built.loaded, built.ir, options.strategy)  # first: it configures TF
    except KeyboardInterrupt:
        raise _interrupted(built, options, "before training started") from None
    with Interrupts() as interrupts:
        try:
            return _guarded(built, options, distribution, interrupts)
        except KeyboardInterrupt:  # a check() outside the loop (the loop words its own line, with the step)
            raise _interrupted(built, options, "before training started", interrupts.signum) from None


def _guarded(built: Built, options: Options, distribution: Distribution, interrupts: Interrupts) -> dict[str, Any]:
    """`_train` with its TensorFlow errors turned into one-line reports."""
    loaded, ir = built.loaded, built.ir
    try:
        interrupts.check()
        with _without_global_seed():
            return _train(built, options, distribution, interrupts)
    except tf.errors.OpError as exc:
        folder = run_folder(loaded)  # where --resume looks, whichever worker this is
        if (error := os_error(exc)) is not None:  # a full disk under TensorBoard's writers (checkpoints: Session.save)
            raise write_failure(error, folder, _written(error, folder)) from None
        if isinstance(exc, distribution.lost):  # a peer gone (none for one device)
            raise distribution.lost_worker(loaded, exc) from None
        if data.from_pipeline(exc):  # a data file changed, removed or unreadable after its checks (runtime/data.py)
            raise data.unreadable_mid_run(loaded, ir, exc, folder) from None
        # a file of the run folder removed or made unwritable under TensorBoard's writers (after the data's check:
        # a data file kept in the run folder is the data's)
        if (error := os_error(exc, within=folder)) is not None:
            raise write_failure(error, folder, _written(error, folder)) from None
        raise  # the model's step, or anything else: not the data's, so not reworded
    finally:
        distribution.close()


@contextmanager
def _without_global_seed() -> Iterator[None]:
    """The run as in a fresh process, whatever global seed its caller set; the caller's seed is set back after.

    tf.data's shuffles pair their own seed (train.seed) with TensorFlow's global seed, or a fixed default when
    none is set: a `tf.random.set_seed` (or `keras.utils.set_random_seed`) earlier in the same process (a test
    file, a notebook) reordered the data and changed every weight. Setting it back restarts the caller's sequence
    of op seeds as its own `set_seed` did (TensorFlow keeps no other state to save).
    """
    from tensorflow.python.eager import context  # TensorFlow exports no getter of the global seed

    saved = context.global_seed()
    if saved is not None:
        tf.random.set_seed(None)
    try:
        yield
    finally:
        if saved is not None:
            tf.random.set_seed(saved)


def _round(session: Session, stop: int, end: int | None, first: int, started: float, progress: TrainProgress,
           interrupts: Interrupts) -> dict[str, float]:
    """One chunk of updates up to the next log, checkpoint or epoch end (`_chunk`), and what follows it; the eval
    results when an epoch ended (else empty)."""
    loss = float(_updates(session, _chunk(session, stop, end), interrupts))
    if not math.isfinite(loss):
        session.refuse_non_finite(loss)
    step, rate = session.step, (session.step - first) / max(time.monotonic() - started, 1e-9)
    train_metrics = session.metrics() | hooks.progress_values(session.trainer)
    line = f"step {step}/{stop}  {rate:.1f} steps/s  loss {loss:.4f}  {_format(train_metrics)}"
    session._summaries("train", {"loss": loss, **session.loss_terms(loss), **session.learning_rates(),
                                 **train_metrics})
    if step % session.every == 0 and step != first:  # skipped updates (mixed_float16) leave step at first
        session.save()
    interrupts.check()  # a Ctrl-C during the save stops after it: the checkpoint is whole
    left = _left(session, stop, end)
    in_pass = session.attempts - session.pass_start  # passes are counted from where the data's current one began
    epoch_end = in_pass % session.updates_per_epoch == 0 or left == 0  # a pass's end, or the run's
    progress.show(stop - left, line,  # attempts under epochs: the bar fills at the end, skipped updates or not
                  f"loss {loss:.4f}  {_format(train_metrics)}".rstrip(), force=epoch_end)
    evaluated: dict[str, float] = {}
    if epoch_end:
        evaluated = session.evaluate(between=interrupts.check)
        if evaluated:
            progress.write(f"eval at step {step}: {_format(evaluated)}")
        session.reset_metrics()
    return evaluated


def _written(error: OSError, folder: Path) -> str:
    """What a failed write was writing, in a few words (TensorBoard events, or the file)."""
    name = Path(str(error.filename or folder))
    return f"TensorBoard events ({shown(name)})" if "tensorboard" in name.parts else shown(name)


def _train(built: Built, options: Options, distribution: Distribution, interrupts: Interrupts) -> dict[str, Any]:
    begin = prepare(built.loaded, options, chief=distribution.chief)  # holds the run folder's lock (run_lock.py)
    try:
        return _run(built, options, distribution, interrupts, begin)
    finally:
        begin.release()  # the lock, once the last checkpoint was saved (or the run stopped)


def _run(built: Built, options: Options, distribution: Distribution, interrupts: Interrupts,
         begin: Start) -> dict[str, Any]:
    begin.before_writes = interrupts.check  # a Ctrl-C during the checks stops before the run folder's first write
    # Overrides kept from a resumed checkpoint change the spec, and so its IR and code: only then is it built again.
    try:
        session = Session(built if begin.loaded is built.loaded else build(begin.loaded), options, begin, distribution)
    except RunEnded as ended:  # a plain --resume of a run at its end: said, exit 0, nothing written (run_end.py)
        print(ended.line)
        return ended.summary
    interrupts.check()
    for note in begin.notes:  # after the Session: its checks come before the run folder's first write
        print(f"note: {note}")
    for line in distribution.describe():
        print(line)
    print(session.start())
    interrupts.check()
    if session.writes == session.folder:  # the chief: the run's --set values for TensorBoard's HParams tab
        hparams.write(session.folder, begin.overrides)
    # MLflow (when asked): after the start, so a resume continues the MLflow run that the run folder records
    session.tracker = start_tracking(begin.loaded, options.track, session.folder, begin.overrides,
                                     begin.checkpoint is not None, session.writes == session.folder)
    try:
        summary = _loop(session, built, interrupts)
    except BaseException as exc:  # Ctrl-C or SIGTERM (SystemExit 130, 143) is KILLED; a divergence or any error, FAILED
        session.tracker.finish("KILLED" if isinstance(exc, SystemExit) else "FAILED")
        raise
    session.tracker.finish("FINISHED")
    return summary


def _loop(session: Session, built: Built, interrupts: Interrupts) -> dict[str, Any]:
    """From the first update to the last save and the summary line."""
    stop = session.target_step()
    # Batch-norm statistics move once per micro-batch since initialization: warn when the run is too short
    # for the momentum to leave the initial values behind (issue 12's lints; validate cannot know the count).
    # A fine-tuning restore's statistics did not start at 0 and 1: a new run leaves out those its plan restored,
    # and a resumed one of such a spec says nothing (its statistics began from the restore when it started).
    plan, resumed = session.restore_plan, session.begin.checkpoint is not None
    skip = "bn_momentum" in session.ir.skip_lints or (resumed and bool(session.training.checkpoint.restore))
    skip = skip or stop <= session.step  # a run that trains nothing (--steps 0, --epochs 0) moves no statistics
    restored = frozenset(row.path for row in plan.rows if row.status == "restored") if plan else frozenset()
    for line in [] if skip else momentum_warnings(session.ir, stop, restored, accumulate.of(session.train_ir)):
        print(line, file=sys.stderr)
    started, first, tried = time.monotonic(), session.step, session.attempts
    end = _end(session)
    evaluated: dict[str, float] = {}
    session.reset_metrics()
    print(f"training {session.ir.name}: step {first} -> {stop} ({session.updates_per_epoch} updates per epoch, "
          f"{session.examples} examples)")
    progress = TrainProgress(first, stop, session.options.quiet)  # after the lines above: a bar starts drawing at once
    try:  # Ctrl-C is noted (train's Interrupts) and acted on between TensorFlow calls (interrupt.py)
        interrupts.check()  # one noted while the model was built and restored: before the first update
        while _left(session, stop, end) > 0:
            evaluated = _round(session, stop, end, first, started, progress, interrupts) or evaluated
    except KeyboardInterrupt:  # raised by interrupts.check(), or by Python where no handler could be installed
        progress.close()  # before the message, which would otherwise land on the bar's line
        raise _interrupted(built, session.options, f"at step {session.read_step()}", interrupts.signum) from None
    finally:
        progress.close()  # closing twice is nothing
    path = session.save()  # a Ctrl-C during the last save is noted and let go: the save completes, the run is done
    elapsed = time.monotonic() - started
    summary = {"step": session.step, "updates": session.step - first, "seconds": elapsed, "checkpoint": str(path),
               "eval": evaluated}
    chief = session.writes == session.folder
    saved = shown(path) if chief else f"{shown(session.folder / path.name)} (written by the chief)"
    skipped = session.attempts - tried - (session.step - first)  # mixed_float16's loss scale: counted, not made
    made = f"{summary['updates']} updates" + (f", {skipped} skipped," if skipped else "")
    print(f"done: {made} in {elapsed:.1f} s, step {session.step}, checkpoint {saved}")
    return summary
