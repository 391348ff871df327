"""Tell a conversion error from a model that amplifies float32 rounding, when export's parity gate refuses.

A deep network with extreme weights can be chaotic in float32: a rounding-level change anywhere grows
block after block until the outputs share no digits (EfficientNetV2L with random batch-norm statistics:
Keras float32 and Keras float64 give different arg-maxes). Two correct float32 runtimes then disagree
as much as a wrong conversion would. The test: run TensorFlow again with every float input moved by one
float32 step (`np.nextafter`). If TensorFlow against itself already misses the gate's limit, the
disagreement says nothing about the conversion, and the refusal says so instead of asking for a report.
"""

from __future__ import annotations

import numpy as np

__all__ = ["nudged", "refusal"]


def nudged(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """Every float input moved up by one float32 step; None when no input is a float (nothing to nudge)."""
    floats = {k for k, v in inputs.items() if v.dtype.kind == "f"}
    if not floats:
        return None
    return {k: (np.nextafter(v, np.array(np.inf, v.dtype)) if k in floats else v) for k, v in inputs.items()}


def refusal(diff: float, scaled: float, limit: float, moved: float | None) -> str:
    """The gate's message: the disagreement, and what TensorFlow's own sensitivity (`moved`, scaled alike) says."""
    head = (f"onnxruntime and TensorFlow disagree by {diff:.3g} (that is {scaled:.3g} relative to max(1, max "
            f"|TensorFlow output|); limit {limit}); nothing was written. ")
    if moved is None or not np.isfinite(moved) or not np.isfinite(scaled):
        return head + "Please report this with the spec."
    if moved > limit:
        return head + (f"TensorFlow alone moves by {moved:.3g} (same scale) when each input moves by one float32 "
                       "step: with these weights the model amplifies float32 rounding, so no two float32 runtimes "
                       "can agree on its outputs, and this is not a conversion error. Trained weights rarely do "
                       "this; look for batch-norm statistics or weights far from a trained model's")
    return head + (f"TensorFlow alone moves by only {moved:.3g} (same scale) when each input moves by one float32 "
                   "step, so the difference is not float32 rounding: please report this with the spec.")
