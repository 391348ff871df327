"""`kind: constant`: every weight `value`; Keras' Constant."""

from __future__ import annotations

from typing import Literal

from specgen.fields.base import Float, SpecModel
from specgen.kinds.initializers.base import InitializerDef, runtime


class Constant(SpecModel):
    kind: Literal["constant"]
    value: Float


KINDS = (InitializerDef("constant", Constant, runtime("constant"),
                        lambda args, shape: (args["value"], args["value"] * args["value"]), seeded=False,
                        keras=("Constant",)),)
