"""A run's `export/export.json`, read as untrusted input before the HTML report shows it.

`specgen export` writes it (runtime/commands/export.py, its precision variant from runtime/precision/step.py
and gates.py); the report reads the keys that export_lines and variants_lines print, and the digests and sizes
report/export_check.py compares with the folder's files, and nothing else. Each
is checked here against the type export writes (pydantic, strict: `"1"` is not a number, `true` not an
integer), so that a hand-edited or hostile file is one line naming the file, the key, what it holds and what
was expected, never a KeyError or a format error half-way through the page. Keys the report does not show are
left unchecked (a later export may add some). The file is read up to MAX_EXPORT_JSON bytes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specgen.diagnostics import Diagnostic, SpecError, describe
from specgen.paths import shown

# export.json lists every variable once (restore.variables): about 80 bytes each, so a 10,000-layer spec's is
# under 2 MB; the report's own keys are a few hundred bytes.
MAX_EXPORT_JSON = 4 * 2**20
EXPECTED_AS = "as `specgen export` writes it"

Number = Annotated[float, Field(allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0)]
Digest = Annotated[str, Field(pattern="^[0-9a-f]{64}$")]  # hashlib's hexdigest(), as export writes every SHA-256
_STRICT = ConfigDict(strict=True, extra="ignore")
M = TypeVar("M", bound=BaseModel)


class Report(BaseModel):
    model_config = _STRICT
    parity_max_abs_diff: Number
    parity_scaled_diff: Number
    compared_examples: Count
    onnxruntime_accuracy: Number | None = None
    tensorflow_accuracy: Number | None = None
    model_sha256: Digest | None = None  # None: written before export recorded it (report/export_check.py)
    precision: dict[str, Any] | None = None


class Fp32(BaseModel):
    model_config = _STRICT
    precision: str


class Speed(BaseModel):
    model_config = _STRICT
    variant_ms: Number
    fp32_ms: Number
    batch: Count
    provider: str
    speedup: Number
    warning: str | None = None


class Variant(BaseModel):
    model_config = _STRICT
    precision: str
    file: str
    bytes: Count
    sha256: Digest | None = None  # None, as fp32_sha256: written before export recorded them
    fp32_bytes: Count
    fp32_sha256: Digest | None = None
    integer_kernels: Count | None = None
    float32_compute: list[str] | None = None
    accuracy: dict[str, Any]
    speed: Speed | None = None  # None: written unverified (runtime/precision/verify.py), no speed measured
    unverified: str | None = None


class ClassifierGate(BaseModel):
    model_config = _STRICT
    lost_points: Number
    accuracy: Number
    fp32_accuracy: Number
    budget: Number
    relative_error_percent_by_output: dict[str, Number] | None = None  # its other outputs; None: none, or older


class ErrorGate(BaseModel):
    model_config = _STRICT
    relative_error_percent: Number
    budget: Number


def read_export(path: Path) -> dict[str, Any]:
    """export.json's object, every key the report prints checked; SpecError (one line) otherwise."""
    with open(path, "rb") as file:
        raw = file.read(MAX_EXPORT_JSON + 1)
    if len(raw) > MAX_EXPORT_JSON:
        raise _refused(path, "", f"more than {MAX_EXPORT_JSON:,} bytes",
                       f"at most {MAX_EXPORT_JSON:,} ({EXPECTED_AS}, a few KB)")
    try:
        report = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise _refused(path, "", f"bytes that are not UTF-8 (at byte {exc.start:,})",
                       f"JSON text {EXPECTED_AS}") from None
    except json.JSONDecodeError as exc:
        raise _refused(path, "", f"text that is not JSON ({exc.msg.removesuffix(' at')} at line {exc.lineno} column "
                       f"{exc.colno})", f"JSON text {EXPECTED_AS}") from None
    except (ValueError, RecursionError) as exc:  # an integer of over 4,300 digits; arrays nested thousands deep
        raise _refused(path, "", f"JSON that Python does not read back ({type(exc).__name__})",
                       f"JSON text {EXPECTED_AS}") from None
    _check(path, report)
    checked: dict[str, Any] = report  # _check refuses a document that is not an object
    return checked


def _check(path: Path, report: Any) -> None:
    checked = _validate(path, Report, report, ())
    if checked.onnxruntime_accuracy is not None and checked.tensorflow_accuracy is None:
        raise _refused(path, "tensorflow_accuracy", "null", "a number, since onnxruntime_accuracy is one")
    precision = checked.precision
    if precision is None:
        return
    if _validate(path, Fp32, precision, ("precision",)).precision == "fp32":
        return
    variant = _validate(path, Variant, precision, ("precision",))
    if variant.speed is None and variant.unverified is None:  # only an unverified variant has no speed figures
        raise _refused(path, "precision.speed", "nothing (the key is missing)" if "speed" not in precision else "null",
                       f"the speed gate's figures (or 'unverified' saying why there are none), {EXPECTED_AS}")
    if "/" in variant.file or "\\" in variant.file or variant.file in ("", ".", "..", "model.onnx", "export.json"):
        # the report reads (hashes) the file it names: never one outside the export folder, nor model.onnx twice
        raise _refused(path, "precision.file", describe(variant.file),
                       "the name of a file in the export folder other than model.onnx, such as model.int8.onnx, "
                       f"{EXPECTED_AS}")
    gate = ClassifierGate if "lost_points" in variant.accuracy else ErrorGate
    _validate(path, gate, variant.accuracy, ("precision", "accuracy"))
    if None not in (checked.model_sha256, variant.fp32_sha256) and checked.model_sha256 != variant.fp32_sha256:
        raise _refused(path, "precision.fp32_sha256", describe(variant.fp32_sha256),
                       f"model_sha256's value ({checked.model_sha256}): both are model.onnx's SHA-256, {EXPECTED_AS}")


def _validate(path: Path, model: type[M], data: Any, prefix: tuple[str, ...]) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = ".".join(prefix)
        for part in error["loc"]:  # a list's item as [0]
            where += f"[{part}]" if isinstance(part, int) else f"{'.' * bool(where)}{part}"
        received = "nothing (the key is missing)" if error["type"] == "missing" else describe(error["input"])
        raise _refused(path, where, received, _expected(error) + f", {EXPECTED_AS}") from None


_EXPECTED = {"float_type": "a number", "finite_number": "a finite number", "int_type": "an integer",
             "string_type": "a string", "dict_type": "an object", "model_type": "an object", "list_type": "a list",
             "greater_than_equal": "an integer, 0 or more", "missing": "the key",
             "string_pattern_mismatch": "a SHA-256 in 64 lowercase hex digits"}  # the only pattern: Digest


def _expected(error: Mapping[str, Any]) -> str:
    return _EXPECTED.get(error["type"], error["msg"])


def _refused(path: Path, key: str, received: str, expected: str) -> SpecError:
    what = f"'{key}'" if key else "the whole file"
    return SpecError([Diagnostic(shown(path), None, f"malformed export.json: {what} is {received}; expected "
                                 f"{expected}")])
