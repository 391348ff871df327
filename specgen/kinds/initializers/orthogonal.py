"""`kind: orthogonal`: Keras' Orthogonal, the recurrent layers' `recurrent_init`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

from specgen.fields.base import Float, SpecModel
from specgen.kinds.initializers.base import InitializerDef, Moments, Shape, runtime


class Orthogonal(SpecModel):
    """Keras' Orthogonal: a random orthogonal matrix (QR of a normal draw) times `gain`."""

    kind: Literal["orthogonal"]
    gain: Float = 1.0


def _moments(args: Mapping[str, float], shape: Shape) -> Moments:
    # Orthonormal columns (or rows) of the longer side: E[w^2] = gain^2 / max side.
    rows, cols = math.prod(shape[:-1]) if len(shape) > 1 else 1, shape[-1] if shape else 1
    return 0.0, args.get("gain", 1.0) ** 2 / max(rows, cols, 1)


KINDS = (InitializerDef("orthogonal", Orthogonal, runtime("orthogonal"), _moments, keras=("Orthogonal",)),)
