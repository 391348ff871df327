"""The files beside a precision variant in its Triton version folder: what they hold, written and read.

Split from verify.py (the gates at load), which re-exports these names. `model.fp32.onnx` is the float32
reference, `sample.npz` the gate's sample, `variant.json` the description (verify.py's docstring). Every reader
here takes nothing in a file on trust: a regular file (never a FIFO waited on), sizes bounded before anything
is inflated, each key's type checked, and any failure one line naming the file (VariantFileError).

The sample is drawn over the whole eval set (`base.spread_rows`), not its first rows: an `images` eval set lists
its files class by class, so the first 512 rows of a large one hold a class or two.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import math
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import TypeAdapter, ValidationError

from specgen.errors import SpecgenError
from specgen.fields.base import NonNegativeFloat
from specgen.paths import shown
from specgen.runtime.precision import REGISTRY
from specgen.runtime.precision.base import PrecisionRefusal, spread_rows
from specgen.runtime.sources.base import MISSING, REGULAR, DataError, file_kind, open_regular
from specgen.runtime.sources.npz import npz_bytes

REFERENCE_FILE, SAMPLE_FILE, INFO_FILE = "model.fp32.onnx", "sample.npz", "variant.json"
# 512 examples: the export's default int8 calibration count. 32 MiB: 53 ResNet50 images at 224 (602,112 bytes
# each) or all 360 digits; a repository copied to many servers should not carry a data set.
SAMPLE_EXAMPLES, SAMPLE_BYTES = 512, 32 * 2**20
MAX_INFO_BYTES = 64 * 2**10  # variant.json is a few hundred bytes
_BUDGET: TypeAdapter[float] = TypeAdapter(NonNegativeFloat)  # the spec's export.onnx.budget type (spec/io.py)
log = logging.getLogger("specgen.serve")  # the server's logger, as verify.py's: read_sample runs at its load


class VariantFileError(SpecgenError, ValueError):
    """A variant's recorded files that cannot be read: one line naming the file, what it holds and what was expected."""


@dataclass(frozen=True)
class VariantInfo:
    """variant.json: what the export knew about the variant in the same folder."""

    precision: str
    verified: bool
    verified_on: str | None  # the onnxruntime provider the export's gates ran on, when they did
    reason: str | None  # why it is unverified
    budget: float
    logits: str | None  # a classifier's logits output: the gate counts points of accuracy on it
    inputs: tuple[str, ...]
    model_sha256: str  # the variant this describes: a variant.json left beside another model is ignored
    # int8 only (None otherwise, and for a variant.json written before): whether the CPU the export made and gated
    # the variant on had VNNI, and whether its weights are 7-bit for a CPU without (int8.py's has_vnni)
    vnni: bool | None = None
    reduce_range: bool | None = None
    # float inputs the same in every eval example that the export was told (--force) are constant in use too (a
    # mask, a flag): the server skips the constant-input rule for these, and only it (degenerate.py)
    constant_inputs: tuple[str, ...] = ()


def sample_rows(inputs: dict[str, np.ndarray], labels: np.ndarray | None) -> int:
    """How many examples the recorded sample holds: at most SAMPLE_EXAMPLES and SAMPLE_BYTES."""
    rows = len(next(iter(inputs.values())))
    each = sum(a[:1].nbytes for a in inputs.values()) + (labels[:1].nbytes if labels is not None else 0)
    return min(rows, SAMPLE_EXAMPLES, SAMPLE_BYTES // max(each, 1))


def sample_bytes(inputs: dict[str, np.ndarray], labels: np.ndarray | None) -> bytes:
    """sample.npz's bytes (uncompressed: its size on disk is its size in memory); PrecisionRefusal when not even
    one example fits in SAMPLE_BYTES."""
    rows = sample_rows(inputs, labels)
    if rows < 1:
        each = sum(a[:1].nbytes for a in inputs.values())
        raise PrecisionRefusal(f"one example is {each:,} bytes; the sample recorded for the gates at load holds at "
                               f"most {SAMPLE_BYTES:,}")
    chosen = spread_rows(len(next(iter(inputs.values()))), rows)  # over the whole eval set, as calibration
    arrays = {f"input_{k}": np.ascontiguousarray(a[chosen]) for k, a in enumerate(inputs.values())}
    if labels is not None:
        arrays["labels"] = np.ascontiguousarray(labels[chosen])
    return npz_bytes(arrays)


def info_bytes(info: VariantInfo) -> bytes:
    cpu: dict[str, Any] = {key: value for key, value in (("vnni", info.vnni), ("reduce_range", info.reduce_range))
                           if value is not None}  # int8's: an fp16 variant.json stays as before
    if info.constant_inputs:  # only where --force passed the rule: other variant.json files stay as before
        cpu["constant_inputs"] = list(info.constant_inputs)
    return (json.dumps({"precision": info.precision, "verified": info.verified, "verified_on": info.verified_on,
                        "reason": info.reason, "budget": info.budget, "logits": info.logits,
                        "inputs": list(info.inputs), "model_sha256": info.model_sha256, "reference": REFERENCE_FILE,
                        "sample": SAMPLE_FILE, **cpu},
                       indent=2, sort_keys=True) + "\n").encode()


def version_files(info: VariantInfo, reference: bytes, inputs: dict[str, np.ndarray],
                  labels: np.ndarray | None) -> dict[str, bytes]:
    """The files written beside the variant in its Triton version folder. `labels` only for a classifier (the
    accuracy gate reads them with `logits`; nothing else does): the server ignores them where `logits` is null."""
    kept = labels if info.logits is not None else None
    return {REFERENCE_FILE: reference, SAMPLE_FILE: sample_bytes(inputs, kept), INFO_FILE: info_bytes(info)}


def refused(path: Path, what: str) -> VariantFileError:
    return VariantFileError(f"{shown(path)}: {what}")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def require_regular(path: Path, expected: str) -> None:
    """VariantFileError unless `path` is a regular file (checked without opening it: a FIFO would block the open)."""
    what = file_kind(path)
    if what == MISSING:
        raise refused(path, f"is missing; expected {expected}, as `specgen export --triton` writes it")
    if what != REGULAR:
        raise refused(path, f"is {what}, not a regular file; expected {expected}, as `specgen export --triton` "
                       "writes it")


def _read_bytes(path: Path, limit: int, expected: str) -> bytes:
    """At most `limit` + 1 bytes of a regular file (never blocking on a FIFO), or VariantFileError naming it."""
    require_regular(path, expected)
    try:
        with open_regular(path) as handle:
            return handle.read(limit + 1)
    except (OSError, DataError) as exc:
        raise refused(path, f"cannot be read ({exc}); expected {expected}") from None


def _field(path: Path, raw: dict[str, Any], key: str, kinds: tuple[type, ...], expected: str) -> Any:
    value = raw.get(key)
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if not ok or (isinstance(value, float) and not math.isfinite(value)):
        received = "nothing (the key is missing)" if key not in raw else f"{value!r} ({type(value).__name__})"
        raise refused(path, f"'{key}' is {received}; expected {expected}, as `specgen export` writes it")
    return value


def _spec_budget(path: Path, budget: float) -> float:
    """`budget` checked by the spec's own field type (export.onnx.budget: NonNegativeFloat), so variant.json cannot
    hold a value the spec refuses; VariantFileError naming the key and the rule otherwise."""
    try:
        return float(_BUDGET.validate_python(budget))
    except ValidationError as exc:
        rule = str(exc.errors()[0]["msg"]).removeprefix("Input should be ")
        raise refused(path, f"'budget' is {budget:g}; expected a finite number {rule} (the rule of the spec's "
                       "export.onnx.budget), as `specgen export` writes it") from None


def read_info(folder: Path) -> VariantInfo | None:
    """variant.json of a version folder; None where there is none (a float32 export, or one made before)."""
    path = Path(folder) / INFO_FILE
    if file_kind(path) == MISSING:
        return None
    raw_bytes = _read_bytes(path, MAX_INFO_BYTES, "the variant's description, a JSON object")
    if len(raw_bytes) > MAX_INFO_BYTES:
        raise refused(path, f"more than {MAX_INFO_BYTES:,} bytes; expected a few hundred, as `specgen export` writes it")
    try:
        raw = json.loads(raw_bytes.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise refused(path, f"not JSON ({type(exc).__name__}); expected the object `specgen export` writes") from None
    if not isinstance(raw, dict):
        raise refused(path, f"a JSON {type(raw).__name__}; expected an object, as `specgen export` writes it")
    precision = _field(path, raw, "precision", (str,), f"one of {', '.join(REGISTRY)}")
    if precision not in REGISTRY:
        raise refused(path, f"'precision' is {precision!r}; expected one of {', '.join(REGISTRY)}")
    inputs = _field(path, raw, "inputs", (list,), "a list of input names")
    if not inputs or not all(isinstance(n, str) for n in inputs):
        raise refused(path, f"'inputs' is {inputs!r}; expected a non-empty list of input names")
    budget = _field(path, raw, "budget", (int, float), "a finite number")
    try:
        budget = float(budget)
    except OverflowError:  # an integer past float's range (1e308): json reads it as an int
        raise refused(path, f"'budget' is an integer of {len(str(budget))} digits; expected a finite number, as "
                       "`specgen export` writes it") from None
    budget = _spec_budget(path, budget)
    digest = _field(path, raw, "model_sha256", (str,), "the variant's SHA-256, 64 hex digits")
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise refused(path, f"'model_sha256' is {digest[:80]!r}; expected 64 lowercase hex digits")
    constant = _field(path, raw, "constant_inputs", (list, type(None)), "a list of input names or nothing") or []
    if not all(isinstance(n, str) and n in inputs for n in constant):
        raise refused(path, f"'constant_inputs' is {constant!r}; expected names of 'inputs', {inputs!r}, as "
                       "`specgen export --force` writes it")
    return VariantInfo(precision=precision, verified=_field(path, raw, "verified", (bool,), "true or false"),
                       verified_on=_field(path, raw, "verified_on", (str, type(None)), "a provider name or null"),
                       reason=_field(path, raw, "reason", (str, type(None)), "a string or null"),
                       budget=budget, logits=_field(path, raw, "logits", (str, type(None)), "an output name or null"),
                       inputs=tuple(inputs), model_sha256=digest,
                       # absent from a variant.json written before they were recorded: unknown (None)
                       vnni=_field(path, raw, "vnni", (bool, type(None)), "true, false or null"),
                       reduce_range=_field(path, raw, "reduce_range", (bool, type(None)), "true, false or null"),
                       constant_inputs=tuple(constant))


def file_sha256(path: Path) -> str:
    """The SHA-256 of a regular file (DataError for anything else: a FIFO is refused, not waited on)."""
    digest = hashlib.sha256()
    with open_regular(path) as handle:
        for block in iter(lambda: handle.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def _ignored_labels(path: Path, info: VariantInfo, files: list[str]) -> bool:
    """Whether the sample's `labels` are to be ignored: `logits` is null, so no gate reads them. An export before
    labels were recorded for a classifier only wrote every model's targets (a regression's too); that variant was
    gated on relative error at export, and is gated so at load (a debug line says why the array is not read)."""
    if info.logits is not None or "labels" not in files:
        return False
    log.debug("labels ignored", extra={"fields": {
        "event": "sample_labels_ignored", "file": shown(path), "line": f"{shown(path)}: holds 'labels' and "
        f"{INFO_FILE}'s 'logits' is null (a sample written by an older specgen, whose labels are the targets of a "
        "model that is not a classifier): gated on relative error, as at export"}})
    return True


def read_sample(path: Path, info: VariantInfo) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """sample.npz as the model's inputs (by name) and labels: a regular file, read once (never blocking on a
    FIFO), its sizes checked from the zip directory before any array is inflated, at most SAMPLE_EXAMPLES rows."""
    from specgen.runtime.sources.npz import ZIP_MAGICS, npz_array

    expected = [f"input_{k}" for k in range(len(info.inputs))]
    data = _read_bytes(path, SAMPLE_BYTES + 2**16, "the gate's sample (an .npz archive)")
    if len(data) > SAMPLE_BYTES + 2**16:  # stored uncompressed: never larger than its arrays and headers
        raise refused(path, f"is more than {SAMPLE_BYTES + 2**16:,} bytes; expected at most {SAMPLE_BYTES:,}")
    if data[:4] not in ZIP_MAGICS:
        raise refused(path, "not a readable sample (it does not start with a zip header); expected the .npz "
                       "`specgen export` writes")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            declared = sum(i.file_size for i in archive.infolist())
        if declared > SAMPLE_BYTES + 2**16:  # the .npy headers: 128 bytes or so each
            raise refused(path, f"holds {declared:,} bytes uncompressed; expected at most {SAMPLE_BYTES:,}")
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            missing = [n for n in expected if n not in npz.files]
            if missing:
                raise refused(path, f"has arrays {sorted(npz.files)}; expected {expected} (and 'labels')")
            arrays = {name: npz_array(npz, key) for name, key in zip(info.inputs, expected, strict=True)}
            read = "labels" in npz.files and not _ignored_labels(path, info, npz.files)
            labels = npz_array(npz, "labels") if read else None
    except VariantFileError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, DataError) as exc:
        raise refused(path, f"not a readable sample ({first_line(exc)})") from None
    rows = {len(a) if a.ndim else None for a in arrays.values()} | ({len(labels)} if labels is not None else set())
    if len(rows) != 1 or None in rows or 0 in rows:
        raise refused(path, "arrays of different or zero lengths; expected one row per example in each")
    count = rows.pop()
    if count is not None and count > SAMPLE_EXAMPLES:
        raise refused(path, f"holds {count:,} examples; expected at most {SAMPLE_EXAMPLES}, as `specgen export` "
                       "writes it")
    return arrays, labels
