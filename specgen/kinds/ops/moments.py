"""The moments of an element-wise op's output for a Gaussian input: the math each op's `Pointwise` names; and the
moments of sums, products and extremes that ir/scales.py and the ops' Derived rules (OpDef.moments) combine.

Pure Python (no numpy, no TensorFlow): `specgen validate` runs the initialization-scale lint (ir/lints.py,
ir/gains.py), which asks each op for these. relu-like ops in closed form, the others by Simpson's rule.
This module defines no op (kinds/ops/__init__.py's NOT_OPS).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from specgen.kinds.ops.base import Moments

Function = Callable[[float, float], float]  # (x, the op's parameter) -> f(x)
MomentsOf = Callable[[float, float, Mapping[str, Any]], Moments]  # (mean, std, node params) -> moments

STEPS = 320  # Simpson intervals over +-8 standard deviations: errors below 1e-4 even at relu6's kinks
SELU_ALPHA, SELU_SCALE = 1.6732632423543772, 1.0507009873554805
# Where tanh's slope falls below a tenth of its peak: 1 - tanh(x)^2 < 0.1 (the saturation lint's threshold).
TANH_EDGE = math.atanh(math.sqrt(0.9))  # 1.818


def phi(z: float) -> float:
    return math.exp(-z * z / 2) / math.sqrt(2 * math.pi)


def cdf(z: float) -> float:
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


def softplus(x: float) -> float:
    return x + math.log1p(math.exp(-x)) if x > 0 else math.log1p(math.exp(x))


def relu_max(x: float, top: float) -> float:
    """relu with max_value `top` (relu6: 6)."""
    return min(max(x, 0.0), top)


def rectified(mean: float, std: float) -> Moments:
    """E[relu(x)] and E[relu(x)^2] for x ~ N(mean, std^2), in closed form."""
    if std <= 0:
        m = max(mean, 0.0)
        return m, m * m
    a = mean / std
    return mean * cdf(a) + std * phi(a), (mean * mean + std * std) * cdf(a) + mean * std * phi(a)


def _rounded(value: float) -> float:
    """Four significant digits, so that layers at nearly the same scale share one quadrature."""
    return float(f"{value:.4g}")


@lru_cache(maxsize=4096)
def _quadrature(f: Function, param: float, mean: float, std: float) -> Moments:
    h = 16.0 / STEPS
    first = second = 0.0
    for i in range(STEPS + 1):
        z = -8.0 + i * h
        weight = (1 if i in (0, STEPS) else 4 if i % 2 else 2) * phi(z)
        y = f(mean + std * z, param)
        first, second = first + weight * y, second + weight * y * y
    return first * h / 3, second * h / 3


def integrated(f: Function, param: float, mean: float, std: float) -> Moments:
    """The moments of f(x, param) for x ~ N(mean, std^2), by Simpson's rule (mean and std to 4 digits)."""
    return _quadrature(f, param, _rounded(mean), _rounded(std))


def simpson(f: Function) -> MomentsOf:
    """The moments rule of an op computing f(x, alpha): its param `alpha` (1.0 when it has none) by Simpson's rule."""
    return lambda mean, std, params: integrated(f, float(params.get("alpha", 1.0)), mean, std)


# --- sums, and the rules of ops that combine values (ir/scales.py and the Derived rules use these) -------------------


def weighted(moments: Moments, n: float, weight: Moments) -> Moments:
    """Moments of a sum of `n` products w * x with independent w, x (the x's share one mean, the w's another)."""
    (mx, qx), (mw, qw) = moments, weight
    return n * mw * mx, n * qw * qx + n * (n - 1) * (mw * mx) * (mw * mx)


def plus(a: Moments, b: Moments, sign: float = 1.0) -> Moments:
    """Moments of a + sign * b for independent a and b."""
    return a[0] + sign * b[0], a[1] + b[1] + 2 * sign * a[0] * b[0]


def times(a: Moments, b: Moments) -> Moments:
    """Moments of a * b for independent a and b."""
    return a[0] * b[0], a[1] * b[1]


def variance(moments: Moments) -> float:
    return max(moments[1] - moments[0] * moments[0], 0.0)


@lru_cache(maxsize=1024)
def extreme(n: int) -> Moments:
    """E[M] and E[M^2] of the largest of `n` independent standard normals (density n phi(z) Phi(z)^(n-1)), by
    Simpson's rule over [-8, 8] (the density's mode stays under 5.5 up to n = 10^7)."""
    if n <= 1:
        return 0.0, 1.0
    h = 16.0 / STEPS
    first = second = 0.0
    for i in range(STEPS + 1):
        z = -8.0 + i * h
        weight = (1 if i in (0, STEPS) else 4 if i % 2 else 2) * n * phi(z) * cdf(z) ** (n - 1)
        first, second = first + weight * z, second + weight * z * z
    return first * h / 3, second * h / 3


def largest(moments: Moments, n: int, sign: float = 1.0) -> Moments:
    """Moments of the largest (sign 1) or smallest (sign -1) of `n` independent Gaussians with `moments`."""
    mean, std = moments[0], math.sqrt(variance(moments))
    e1, e2 = extreme(n)
    return mean + sign * std * e1, mean * mean + 2 * sign * mean * std * e1 + std * std * e2
