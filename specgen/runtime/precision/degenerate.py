"""A gate sample that cannot test a variant: the accuracy gate on it would pass whatever the variant computes.

The gates compare the variant with float32 on examples (the eval set at export, `sample.npz` at load), and int8
calibrates its ranges on the same rows. These samples make that comparison empty, so "0.00 points lost" would be
a vacuous pass (an eval set of one constant image passed int8 at 0.00 points; on the real images it lost 41):

- fewer than MIN_DISTINCT distinct examples (all inputs together): a variant that changes one answer in four
  (MISS_RATE) passes n examples unseen with probability 0.75**n, under 5% (MISS_CHANCE) only from 11 on;
- a classifier's labels of one class: a variant that answers that class everywhere would lose nothing;
- a float input the same in every example, for a variant with calibrated ranges only (static int8; the caller
  says which inputs, `constant_inputs`): its range is calibrated on that one value, every other value saturates
  to it, and the gate never sees one. An fp16 variant, or a dynamic int8 one (ranges measured per run), rounds
  another value as it rounds this one, so there a constant input (an all-1.0 mask, a fixed flag or temperature)
  is no reason to refuse. Integer inputs (ids, lengths) are exact in every precision and are never checked.

A constant input that is constant in use too (the mask of an eval set of full-length sequences, always full
length in use) is legitimate: `specgen export --force` then writes the variant unverified and records the input in
variant.json (`constant_inputs`), and the server runs every gate at load but this rule for those inputs.

Only numpy and hashlib: the export and the server's load both call `problem` before any gate.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import numpy as np

MISS_RATE, MISS_CHANCE = 0.25, 0.05
MIN_DISTINCT = math.ceil(math.log(MISS_CHANCE) / math.log(1 - MISS_RATE))  # 11
CHUNK_ROWS = 1024  # rows compared at a time: the comparison's boolean array stays small on a large eval set


def _constant(array: np.ndarray) -> bool:
    """Whether every row of `array` equals its first (stops at the first chunk that differs)."""
    first = array[:1]
    return all(bool(np.array_equal(array[i:i + CHUNK_ROWS], np.broadcast_to(first, array[i:i + CHUNK_ROWS].shape)))
               for i in range(0, len(array), CHUNK_ROWS))


def constant_inputs(inputs: dict[str, np.ndarray]) -> tuple[str, ...]:
    """The float inputs whose value is the same in every example (of more than one), in `inputs`' order."""
    rows = len(next(iter(inputs.values())))
    return tuple(name for name, array in inputs.items() if rows > 1 and array.dtype.kind == "f" and _constant(array))


def _distinct(inputs: dict[str, np.ndarray], rows: int, enough: int) -> int:
    """How many distinct examples `inputs` hold, counted up to `enough` (each row's bytes hashed, all inputs)."""
    seen: set[bytes] = set()
    for i in range(rows):
        digest = hashlib.blake2b(digest_size=16)
        for array in inputs.values():
            digest.update(np.ascontiguousarray(array[i]).tobytes())
        seen.add(digest.digest())
        if len(seen) >= enough:
            break
    return len(seen)


def problem(inputs: dict[str, np.ndarray], labels: np.ndarray | None, logits: str | None,
            constant: Sequence[str] = ()) -> str | None:
    """Why this sample cannot test a variant (the phrase after "cannot test the variant: "), or None.

    `labels` and `logits`: a classifier's, whose gate counts points of accuracy; None for other models.
    `constant`: the inputs the constant-input rule refuses (`constant_inputs`, for a variant with calibrated ranges,
    less those the export was told with --force are constant in use); () where it does not apply."""
    rows = len(next(iter(inputs.values())))
    if constant:
        return (f"input '{constant[0]}' is the same in all {rows:,} examples, so int8's calibrated range for it is that "
                "one value (every other value saturates to it), and the gate never sees another")
    distinct = _distinct(inputs, rows, MIN_DISTINCT)
    if distinct < MIN_DISTINCT:
        return (f"it holds {distinct} distinct example{'s' * (distinct != 1)} (of {rows:,}); the gate needs at least "
                f"{MIN_DISTINCT}, since on fewer a variant that changes one answer in four passes unseen more than "
                f"{MISS_CHANCE:.0%} of the time")
    if labels is not None and logits is not None and len(classes := np.unique(labels)) == 1:
        return (f"its labels are all class {classes[0]} ({rows:,} examples), so a variant that answers "
                f"{classes[0]} everywhere would lose no accuracy; the accuracy gate needs at least two classes")
    return None
