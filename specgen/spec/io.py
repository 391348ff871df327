"""The `inputs`, `data`, `checkpoint` and `export` sections."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Literal, TypeAlias

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from specgen.fields.base import (
    MAX_INT,
    FilePath,
    Flag,
    Identifier,
    NonNegativeFloat,
    Pattern,
    PositiveInt,
    SpecModel,
    not_whole_float,
)
from specgen.fields.unions import by_key, by_shape
from specgen.kinds.dims import RESERVED, SYMBOL, SYMBOL_HINT
from specgen.kinds.precisions import FLOAT32, PrecisionName
from specgen.kinds.sources import DataSource
from specgen.spec.literals import int_literal
from specgen.spec.regex import check_pattern, parse_template

# uint8: raw pixels; the model casts them to float32 at its entry (TF and ONNX), so layers see float32.
DType = Literal["float32", "int32", "int64", "uint8"]


def _symbol(value: str) -> str:
    # Checked here rather than by a pydantic pattern, whose message speaks of layer names.
    if not SYMBOL.fullmatch(value):
        raise ValueError(f"received {value!r}, expected a positive integer or {SYMBOL_HINT}")
    if value in RESERVED:  # a name specgen gives a meaning of its own (kinds/dims.py)
        raise ValueError(f"{value!r} is a reserved name: {RESERVED[value]}; give this dimension another name "
                         "(seq, length)")
    return value


# A named dynamic dimension (kinds/dims.py): its size is known at run time only.
Symbol = Annotated[str, AfterValidator(_symbol),
                   Field(max_length=64, json_schema_extra={"pattern": f"^{SYMBOL.pattern}$"},
                         description="A named dynamic dimension, e.g. seq or height.")]
if TYPE_CHECKING:  # by_shape picks a branch at run time; statically, the union of its branches
    Dim: TypeAlias = int | str
else:
    Dim = by_shape(lambda v: "symbol" if isinstance(v, str) else "size",
                   "a positive integer or a lowercase name", size=PositiveInt, symbol=Symbol)


class InputSpec(SpecModel):
    shape: Annotated[list[Dim],
                     Field(description="Without the batch dimension, which is dynamic. A lowercase name "
                                       "(seq, height) declares a named dynamic dimension.")]
    dtype: DType = "float32"

    @model_validator(mode="after")
    def _size(self) -> InputSpec:
        # Keeps every inferred size well inside int64, which ONNX text dims are parsed into.
        fixed = math.prod(d for d in self.shape if isinstance(d, int))
        if fixed > MAX_INT:
            raise ValueError(f"an example of shape {self.shape} has {fixed} values; the limit is {MAX_INT}")
        return self


# Each stage is one source; the kinds are the data-source registry's (specgen/kinds/sources). No docstring:
# pydantic would put it into the schema.
class Data(SpecModel):
    train: DataSource | None = None
    eval: DataSource | None = None


class RenameKey(SpecModel):
    from_: Pattern = Field(alias="from")
    to: Pattern


class RenamePattern(SpecModel):
    pattern: Annotated[Pattern, AfterValidator(check_pattern)]  # RE2 syntax (spec/regex.py)
    to: Pattern

    @field_validator("to")
    @classmethod
    def _template(cls, to: str, info: ValidationInfo) -> str:
        if "pattern" in info.data:  # else the pattern itself was refused
            parse_template(info.data["pattern"], to)  # group references exist, escapes mean what Python reads
        return to


class RenamePrefix(SpecModel):
    strip_prefix: Pattern | None = None
    add_prefix: Pattern | None = None




def _rename_kind(value: object) -> str | None:
    if isinstance(value, dict) and ("strip_prefix" in value or "add_prefix" in value):
        return None if ("from" in value or "pattern" in value) else "prefix"
    if isinstance(value, RenamePrefix):
        return "prefix"
    key = by_key("from", "pattern")(value)
    # Tags that are not keys of the mapping: an error location (..., tag, 'to') then finds 'to'.
    return {"from": "rename", "pattern": "regex"}.get(key) if key else None


if TYPE_CHECKING:  # by_shape picks a branch at run time; statically, the union of its branches
    Rename: TypeAlias = RenameKey | RenamePattern | RenamePrefix
else:
    Rename = by_shape(_rename_kind, "a mapping with 'from', 'pattern', or 'strip_prefix'/'add_prefix'",
                      rename=RenameKey, regex=RenamePattern, prefix=RenamePrefix)


class RestoreSource(SpecModel):
    from_: FilePath = Field(alias="from", description="Checkpoint path, relative to the spec file.")
    map: list[Rename] = Field(default_factory=list)
    exclude: list[Pattern] = Field(default_factory=list)
    ema_to_model: Flag = Field(False, description="Restore EMA shadows into the model weights.")
    strict: Flag = Field(False, description=(
        "Every model variable must be restored from this entry, except those `exclude` names: a variable it has "
        "no key for stops the run instead of keeping its initializer (`specgen import keras` writes true)."))


class Checkpoint(SpecModel):
    dir: FilePath
    every_steps: PositiveInt = 1000
    keep: PositiveInt = 3
    restore: list[RestoreSource] = Field(default_factory=list)


SUPPORTED_OPSETS = (18, 19, 20, 21, 22, 23)


class OnnxExport(SpecModel):
    opset: Literal[18, 19, 20, 21, 22, 23] = Field(21, description=(
        "ONNX opset of model.onnx; 23 exports multi_head_attention as one Attention node (IR version 11)."))
    weights: Literal["raw", "ema"] = "raw"
    dynamic_batch: Flag = True
    outputs: Annotated[list[Identifier], Field(min_length=1)] | None = Field(None, description=(
        "The outputs model.onnx computes (default: all); layers, inputs and weights none of them reads are left out."))
    precision: PrecisionName = Field(FLOAT32, description=(
        "Also write model.fp16.onnx or model.int8.onnx beside model.onnx, gated on accuracy and speed "
        "(`specgen export --precision` overrides)."))
    calibration: Literal["minmax", "entropy", "percentile"] = Field("minmax", description=(
        "How int8 activation ranges are calibrated on the eval set."))
    calibration_examples: PositiveInt | None = Field(None, description=(
        "Eval examples int8 calibration reads (default: 512, or the whole eval set when smaller; "
        "`--calibration N` overrides)."))
    budget: NonNegativeFloat = Field(1.0, description=(
        "Largest loss a precision variant may cause on the eval set: points of accuracy for a classifier, "
        "percent relative error of the outputs otherwise."))

    # Literal[18, ..., 23] alone accepts `opset: 21.0` (21.0 == 21).
    _opset_not_float = field_validator("opset", mode="before")(not_whole_float)
    # ...and fits an integer in 64 bits before comparing: `opset: 10**400` would be its parser's words (literals.py).
    _opset_bounded = field_validator("opset", mode="before")(int_literal(*SUPPORTED_OPSETS))


class Export(SpecModel):
    onnx: OnnxExport = Field(default_factory=OnnxExport)
