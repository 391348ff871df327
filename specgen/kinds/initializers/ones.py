"""`kind: ones`: every weight 1 (a normalization's scale)."""

from __future__ import annotations

from typing import Literal

from specgen.fields.base import SpecModel
from specgen.kinds.initializers.base import InitializerDef, runtime


class Ones(SpecModel):
    kind: Literal["ones"]


KINDS = (InitializerDef("ones", Ones, runtime("ones"), lambda args, shape: (1.0, 1.0), seeded=False,
                        keras=("Ones",)),)
