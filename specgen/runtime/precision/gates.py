"""The two gates a precision variant passes before it is written: accuracy against float32, then speed.

Accuracy: on the eval set, a classifier's top-1 accuracy may drop by at most `budget` points (counted in
examples, compared exactly: never a rounded loss); every other output, all of another model's and a
classifier's besides its logits, may differ from float32's by at most `budget` percent (relative L2 norm).
Speed: the variant and float32 are timed on the provider that will run them, in paired rounds (back to back,
order alternating), and the decision is the median of the per-round ratios variant/float32 with a
distribution-free confidence interval (order statistics): the variant ships only when the whole interval is
below 1, so one noisy spell cannot pass it; `force` ships it anyway with a warning.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from specgen import text
from specgen.runtime.parity import accuracy, first_non_finite
from specgen.runtime.precision.base import PrecisionRefusal

Arrays = dict[str, np.ndarray]
CONFIDENCE = 0.95  # of the speed gate's interval: the variant is faster only when all of it is
BUDGET_S = 1.0  # seconds of timing per gate (export and each load): about 25 rounds of ROUND_S per side
ROUND_S = 0.02  # each side of a round: long enough that a timer tick or one scheduler slice is noise
MIN_ROUNDS, MAX_ROUNDS = 9, 400  # 9: a 95% interval from ranks 2 and 8; a slow model exceeds the budget for them
MAX_CALLS = 10_000
FORCE_ADVICE = "pass --force to write it anyway"  # speed_verdict's advice where `specgen export` runs the gate
PAUSE_S = 0.002  # before each side: another session's threads stop spinning, so neither side pays for them


def accuracy_gate(name: str, budget: float, fp32: Arrays, variant: Arrays, labels: np.ndarray | None,
                  logits: str | None) -> dict[str, Any]:
    """What the variant loses on the eval set, or PrecisionRefusal saying by how much it is over `budget`.

    A classifier's `logits` output counts points of accuracy; every other output (all of a model without
    `logits`, a classifier's others) its relative error in percent, against the same budget: an output the
    server answers with is gated whatever the loss reads."""
    problem = first_non_finite(variant)
    if problem is not None:
        raise PrecisionRefusal(f"{name} output {problem} on the eval set (float32's is finite)")
    if logits is not None and labels is None:  # the callers refuse such a sample first: never another metric
        raise ValueError(f"the accuracy gate of the classifier output '{logits}' needs labels")
    rows = len(next(iter(variant.values())))
    report: dict[str, Any] = {}
    if labels is not None and logits is not None:
        report = _points_gate(name, budget, fp32[logits], variant[logits], labels)
    errors = {k: _relative_error(fp32[k], variant[k]) for k in fp32 if k != logits or labels is None}
    if errors:
        report |= _error_gate(name, budget, errors, rows, logits if labels is not None else None)
    return report | {"budget": budget}


def _points_gate(name: str, budget: float, fp32: np.ndarray, variant: np.ndarray,
                 labels: np.ndarray) -> dict[str, Any]:
    """The classifier's gate, on counts of examples right: the loss in points is a fraction (1 of 360 is
    0.2777...), compared exactly with the budget as the spec wrote it, never rounded first."""
    rows = len(fp32)
    before, after = accuracy(fp32, labels), accuracy(variant, labels)  # accuracy() checks labels and values
    right = [int(np.sum(np.argmax(v, axis=-1) == np.asarray(labels).reshape(-1))) for v in (fp32, variant)]
    lost = Fraction((right[0] - right[1]) * 100, rows)
    if _over(lost, budget):
        raise PrecisionRefusal(
            f"{name} loses {text.against(lost, budget)} points of accuracy against float32 (float32 {before:.4f}, "
            f"{name} {after:.4f} on {rows} examples); the budget is "
            f"{text.limit(budget)} (export.onnx.budget): over by {text.against(lost - text.exact_limit(budget), 0)}")
    return {"fp32_accuracy": before, "accuracy": after, "lost_points": float(lost), "examples": rows,
            "fp32_correct": right[0], "correct": right[1]}


def _over(value: Fraction, budget: float) -> bool:
    """Whether `value` exceeds the budget as the spec wrote it (text.exact_limit); an infinite budget holds all."""
    return math.isfinite(budget) and value > text.exact_limit(budget)


def _relative_error(fp32: np.ndarray, variant: np.ndarray) -> float:
    """100 * |variant - float32| / |float32| (L2 over the whole output), in percent."""
    return 100 * float(np.linalg.norm(variant - fp32) / max(float(np.linalg.norm(fp32)), 1e-30))


def _error_gate(name: str, budget: float, errors: dict[str, float], rows: int, logits: str | None) -> dict[str, Any]:
    """The relative-error gate over `errors` (output -> percent); `logits`: the classifier output the points gate
    took, named in the refusal of its other outputs."""
    worst = max(errors, key=lambda k: (not math.isfinite(errors[k]), errors[k]))  # NaN first: never passed over
    error = errors[worst]
    if not math.isfinite(error) or _over(Fraction(error), budget):
        finite = math.isfinite(error)
        shown = text.against(error, budget) if finite else str(error)
        over = text.against(Fraction(error) - text.exact_limit(budget), 0) if finite else str(error)
        what, figures = f"{name} has {shown}% relative error", f"largest over outputs, {rows} examples"
        if logits is not None:
            what = f"{name} output '{worst}' has {shown}% relative error"
            figures = f"{rows} examples; a classifier's outputs other than its logits '{logits}' are gated on it"
        raise PrecisionRefusal(f"{what} against float32 ({figures}); the budget is {text.limit(budget)}% "
                               f"(export.onnx.budget): over by {over}%")
    return {"relative_error_percent": error, "relative_error_percent_by_output": errors}


def gate_figures(accuracy: Mapping[str, Any]) -> str:
    """The accuracy gate's passing figures for a verdict line, with the digits that show them within the budget:
    the points a classifier lost, and the largest relative error of the outputs gated on it (named when those
    are a classifier's other outputs)."""
    budget, parts = accuracy["budget"], []
    if "lost_points" in accuracy:
        parts.append(f"{text.against(accuracy['lost_points'], budget)} points of accuracy lost")
    if "relative_error_percent" in accuracy:
        errors = accuracy.get("relative_error_percent_by_output", {})
        named = f" in its other outputs ('{max(errors, key=errors.__getitem__)}' largest)" if parts and errors else ""
        parts.append(f"{text.against(accuracy['relative_error_percent'], budget, 3)}% relative error{named}")
    return ", ".join(parts)


@dataclass(frozen=True)
class Timing:
    """Paired rounds of both models: seconds per call of each side in each round (same length, same order)."""

    fp32: tuple[float, ...]
    variant: tuple[float, ...]

    def ratios(self) -> list[float]:
        """variant / float32 per round: each pair ran back to back, so a slow spell slows both sides of it."""
        return [v / f for f, v in zip(self.fp32, self.variant, strict=True)]


def median_ranks(n: int, confidence: float = CONFIDENCE) -> tuple[int, int, float]:
    """1-based ranks (low, high) of the order statistics bounding the median of `n` values with at least
    `confidence`, and the confidence reached: distribution-free, from Binomial(n, 1/2) (the count of values
    below the true median). Widest (1, n) when n is too small to reach it (n < 6 for 95%)."""

    def below(k: int) -> float:  # P(B <= k): k or fewer of the n values below the median
        return float(sum(math.comb(n, j) for j in range(k + 1)) / 2**n)

    low = 1
    while low < (n + 1) // 2 and below(low) <= (1 - confidence) / 2:  # rank low + 1 still misses <= alpha/2 a side
        low += 1
    return low, n + 1 - low, 1 - 2 * below(low - 1)


def median_interval(values: list[float], confidence: float = CONFIDENCE) -> tuple[float, float, float, float]:
    """The median of `values`, its interval (median_ranks) and the confidence that interval has."""
    ordered = sorted(values)
    low, high, reached = median_ranks(len(ordered), confidence)
    return statistics.median(ordered), ordered[low - 1], ordered[high - 1], reached


def paired_timing(fp32: Callable[[], Any], variant: Callable[[], Any], budget_s: float = BUDGET_S,
                  round_s: float = ROUND_S) -> Timing:
    """Rounds of both models back to back until `budget_s` is spent (at least MIN_ROUNDS): each side runs
    calls enough for `round_s`, the order alternates (ABBA: whichever runs second meets what the first left
    behind, e.g. onnxruntime's spinning threads), and a short pause before each side lets those threads sleep."""
    per_call = [_warm(run, round_s) for run in (fp32, variant)]
    calls = max(1, min(MAX_CALLS, math.ceil(round_s / max(min(per_call), 1e-7))))
    times: tuple[list[float], list[float]] = ([], [])
    end = time.perf_counter() + budget_s
    while len(times[0]) < MIN_ROUNDS or (time.perf_counter() < end and len(times[0]) < MAX_ROUNDS):
        order = (0, 1) if len(times[0]) % 2 == 0 else (1, 0)
        for side in order:
            times[side].append(_timed((fp32, variant)[side], calls))
    return Timing(tuple(times[0]), tuple(times[1]))


def _warm(run: Callable[[], Any], seconds: float) -> float:
    """Runs `run` for about `seconds` (first calls allocate and pick kernels); its median seconds per call."""
    taken: list[float] = []
    end = time.perf_counter() + seconds
    while len(taken) < 3 or (time.perf_counter() < end and len(taken) < MAX_CALLS):
        start = time.perf_counter()
        run()
        taken.append(time.perf_counter() - start)
    return statistics.median(taken[2:])


def _timed(run: Callable[[], Any], calls: int) -> float:
    time.sleep(PAUSE_S)
    start = time.perf_counter()
    for _ in range(calls):
        run()
    return (time.perf_counter() - start) / calls


def speed_verdict(name: str, provider: str, batch: int, timing: Timing, force: bool,
                  advice: str | None = FORCE_ADVICE) -> dict[str, Any]:
    """The speed figures, with a warning when forced; PrecisionRefusal when the variant is not faster.

    Decided on the median of the paired ratios (variant / float32 time): faster only when its whole
    confidence interval is below 1. An interval reaching 1 is "not measurably faster", which is not faster.
    `advice` ends the refusal: what the caller's user can do about it. The export's `--force` by default; the
    server (verify.py) has no such flag and passes None (its line already says the float32 model is served)."""
    ratio, low, high, reached = median_interval(timing.ratios())
    fp32_s, variant_s = statistics.median(timing.fp32), statistics.median(timing.variant)
    rounds = len(timing.fp32)
    figures = (f"{name} {variant_s * 1e3:.3f} ms vs float32 {fp32_s * 1e3:.3f} ms per batch of {batch} "
               f"on {provider}; time ratio {name}/float32 {ratio:.2f}, {reached:.0%} interval {low:.2f}-{high:.2f} "
               f"(medians of {rounds} paired rounds)")
    report: dict[str, Any] = {"provider": provider, "batch": batch, "fp32_ms": fp32_s * 1e3,
                              "variant_ms": variant_s * 1e3, "speedup": 1 / ratio,
                              "speedup_interval": [1 / high, 1 / low], "confidence": reached, "rounds": rounds}
    if high < 1:
        return report
    verdict = "not measurably faster" if low < 1 else "not faster"
    if not force:
        raise PrecisionRefusal(f"{name} is {verdict}: {figures}" + (f"; {advice}" if advice else ""))
    return report | {"warning": f"written with --force although {verdict}: {figures}"}
