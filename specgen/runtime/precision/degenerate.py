"""A gate sample that cannot test a variant: the accuracy gate on it would pass whatever the variant computes.

The gates compare the variant with float32 on examples (the eval set at export, `sample.npz` at load), and int8
calibrates its ranges on the same rows. Three kinds of sample make that comparison empty, so "0.00 points lost"
would be a vacuous pass (an eval set of one constant image passed int8 at 0.00 points; on the real images it lost 41):

- a float input that is the same in every example: the gate never sees the variant answer another value of it,
  and int8's calibrated range for it is that one value, which every real input saturates to. Integer inputs (ids,
  lengths) are exact in every precision, so one value there is no loss of information about rounding;
- fewer than MIN_DISTINCT distinct examples (all inputs together): a variant that changes one answer in four
  (MISS_RATE) passes n examples unseen with probability 0.75**n, under 5% (MISS_CHANCE) only from 11 on;
- a classifier's labels of one class: a variant that answers that class everywhere would lose nothing.

Only numpy and hashlib: the export and the server's load both call `problem` before any gate.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

MISS_RATE, MISS_CHANCE = 0.25, 0.05
MIN_DISTINCT = math.ceil(math.log(MISS_CHANCE) / math.log(1 - MISS_RATE))  # 11
CHUNK_ROWS = 1024  # rows compared at a time: the comparison's boolean array stays small on a large eval set


def _constant(array: np.ndarray) -> bool:
    """Whether every row of `array` equals its first (stops at the first chunk that differs)."""
    first = array[:1]
    return all(bool(np.array_equal(array[i:i + CHUNK_ROWS], np.broadcast_to(first, array[i:i + CHUNK_ROWS].shape)))
               for i in range(0, len(array), CHUNK_ROWS))


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


def problem(inputs: dict[str, np.ndarray], labels: np.ndarray | None, logits: str | None) -> str | None:
    """Why this sample cannot test a variant (the phrase after "cannot test the variant: "), or None.

    `labels` and `logits`: a classifier's, whose gate counts points of accuracy; None for other models."""
    rows = len(next(iter(inputs.values())))
    for name, array in inputs.items():
        if rows > 1 and array.dtype.kind == "f" and _constant(array):
            return (f"input '{name}' is the same in all {rows:,} examples, so the gate never sees the variant answer "
                    "another value of it")
    distinct = _distinct(inputs, rows, MIN_DISTINCT)
    if distinct < MIN_DISTINCT:
        return (f"it holds {distinct} distinct example{'s' * (distinct != 1)} (of {rows:,}); the gate needs at least "
                f"{MIN_DISTINCT}, since on fewer a variant that changes one answer in four passes unseen more than "
                f"{MISS_CHANCE:.0%} of the time")
    if labels is not None and logits is not None and len(classes := np.unique(labels)) == 1:
        return (f"its labels are all class {classes[0]} ({rows:,} examples), so a variant that answers "
                f"{classes[0]} everywhere would lose no accuracy; the accuracy gate needs at least two classes")
    return None
