"""Does a checkpoint's saved state mean the same under the spec a `--resume` runs now? Checked before the run folder's
first write, from the spec's IR (no model is built), so a refusal changes nothing on disk.

The rule: the checkpoint's training-state keys are exactly the keys this spec saves (none missing, none the spec
would no longer read), each with the same shape and dtype, and each optimizer's kind is the one recorded when the
checkpoint was saved (meta.json `optimizers`). Why exactly, and not "every key the spec reads is there": a resume
that leaves saved state unread silently reinterprets the run. Removing `train.ema` or `prune` drops the shadows the
eval and export read or the masks that hold pruned weights at zero; `batch_norm` -> `layer_norm` under one name
keeps gamma and beta and drops the moving statistics; `adam` -> `lion` reads Adam's first moment as Lion's momentum
and drops `v`; `adam` -> `adamw` has the very same slots, which only the recorded kind tells apart. One rule for
every key, rather than a list of the harmless ones, also refuses switching `train.accumulate` between 1 and more
(its accumulators are zero at a save, but the rule has no exceptions to keep up to date as features come); between
two values above 1 the keys are the same and session.py starts a new pass. A checkpoint saved before kinds were
recorded is compared by its keys (the slot names) only, and a note says so.

Allowed as before, since they reinterpret nothing: hyperparameters (learning rates, schedules' settings, epochs,
weight decay, clip), the batch size and other data settings (session.py starts a new pass with a note), and
`train.precision`: its loss-scale keys (precision.KEYS) may be missing (a float32 checkpoint: the scale starts
fresh) or unread (a float32 run of a mixed_float16 checkpoint), as docs/training.md documents.

The way out of a refusal is a new run that restores the model variables only from the checkpoint
(`checkpoint.restore`, docs/finetune.md): its own optimizer state, step and accumulators start fresh there.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from specgen.diagnostics import Diagnostic, SpecError, quoted
from specgen.ir.model import ModelIR
from specgen.ir.restore_targets import saved_keys  # shared with `specgen diff` (review/checkpoint.py)
from specgen.ir.resume_rule import Shapes, key_changes, kind_changes
from specgen.paths import shown
from specgen.runtime.checkpoint import key_shapes
from specgen.runtime.commands.resume import Start
from specgen.runtime.integrity import META, key_position


def check_fit(ir: ModelIR, start: Start) -> list[str]:
    """Refuse (one line) a resumed checkpoint whose state this spec would reinterpret; the notes to print."""
    path = start.checkpoint
    if path is None:
        return []
    kinds = start.meta.get("optimizers")
    problems = _kind_problems(ir, kinds) if isinstance(kinds, dict) else []
    problems += _key_problems(saved_keys(ir), key_shapes(path / "variables"), path.name)
    if problems:
        raise _refusal(start, path, problems)
    if isinstance(kinds, dict):
        return []
    return [f"{path.name} records no optimizer kinds (an older specgen saved it): --resume compared the names of "
            "their saved slots only, so a change of kind with the same slots (adam -> adamw) is not noticed"]


def _kind_problems(ir: ModelIR, kinds: dict[str, Any]) -> list[tuple[str, str]]:
    """(meta.json key, problem) for each optimizer whose kind changed; added or removed ones show in the keys."""
    assert ir.training is not None
    return [("optimizers", f"optimizer {quoted(c.name)} is {c.now} in this spec but was {c.was} when the "
             f"checkpoint was saved: its saved state is {c.was}'s, and would be read as {c.now}'s")
            for c in kind_changes(ir, kinds)]


def _key_problems(expected: Shapes, found: Shapes, name: str) -> list[tuple[str, str]]:
    """('', problem) for each key missing, unread or of another shape or dtype, in the spec's variable order."""
    problems: list[tuple[str, str]] = []
    for change in key_changes(expected, found):  # the rule, shared with `specgen diff` (ir/resume_rule.py)
        key = change.key
        if change.saved is None:
            problems.append(("", f"{name} lacks {quoted(key)}, which this spec saves: it would start from its "
                             "initial value"))
        elif change.expected is None:
            problems.append(("", f"{name} holds {quoted(key)}, which this spec does not save: it would be dropped"))
        else:
            (saved_shape, saved_dtype), (shape, dtype) = change.saved, change.expected
            problems.append(("", f"{quoted(key)} is {saved_dtype}{list(saved_shape)} in {name} but "
                             f"{dtype}{list(shape)} in this spec"))
    return problems


def _refusal(start: Start, path: Path, problems: list[tuple[str, str]]) -> SpecError:
    """The first difference, how many more, and the two ways on: undo the change, or restore model variables only."""
    key, problem = problems[0]
    more = f" ({len(problems) - 1} more difference{'s' if len(problems) > 2 else ''})" if len(problems) > 1 else ""
    source = os.path.relpath(path, start.loaded.folder)  # checkpoint.restore paths count from the spec's folder
    message = (f"--resume: {problem}{more}; the spec changed since {path.name} was saved. Nothing was changed. Undo "
               f"the change to resume, or start a new run that restores only the model variables from it: "
               f"checkpoint.restore: [{{from: {source}}}] and another checkpoint.dir (docs/finetune.md)")
    if key:
        text = (path / META).read_text()
        return SpecError([Diagnostic(shown(path / META), key_position(text, key), message)])
    return SpecError([Diagnostic(shown(path / "variables.index"), None, message)])
