"""Where a training run ends, and what a resume without --steps or --epochs does with it.

A run has an END: the step it was started to reach, the start plus the updates of `--steps N`, of `--epochs N`,
or of `train.epochs` when neither was given. Every checkpoint records it (meta.json `until_step`, `until_by`), so
that `--resume` (and `--resume-from`, `--resume-or-start`) WITHOUT --steps/--epochs continues to that end, the
remaining updates: an interrupted run (Ctrl-C, SIGTERM, a kill, a full disk), resumed as the stop line advises, ends where the
uninterrupted one would, bit for bit. This follows Keras' `fit(epochs=E, initial_epoch=k)` and TensorFlow's
`max_steps`. Before it, a plain `--resume` trained `train.epochs` MORE epochs (a run stopped at 8840 of 15000
went on to 23840), so the documented exact resume held only for `--resume --steps TOTAL-saved`.

A run already at (or past) its end, resumed without those flags, trains nothing: one line says so and how to train
more, the command exits 0, and nothing is written (Session raises `RunEnded` before the run folder's first write).
`--steps N` / `--epochs N` with a resume keep their meaning, N MORE updates or passes from the checkpoint: the
explicit extension, whose new end the checkpoints then record.

The end is counted as the run's loop counts (train.py): `--steps` in made updates (the global step); epochs in
attempted ones (the data position, Session.attempts), which is the global step unless mixed_float16's loss scale
skipped updates, so that each pass still ends at its pass's end. A checkpoint of an older specgen records no end and
resumes as if the end were `train.epochs` epochs counted from step 0 (under the spec as resumed: its updates per
epoch now).

The end is recorded with the updates per epoch it was counted in (`until_per_epoch`). A resume can change those
(`--set train.batch_size`, `train.accumulate`, a training file cleaned or extended), and the data then starts a new
pass (data_position.py). An `epochs` end, kept as an update count, would then end mid-pass after another
number of passes than the run was started for; so it is counted anew: the current attempts plus the passes it had
left, a pass begun counted whole (its rest is skipped: the new pass starts at the resume), times the new updates
per epoch. A `steps` end is a step count and stays one. Either way a `note:` line says so.

The data can start a new pass on resume without a change of the updates per epoch (`--set train.seed`, a training
file rewritten with the same count of examples): an `epochs` end inside a pass would then end mid-pass, so it is
moved to the end of the pass it falls in, counted from the new pass's start (`aligned`), with a note. Each
checkpoint records where its data's current pass began (meta.json `pass_start`, in attempted updates), so that
the loop's epoch ends (and the evaluations there) fall on the pass ends of the data it reads, resumed or not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from specgen.paths import shown
from specgen.runtime.commands.resume import Options, Start
from specgen.spec.overrides import override_key

By = Literal["steps", "epochs"]
MORE = "Pass --steps N or --epochs N to train N more"


@dataclass(frozen=True)
class End:
    """`step`: where the run stops; `by`: what it counts; `per_epoch`: the updates per epoch it is counted in (see
    the module's docstring)."""

    step: int
    by: By
    per_epoch: int
    recorded: bool = True  # False: an older checkpoint without `until_step`, its end taken as train.epochs from step 0
    note: str = ""  # why it is not the end the checkpoint records (the updates per epoch changed), for check_not_ended

    def meta(self) -> dict[str, Any]:
        """meta.json's keys (resume.py's Meta reads them back). Named to sort last: json.dumps(sort_keys=True) then
        leaves every earlier key on its line, where errors and tooling point."""
        return {"until_step": self.step, "until_by": self.by, "until_per_epoch": self.per_epoch}

    def left(self, step: int, attempts: int) -> int:
        """Updates still to attempt at least (0 or less: the run is at or past its end)."""
        return self.step - (step if self.by == "steps" else attempts)


class RunEnded(Exception):
    """A resume without --steps/--epochs of a run already at its end: the line to print, and train()'s summary."""

    def __init__(self, line: str, summary: dict[str, Any]):
        super().__init__(line)
        self.line, self.summary = line, summary


def planned(options: Options, start: Start, position: tuple[int, int], per_epoch: int, epochs: int) -> End:
    """The end of this command's run. `position`: (global step, attempted updates) it starts from; `epochs`:
    train.epochs as this command reads the spec."""
    step, attempts = position
    if options.steps is not None:
        return End(step + options.steps, "steps", per_epoch)
    if options.epochs is not None:
        return End(attempts + options.epochs * per_epoch, "epochs", per_epoch)
    if start.checkpoint is None:  # a new run
        return End(attempts + epochs * per_epoch, "epochs", per_epoch)
    saved = start.meta.get("until_step")
    if isinstance(saved, int):  # resume.py's check_meta validated the keys
        return _recounted(start, End(saved, "epochs" if start.meta.get("until_by") == "epochs" else "steps",
                                     per_epoch), position)
    return End(epochs * per_epoch, "epochs", per_epoch, recorded=False)


def _recounted(start: Start, end: End, position: tuple[int, int]) -> End:
    """A recorded end under this resume's updates per epoch (the module's docstring); as recorded when they are the
    same, unknown (a checkpoint saved before `until_per_epoch` was), or the run is at its end."""
    was, left = start.meta.get("until_per_epoch"), end.left(*position)
    if not isinstance(was, int) or was == end.per_epoch or left <= 0:
        return end
    name, now = Path(str(start.checkpoint)).name, end.per_epoch
    changed = f"the updates per epoch changed since {name} ({was} -> {now})"
    if end.by == "steps":
        return End(end.step, "steps", now, note=f"{changed}; the run's end stays step {end.step}, a step count "
                                                "(--steps)")
    passes = -(-left // was)  # a pass begun counts whole: the data starts a new pass here, its rest is skipped
    step = position[1] + passes * now
    return End(step, "epochs", now, note=f"{changed}: the run's end moves from step {end.step} to {step}, the "
                                        f"{passes} pass{'' if passes == 1 else 'es'} it had left ({left} update"
                                        f"{'' if left == 1 else 's'} at {was} a pass; a pass begun counts whole) at "
                                        f"{now} updates each")


def aligned(end: End, attempts: int) -> End:
    """An `epochs` end once the data started a new pass at `attempts` (data_position.py): at a pass's end of the new
    pass, the passes it had left counted whole (as `_recounted`, whose end already is one). A `steps` end, an end
    reached, or one on a pass's end stays as it is."""
    left = end.left(attempts, attempts)
    if end.by == "steps" or left <= 0 or left % end.per_epoch == 0:
        return end
    passes = -(-left // end.per_epoch)
    step = attempts + passes * end.per_epoch
    return End(step, "epochs", end.per_epoch, recorded=end.recorded,
               note=f"the data starts a new pass at step {attempts}, inside a pass of the run's epochs: the run's end "
                    f"moves from step {end.step} to {step}, the end of the pass it falls in ({left} update"
                    f"{'' if left == 1 else 's'} left at {end.per_epoch} a pass; a pass begun counts whole)")


def check_not_ended(options: Options, start: Start, end: End, position: tuple[int, int], per_epoch: int) -> list[str]:
    """Raise RunEnded for a resume, without --steps/--epochs, of a run at or past its end; else the notes to print."""
    if start.checkpoint is None or options.steps is not None or options.epochs is not None:
        return []
    step, attempts = position
    # A new --set train.epochs does not move a recorded end (the end is the run's): said, not ignored in silence.
    unmoved = end.recorded and any(override_key(t)[:2] in (("train",), ("train", "epochs"))
                                   for t in start.overrides[len(start.kept):])
    if end.left(step, attempts) > 0:
        notes = [end.note] if end.note else []
        if unmoved:
            records = "its end counted anew above" if end.note else f"the end {shown(start.checkpoint)} records"
            notes.append(f"--set train.epochs does not move the end of a resumed run: it goes on to step {end.step}, "
                         f"{records}. {MORE}")
        return notes
    more = f"--set train.epochs does not move a run's end: {MORE[0].lower()}{MORE[1:]}" if unmoved else MORE
    line = f"nothing to train: {_where(start.checkpoint, end, position, per_epoch)}; nothing was written. {more}"
    raise RunEnded(line, {"step": step, "updates": 0, "seconds": 0.0, "checkpoint": str(start.checkpoint), "eval": {}})


def _where(path: Path, end: End, position: tuple[int, int], per_epoch: int) -> str:
    """Where the checkpoint is, against the end of its run."""
    step, attempts = position
    if not end.recorded:
        epochs = end.step // per_epoch if per_epoch else 0
        reach = (f"the end of train.epochs ({epochs} epoch{'' if epochs == 1 else 's'} of {per_epoch} updates from "
                 f"step 0; {path.name} records no end: an older specgen saved it)")
    else:
        reach = "the end its run was started to reach"
    if end.by == "steps" or attempts == step:
        at = step if end.by == "steps" else attempts
        return f"{shown(path)} is at step {step}, {f'past step {end.step}, ' if at > end.step else ''}{reach}"
    # An epochs end counts attempted updates, which mixed_float16's skipped ones leave the step short of: said in
    # those, as "past step N" would compare the step with a count of attempts.
    skipped = f"{attempts - step} of them skipped by mixed_float16's loss scale"
    if attempts == end.step:
        return f"{shown(path)} is at step {step}, {reach}: its passes end after {end.step} attempted updates, {skipped}"
    return (f"{shown(path)} is at step {step}, past {reach}: its passes end after {end.step} attempted updates, and it "
            f"attempted {attempts}, {skipped}")
