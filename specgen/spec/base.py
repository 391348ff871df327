"""Base model and constrained types shared by every spec section."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

# Names reach generated Python and ONNX text, so they are held to a strict
# identifier pattern here, before anything is rendered (see docs/security.md).
IDENT = r"^[A-Za-z][A-Za-z0-9_]{0,63}$"
LAYER = r"^[A-Za-z][A-Za-z0-9_]{0,63}(/[A-Za-z][A-Za-z0-9_]{0,63}){0,7}$"

Identifier = Annotated[str, StringConstraints(pattern=IDENT)]
LayerName = Annotated[str, StringConstraints(pattern=LAYER)]
# Glob patterns and file paths never reach code as names; they are bounded and
# free of control characters so that messages and listings stay one line each.
Pattern = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+$")]
FilePath = Annotated[str, StringConstraints(min_length=1, max_length=1024, pattern=r"^[^\x00-\x1f\x7f]+$")]
Doc = Annotated[str, StringConstraints(max_length=4096)]

PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
NonNegativeFloat = Annotated[float, Field(ge=0)]
UnitInterval = Annotated[float, Field(gt=0, lt=1)]


class SpecModel(BaseModel):
    """Every spec section: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False, populate_by_name=True)
