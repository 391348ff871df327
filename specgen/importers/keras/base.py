"""What every Keras-layer converter shares: the converter type, `Part` (one Keras layer as several spec
layers) and the bias / activation / initializer keys most layers with weights have.

The converters are grouped by family (core.py, convolution.py, recurrent.py, layers1d.py, attention.py,
bidirectional.py); layers.py holds the one table from Keras class to converter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specgen.importers.keras.args import Args
from specgen.kinds.ops import REGISTRY

Shapes = list[tuple[Any, ...]]  # input shapes with the batch dimension first (None)
# Keras class -> the spec op it imports as (OpDef.keras): a converter shared by a family reads its op here.
KERAS_OPS: dict[str, str] = {cls: name for name, op in REGISTRY.items() for cls in op.keras}


@dataclass
class Part:
    """One of several spec layers that together compute one Keras layer (in order; the last is named as the
    Keras layer, the others `<layer>_<suffix>`). `reads` are the Keras layer's input indexes, or the suffix
    of an earlier part."""

    keys: dict[str, Any]
    reads: list[int | str]
    suffix: str = ""


Converter = Callable[[Args, Shapes], dict[str, Any] | list[Part] | None]


def _bias_act(a: Args, out: dict[str, Any], bias_key: str | None = "bias_initializer") -> dict[str, Any]:
    if (act := a.activation()) is not None:
        out["activation"] = act
    if not a.flag("use_bias", True):
        out["use_bias"] = False
    if bias_key and (init := a.initializer(bias_key)) not in (None, "zeros"):
        out["bias_init"] = init
    return out


def _init(a: Args, out: dict[str, Any], key: str, spec_key: str) -> None:
    if (init := a.initializer(key)) not in (None, "glorot_uniform"):
        out[spec_key] = init
