"""The rule `specgen train --resume` applies to a checkpoint (runtime/commands/resume_fit.py says why it is this
rule), apart from how it is said, and without TensorFlow: `specgen diff` judges a resume of OLD's runs by NEW with it
(review/resume.py), from OLD's IR in place of a real checkpoint.

A checkpoint resumes under a spec when its keys are exactly the keys the spec saves (`saved_keys`), each of the same
shape and dtype, the loss scale's keys (`OPTIONAL`) excepted, and each optimizer's recorded kind is the spec's.
"""

from __future__ import annotations

from dataclasses import dataclass

from specgen.ir.model import ModelIR
from specgen.kinds.features import precision

Shapes = dict[str, tuple[tuple[int, ...], str]]  # checkpoint key -> (shape, dtype name)
OPTIONAL = frozenset(precision.KEYS)  # train.precision's loss scale: a resume crosses precisions


@dataclass(frozen=True)
class KindChange:
    """An optimizer whose kind is not the one recorded with the checkpoint."""

    name: str
    was: str  # recorded when the checkpoint was saved
    now: str  # the spec's


@dataclass(frozen=True)
class KeyChange:
    """A key the checkpoint lacks (`saved` None), holds but the spec does not save (`expected` None), or holds at
    another shape or dtype."""

    key: str
    saved: tuple[tuple[int, ...], str] | None
    expected: tuple[tuple[int, ...], str] | None


def kind_changes(ir: ModelIR, kinds: dict[str, str]) -> list[KindChange]:
    """Each optimizer of `ir` whose kind differs from `kinds` (name -> kind, as meta.json records them); one that is
    added or removed shows in the keys (its slots and `iterations`)."""
    optimizers = ir.training.optimizers if ir.training is not None else []
    return [KindChange(o.name, kinds[o.name], o.kind) for o in optimizers if o.name in kinds and kinds[o.name] != o.kind]


def key_changes(expected: Shapes, found: Shapes) -> list[KeyChange]:
    """The keys that differ: missing or of another shape or dtype, in the spec's variable order, then the ones the
    spec would not read, sorted."""
    changes = [KeyChange(key, found.get(key), want) for key, want in expected.items()
               if (key not in found and key not in OPTIONAL) or (key in found and found[key] != want)]
    return changes + [KeyChange(key, found[key], None) for key in sorted(found)
                      if key not in expected and key not in OPTIONAL]
