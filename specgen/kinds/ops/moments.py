"""The moments of an element-wise op's output for a Gaussian input: the math each op's `Pointwise` names.

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
