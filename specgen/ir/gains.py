"""Moments of initializers and activations, for the initialization-scale lint (lints.py).

Pure Python (no numpy, no TensorFlow): `specgen validate` runs this. A value's distribution is
summarized by its mean and second moment E[x^2]; activations are applied to a Gaussian with
that mean and variance, as each element-wise op declares (OpDef.pointwise; kinds/ops/moments.py's
math: relu-like ones in closed form, the others by Simpson's rule).
"""

from __future__ import annotations

import math

from specgen.ir.model import Init
from specgen.kinds.initializers import REGISTRY as INITIALIZERS
from specgen.kinds.ops import REGISTRY
from specgen.kinds.ops.base import Moments
from specgen.kinds.ops.moments import cdf


def init_moments(init: Init | None, shape: tuple[int, ...]) -> Moments:
    """The mean and E[w^2] of one weight drawn from `init` for a variable of `shape` (its kind's moments)."""
    if init is None:
        return 0.0, 0.0
    return INITIALIZERS[init.kind].moments(dict(init.args), shape)


def describe_init(init: Init | None) -> str:
    if init is None:
        return "no initializer"
    args = ", ".join(f"{k} {v:g}" for k, v in init.args)
    return f"{init.kind} ({args})" if args else init.kind


# --- activations ------------------------------------------------------------------------------


def activation(name: str, moments: Moments, params: dict[str, float] | None = None) -> Moments | None:
    """The moments of op `name`(x) for a Gaussian x with `moments`, by its OpDef.pointwise; None where the op
    declares none (softmax: no scale is meaningful; an op that is not element-wise)."""
    op = REGISTRY.get(name)
    if op is None or op.pointwise is None:
        return None
    mean, std = mean_std(moments)
    return op.pointwise.moments(mean, std, params or {})


# Past this the scale is lost anyway (float32 overflows at 3.4e38); clamping keeps mean + std * z and
# its square finite in float64, so an overflowed layer propagates large finite moments, never nan.
LARGE = 1e30


def mean_std(moments: Moments) -> tuple[float, float]:
    """The mean and standard deviation of `moments`, each clamped to +-LARGE (nan, inf included)."""
    mean, square = moments
    std = math.sqrt(max(square - mean * mean, 0.0)) if math.isfinite(square - mean * mean) else LARGE
    mean = mean if math.isfinite(mean) else LARGE
    return max(-LARGE, min(mean, LARGE)), min(std, LARGE)


def saturated(name: str, moments: Moments) -> tuple[float, float, str] | None:
    """(threshold, share of units beyond it, what happens there) of a saturating activation on a
    Gaussian with `moments`; None for an activation that does not saturate on both sides."""
    op = REGISTRY.get(name)
    found = op.pointwise.saturates if op is not None and op.pointwise is not None else None
    if found is None:
        return None
    (threshold, words), (mean, std) = found, mean_std(moments)
    if std == 0:
        return threshold, float(abs(mean) > threshold), words
    return threshold, 1.0 - (cdf((threshold - mean) / std) - cdf((-threshold - mean) / std)), words

