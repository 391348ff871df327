"""Base model and constrained types shared by every spec section."""

from __future__ import annotations

import math
import re
import struct
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, WithJsonSchema
from pydantic_core import PydanticCustomError

from specgen.diagnostics import safe_repr

# Names reach generated Python and ONNX text, so they are held to a strict
# identifier pattern here, before anything is rendered (docs/security.md section 1 quotes these lines;
# tests/test_names_r8.py checks that it does).
# A name part is letters and digits with single underscores between them ("x_train", "conv1"):
# no "__" and no trailing "_", so mangled names ("head/fc" -> "head__fc" in ONNX) never contain
# "___", the separator of the helper tensors specgen adds (render/onnx_plan.py); no collisions.
IDENT = r"^[A-Za-z](_?[A-Za-z0-9])*$"
# Parts after the first may start with a digit: `repeat` names instances `<name>/1` ... `<name>/N`
# (spec/blocks.py). The first part's letter keeps every mangled name a valid identifier.
MAX_NAME_PARTS = 8  # parts of a layer name; it also bounds how deep blocks nest (spec/expand.py)
LAYER = rf"^[A-Za-z](_?[A-Za-z0-9])*(/[A-Za-z0-9](_?[A-Za-z0-9])*){{0,{MAX_NAME_PARTS - 1}}}$"
# Characters in one name part (an identifier, or a layer name between '/'), '_' included. Nothing that
# reads names needs fewer: Python identifiers, TensorFlow variable names and ONNX tensor names have no
# limit; the tightest reader is the file system (255 bytes per file name: the spec name names the
# folder <out>/<name>/ and a Triton model folder). 128 keeps every name the old pattern took valid (it
# counted 63 letters and digits, so up to 125 characters with '_' between them). The length is checked
# apart from the patterns (name_length_problem): pydantic's regex engine has no look-ahead, and no
# pattern without one can bound characters while '_' stays optional between them.
MAX_NAME_CHARS = 128
ECHO_CHARS = 40  # of an over-long name in its message: enough to tell which name, one line


def name_length_problem(name: str) -> str | None:
    """'received N characters, expected at most M' for a name (layer names: a part) over MAX_NAME_CHARS, or None.

    Only names that match IDENT or LAYER come here: letters, digits, '_' and '/', so the cut echo needs no escaping."""
    longest = max(name.split("/"), key=len)
    if len(longest) <= MAX_NAME_CHARS:
        return None
    part = "" if longest == name else f" in its part '{longest[:ECHO_CHARS]}…'"
    each = "" if longest == name else " per part"
    return f"received {len(longest)} characters{part}, expected at most {MAX_NAME_CHARS}{each}"


def _short_name(name: str) -> str:
    if problem := name_length_problem(name):
        raise ValueError(f"invalid name '{name[:ECHO_CHARS]}…': {problem}; shorten it")
    return name


def is_identifier(text: str) -> bool:
    """Whether `text` is a valid identifier (IDENT and MAX_NAME_CHARS), for code that checks outside pydantic."""
    return len(text) <= MAX_NAME_CHARS and re.fullmatch(IDENT, text) is not None  # length first: text may be long


def is_layer_name(text: str) -> bool:
    """Whether `text` is a valid layer name (LAYER and MAX_NAME_CHARS per part), for code that checks outside pydantic."""
    # Length first, as above: MAX_NAME_PARTS parts of MAX_NAME_CHARS and the '/' between them bound every valid name.
    if len(text) > MAX_NAME_PARTS * (MAX_NAME_CHARS + 1):
        return False
    return re.fullmatch(LAYER, text) is not None and name_length_problem(text) is None


# The pattern comes first: a malformed name is refused for its form, whatever its length.
Identifier = Annotated[str, StringConstraints(pattern=IDENT), AfterValidator(_short_name),
                       WithJsonSchema({"type": "string", "pattern": IDENT, "maxLength": MAX_NAME_CHARS})]
LayerName = Annotated[str, StringConstraints(pattern=LAYER), AfterValidator(_short_name)]


def _path_given(value: object) -> object:
    """An empty path is refused as what it should be, a path (spec/messages.py reads `expected`), not only as a
    string too short."""
    if value == "":
        raise PydanticCustomError("string_too_short", "String should have at least 1 character",
                                  {"min_length": 1, "expected": "a path"})
    return value


# Glob patterns and file paths never reach code as names; they are bounded and
# free of control characters so that messages and listings stay one line each.
Pattern = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+$")]
FilePath = Annotated[str, StringConstraints(min_length=1, max_length=1024, pattern=r"^[^\x00-\x1f\x7f]+$"),
                     BeforeValidator(_path_given)]
Doc = Annotated[str, StringConstraints(max_length=4096)]

MAX_INT = 2**31 - 1  # sizes, counts and steps; larger values overflow the ONNX parser's int64 dims
# Every float of a spec ends up in float32 (ONNX constants and attributes, TensorFlow variables), and the
# ONNX parser refuses a literal beyond float32's range: numpy.finfo(numpy.float32).max, written out
# because spec/ imports no numpy.
FLOAT32_MAX = 3.4028234663852886e38
# The bound a spec's floats are held to: the largest float64 that rounds to a finite float32. Rounding to nearest
# takes every magnitude below 2**128 - 2**103 (halfway from FLOAT32_MAX to 2**128) to at most FLOAT32_MAX, so
# `3.4028235e+38`, as numpy prints FLOAT32_MAX and as messages name the range, is float32's largest value exactly.
FLOAT32_BOUND = math.nextafter(2.0**128 - 2.0**103, 0.0)


def not_bool(value: object) -> object:
    """Lax pydantic reads `true` as 1 for numbers; `units: true` is a mistake, not a count.

    (Strict mode would also refuse `1e-3`, which YAML 1.1 reads as a string, so specs stay lax.)
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a number, received {str(value).lower()} (a boolean)")
    return value


# PyYAML's (YAML 1.1) implicit resolvers: which plain scalars it reads as numbers. Only fields/ asks, and only for
# text that reached a number field.
_YAML11 = yaml.resolver.Resolver()
_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


def only_bool(value: object) -> object:
    """A switch's check: lax pydantic reads `use_bias: 'off'`, `'0'`, `'f'`, `'yes'`, `0` and `1` as booleans, where
    a number key refuses `'16'` (not_text): a quoted word is text, and a count is no switch. YAML's own booleans
    (`true`, `false`, and YAML 1.1's unquoted yes/no/on/off, which the loader has already read as booleans) pass."""
    if isinstance(value, bool):
        return value
    what = "text" if isinstance(value, str) else "a number" if isinstance(value, int | float) else type(value).__name__
    raise ValueError(f"expected true or false, received {safe_repr(value)} ({what}: write true or false, unquoted)")


# Every boolean key of a spec is a Flag (tests/test_spec_flags.py finds any plain `bool` field left).
Flag = Annotated[bool, BeforeValidator(only_bool)]


def not_text(value: object) -> object:
    """A number field's first check: no boolean (not_bool), and no text that is a number only once unquoted.

    Lax pydantic would read `sparsity: '0.5'` as 0.5, but a quoted scalar is text in YAML 1.1 and 1.2 alike, and
    the JSON Schema (so yaml-language-server) says number: text that PyYAML would read as a number if written plain
    can only be text because it was quoted (or tagged `!!str`, or a block scalar). Text PyYAML keeps as text when
    plain (`1e-3`, YAML 1.2's number, docs/spec.md "Numbers") still goes on to lax pydantic, quoted or not: the
    loader hands over values, not how they were written.
    """
    not_bool(value)
    if isinstance(value, str) and _YAML11.resolve(yaml.ScalarNode, value, (True, False)) in _NUMBER_TAGS:  # type: ignore[no-untyped-call]
        advice = f"write {value}" if len(value) <= 40 else "remove the quotes"  # every echo is bounded
        raise ValueError(f"expected a number, received {safe_repr(value)} (a quoted string: {advice})")
    return value


def not_whole_float(value: object) -> object:
    """Lax pydantic reads `units: 64.0` (and `opset: 21.0`) as 64 (21), but the JSON Schema says integer (so
    yaml-language-server flags it), and a float where a count goes is more often a slip (a learning rate pasted into
    `steps`) than a count. A float with a fraction is pydantic's own int_from_float error."""
    if isinstance(value, float) and value.is_integer():
        advice = f": write {int(value)}" if abs(value) <= MAX_INT else ""
        raise ValueError(f"expected an integer, received {value!r} (a float{advice})")
    return value


def not_float(value: object) -> object:
    """An integer field's first check: not_text, then not_whole_float."""
    return not_whole_float(not_text(value))


def _bounded(value: int) -> int:
    if value > MAX_INT:
        raise ValueError(f"received {safe_repr(value)}, expected a value <= {MAX_INT}")  # bounded echo
    return value


def bounds(tp: type[int] | type[float], **limits: float) -> tuple[Any, ...]:
    """The metadata that makes `Annotated[tp, *bounds(tp, ...)]` a bounded `tp` that refuses booleans; validators
    come after the bounds so that the JSON Schema keeps its plain `minimum` / `exclusiveMaximum` keywords.

    A float is also held to float32's finite range (the schema says so too), and must keep its
    bounds once rounded to float32: `epsilon: 1e-50` (> 0) is 0 in float32, `momentum: 0.999999999`
    (< 1) is 1, and those are the values training and inference would run with.
    Written inside `Annotated[...]` (not returned as one) so that type checkers see the field as a plain `tp`.
    """
    constraints: dict[str, Any] = dict(limits)  # Field's overloads take each bound by name, typed per keyword
    if tp is int:
        return Field(**constraints), BeforeValidator(not_float), AfterValidator(_bounded)
    if "gt" not in limits and "ge" not in limits:
        limits["ge"] = constraints["ge"] = -FLOAT32_BOUND
    if "lt" not in limits and "le" not in limits:
        limits["le"] = constraints["le"] = FLOAT32_BOUND
    return Field(**constraints), BeforeValidator(not_text), AfterValidator(_in_float32(limits))


def number(tp: type[int] | type[float], **limits: float) -> Any:
    """`Annotated[tp, *bounds(tp, **limits)]` as a value, for code that builds a field type at run time."""
    return Annotated[tp, *bounds(tp, **limits)]


def as_float32(value: float) -> float:
    """`value` rounded to the nearest float32 (struct: the standard library's IEEE single packing)."""
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def _in_float32(bounds: dict[str, float]) -> Any:
    tests = {"gt": (float.__gt__, ">"), "ge": (float.__ge__, ">="), "lt": (float.__lt__, "<"),
             "le": (float.__le__, "<=")}

    def check(value: float) -> float:
        rounded = as_float32(value)  # the bounds keep |value| <= FLOAT32_BOUND, so this never overflows
        for key, bound in bounds.items():
            holds, sign = tests[key]
            if not holds(rounded, float(bound)):
                raise ValueError(f"received {safe_repr(value)}, which is {rounded!r} in float32 (the precision "
                                 f"specgen runs in), expected a value {sign} {bound:g}")
        return value
    return check


Int = Annotated[int, *bounds(int)]
Float = Annotated[float, *bounds(float)]
PositiveInt = Annotated[int, *bounds(int, gt=0)]
NonNegativeInt = Annotated[int, *bounds(int, ge=0)]
PositiveFloat = Annotated[float, *bounds(float, gt=0)]
NonNegativeFloat = Annotated[float, *bounds(float, ge=0)]
UnitInterval = Annotated[float, *bounds(float, gt=0, lt=1)]


class SpecModel(BaseModel):
    """Every spec section: unknown keys are errors, values are immutable."""

    # allow_inf_nan=False: `.inf` / `.nan` would pass validation and then fail rendering.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False, populate_by_name=True,
                              allow_inf_nan=False)
