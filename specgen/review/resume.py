"""The `resume:` line of `specgen diff`'s checkpoint section: would `specgen train NEW --resume` continue a run of
OLD? The checkpoint section judges a new run that restores OLD's weights (`checkpoint.restore`, restore-plan); a
resume is stricter (runtime/commands/resume_fit.py: exactly the saved state, the same optimizer kinds), and its rule
is applied here as --resume applies it (ir/resume_rule.py), to the keys a checkpoint of OLD holds. Said, not a
break: a change that needs a new run (a new optimizer, EMA turned on) is a normal change. No TensorFlow is imported.
"""

from __future__ import annotations

from dataclasses import dataclass

from specgen import text
from specgen.diagnostics import quoted
from specgen.ir.model import ModelIR
from specgen.ir.restore_targets import saved_keys
from specgen.ir.resume_rule import KeyChange, key_changes, kind_changes

SHOWN = 2  # reasons named on the line; the rest are counted


@dataclass(frozen=True)
class Resume:
    accepted: bool
    reasons: list[str]  # why it is refused, in the order --resume finds them (its refusal names the first)

    def line(self) -> str:
        """`resume: accepted: ...` or `resume: refused: ...` with the first reasons."""
        if self.accepted:
            return "resume: accepted: `specgen train NEW` can --resume a run of OLD (the same saved state)"
        more = len(self.reasons) - SHOWN
        return ("resume: refused: `specgen train NEW` cannot --resume a run of OLD ("
                + "; ".join(self.reasons[:SHOWN]) + (f"; {more} more" if more > 0 else "") + ")")


def resume(old: ModelIR, new: ModelIR) -> Resume | None:
    """Whether --resume by NEW accepts a checkpoint of OLD; None where a side trains no runs (nothing to resume)."""
    if old.training is None or new.training is None:
        return None
    reasons = [f"the runs are spec {quoted(old.name)}'s, NEW is {quoted(new.name)}"] if old.name != new.name else []
    reasons += [f"optimizer {quoted(c.name)} {c.was} -> {c.now}"
                for c in kind_changes(new, {o.name: o.kind for o in old.training.optimizers})]
    reasons += [_key(c) for c in key_changes(saved_keys(new), saved_keys(old))]
    return Resume(not reasons, reasons)


def _key(change: KeyChange) -> str:
    if change.saved is None:
        return f"NEW saves {quoted(change.key)}, which OLD's checkpoints lack"
    if change.expected is None:
        return f"OLD's checkpoints hold {quoted(change.key)}, which NEW does not save"
    (old_shape, old_dtype), (new_shape, new_dtype) = change.saved, change.expected
    return f"{quoted(change.key)} {old_dtype}{text.shape(old_shape)} -> {new_dtype}{text.shape(new_shape)}"
