"""`unit_forget_bias`: an LSTM bias, `value` everywhere but the forget gate's ones (Keras' unit_forget_bias=True).

No spec key takes it: kinds/ops/recurrent.py makes it from a fixed `bias_init` when `unit_forget_bias: true`.
"""

from __future__ import annotations

from collections.abc import Mapping

from specgen.kinds.initializers.base import InitializerDef, Moments, Shape, runtime


def _moments(args: Mapping[str, float], shape: Shape) -> Moments:
    value = args.get("value", 0.0)  # gates i, f, c, o: three quarters `value`, the forget quarter 1
    return (3 * value + 1) / 4, (3 * value * value + 1) / 4


KINDS = (InitializerDef("unit_forget_bias", None, runtime("unit_forget_bias"), _moments),)
