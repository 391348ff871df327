"""Base model and constrained types shared by every spec section."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

from specgen.diagnostics import safe_repr

# Names reach generated Python and ONNX text, so they are held to a strict
# identifier pattern here, before anything is rendered (see docs/security.md).
# A name part is letters and digits with single underscores between them ("x_train", "conv1"):
# no "__" and no trailing "_", so mangled names ("head/fc" -> "head__fc" in ONNX) never contain
# "___", the separator of the helper tensors specgen adds (render/onnx_plan.py); no collisions.
IDENT = r"^[A-Za-z](_?[A-Za-z0-9]){0,62}$"
# Parts after the first may start with a digit: `repeat` names instances `<name>/1` ... `<name>/N`
# (spec/blocks.py). The first part's letter keeps every mangled name a valid identifier.
LAYER = r"^[A-Za-z](_?[A-Za-z0-9]){0,62}(/[A-Za-z0-9](_?[A-Za-z0-9]){0,62}){0,7}$"

Identifier = Annotated[str, StringConstraints(pattern=IDENT)]
LayerName = Annotated[str, StringConstraints(pattern=LAYER)]
# Glob patterns and file paths never reach code as names; they are bounded and
# free of control characters so that messages and listings stay one line each.
Pattern = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+$")]
FilePath = Annotated[str, StringConstraints(min_length=1, max_length=1024, pattern=r"^[^\x00-\x1f\x7f]+$")]
Doc = Annotated[str, StringConstraints(max_length=4096)]

MAX_INT = 2**31 - 1  # sizes, counts and steps; larger values overflow the ONNX parser's int64 dims


def not_bool(value: object) -> object:
    """Lax pydantic reads `true` as 1 for numbers; `units: true` is a mistake, not a count.

    (Strict mode would also refuse `1e-3`, which YAML 1.1 reads as a string, so specs stay lax.)
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a number, received {str(value).lower()} (a boolean)")
    return value


def _bounded(value: int) -> int:
    if value > MAX_INT:
        raise ValueError(f"received {safe_repr(value)}, expected a value <= {MAX_INT}")  # bounded echo
    return value


def number(tp: type[int] | type[float], **bounds: float) -> Any:
    """`tp` with bounds that refuses booleans; validators come after the bounds so that the
    JSON Schema keeps its plain `minimum` / `exclusiveMaximum` keywords."""
    checks = [BeforeValidator(not_bool)] + ([AfterValidator(_bounded)] if tp is int else [])
    return Annotated[tp, Field(**bounds), *checks]


Int = number(int)
Float = number(float)
PositiveInt = number(int, gt=0)
NonNegativeInt = number(int, ge=0)
PositiveFloat = number(float, gt=0)
NonNegativeFloat = number(float, ge=0)
UnitInterval = number(float, gt=0, lt=1)


class SpecModel(BaseModel):
    """Every spec section: unknown keys are errors, values are immutable."""

    # allow_inf_nan=False: `.inf` / `.nan` would pass validation and then fail rendering.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False, populate_by_name=True,
                              allow_inf_nan=False)
