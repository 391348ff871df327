"""The two gates a precision variant passes before it is written: accuracy against float32, then speed.

Accuracy: on the eval set, a classifier's top-1 accuracy may drop by at most `budget` points; any
other model's outputs may differ from float32's by at most `budget` percent (relative L2 norm, the
largest over outputs). Speed: the variant and float32 are timed on the provider that will run them,
alternating rounds so both see the same machine load (this one is shared), and the variant ships
only when its median is lower; `force` ships it anyway and records a warning.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from specgen.runtime.parity import accuracy, first_non_finite, within
from specgen.runtime.precision.base import PrecisionRefusal

Arrays = dict[str, np.ndarray]


def accuracy_gate(name: str, budget: float, fp32: Arrays, variant: Arrays, labels: np.ndarray | None,
                  logits: str | None) -> dict[str, Any]:
    """What the variant loses on the eval set, or PrecisionRefusal saying by how much it is over `budget`."""
    problem = first_non_finite(variant)
    if problem is not None:
        raise PrecisionRefusal(f"{name} output {problem} on the eval set (float32's is finite)")
    rows = len(next(iter(variant.values())))
    if labels is not None and logits is not None:
        before, after = accuracy(fp32[logits], labels), accuracy(variant[logits], labels)
        lost, unit = round((before - after) * 100, 6), "points of accuracy"  # round: 0.975-0.9611 is not exact
        figures = f"float32 {before:.4f}, {name} {after:.4f} on {rows} examples"
        report = {"fp32_accuracy": before, "accuracy": after, "lost_points": lost}
    else:
        lost = max(100 * float(np.linalg.norm(variant[k] - fp32[k]) / max(float(np.linalg.norm(fp32[k])), 1e-30))
                   for k in fp32)
        unit, figures = "percent relative error", f"largest over outputs, {rows} examples"
        report = {"relative_error_percent": lost}
    if not within(lost, budget):
        raise PrecisionRefusal(f"{name} loses {lost:.2f} {unit} against float32 ({figures}); the budget is "
                               f"{budget:g} (export.onnx.budget): over by {lost - budget:.2f}")
    return report | {"budget": budget}


def interleaved_medians(fp32: Callable[[], Any], variant: Callable[[], Any], rounds: int = 15) -> tuple[float, float]:
    """Median seconds per call of each, from alternating rounds (each round a few calls of both)."""
    for run in (fp32, variant):  # first calls allocate and pick kernels: not part of the figure
        run()
        run()
    start = time.perf_counter()
    fp32()
    calls = max(1, min(50, int(0.005 / max(time.perf_counter() - start, 1e-6))))  # rounds of about 5 ms
    times: dict[int, list[float]] = {0: [], 1: []}
    for _ in range(rounds):
        for side, run in enumerate((fp32, variant)):
            start = time.perf_counter()
            for _ in range(calls):
                run()
            times[side].append((time.perf_counter() - start) / calls)
    return statistics.median(times[0]), statistics.median(times[1])


def speed_verdict(name: str, provider: str, batch: int, fp32_s: float, variant_s: float,
                  force: bool) -> dict[str, Any]:
    """The speed figures, with a warning when forced; PrecisionRefusal when the variant is not faster."""
    figures = (f"{name} {variant_s * 1e3:.3f} ms vs float32 {fp32_s * 1e3:.3f} ms per batch of {batch} "
               f"on {provider} (medians, interleaved)")
    report: dict[str, Any] = {"provider": provider, "batch": batch, "fp32_ms": fp32_s * 1e3,
                              "variant_ms": variant_s * 1e3, "speedup": fp32_s / variant_s}
    if variant_s < fp32_s:
        return report
    if not force:
        raise PrecisionRefusal(f"{name} is not faster: {figures}; pass --force to write it anyway")
    return report | {"warning": f"written with --force although not faster: {figures}"}
