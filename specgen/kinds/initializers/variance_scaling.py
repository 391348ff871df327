"""The fan-based kinds `glorot_uniform`, `glorot_normal`, `he_normal`, `he_uniform`: Keras' VarianceScaling family."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal

from specgen.fields.base import SpecModel
from specgen.kinds.initializers.base import InitializerDef, Moments, Shape, fans, runtime


class VarianceScaling(SpecModel):
    """Keras' fan-based initializers, computed from the variable's shape."""

    kind: Literal["glorot_uniform", "glorot_normal", "he_normal", "he_uniform"]


def _avg(shape: Shape) -> float:
    fan_in, fan_out = fans(shape)
    return 2.0 / max(fan_in + fan_out, 1)


def _in(shape: Shape) -> float:
    return 2.0 / max(fans(shape)[0], 1)


def _moments(variance: Callable[[Shape], float]) -> Callable[[Mapping[str, float], Shape], Moments]:
    # The normal variants divide their stddev by the truncation factor, so both the uniform and the
    # normal variant have exactly this variance.
    return lambda args, shape: (0.0, variance(shape))


KINDS = (
    InitializerDef("glorot_uniform", VarianceScaling, runtime("glorot_uniform"), _moments(_avg),
                   keras=("GlorotUniform",), scaling=(1.0, "fan_avg", "uniform")),
    InitializerDef("glorot_normal", VarianceScaling, runtime("glorot_normal"), _moments(_avg),
                   keras=("GlorotNormal",), scaling=(1.0, "fan_avg", "truncated_normal")),
    InitializerDef("he_normal", VarianceScaling, runtime("he_normal"), _moments(_in),
                   keras=("HeNormal",), scaling=(2.0, "fan_in", "truncated_normal")),
    InitializerDef("he_uniform", VarianceScaling, runtime("he_uniform"), _moments(_in),
                   keras=("HeUniform",), scaling=(2.0, "fan_in", "uniform")),
)
