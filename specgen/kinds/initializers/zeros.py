"""`kind: zeros`: every weight 0 (the default bias)."""

from __future__ import annotations

from typing import Literal

from specgen.fields.base import SpecModel
from specgen.kinds.initializers.base import InitializerDef, runtime


class Zeros(SpecModel):
    kind: Literal["zeros"]


KINDS = (InitializerDef("zeros", Zeros, runtime("zeros"), lambda args, shape: (0.0, 0.0), seeded=False,
                        keras=("Zeros",)),)
