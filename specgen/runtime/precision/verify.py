"""A precision variant checked where it runs: the gates `specgen export` could not run there, run at load.

CI machines usually have no GPU, and an fp16 variant pays off only on one. `specgen export --precision fp16
--force` where the variant's provider cannot run it (no float16 kernels on the CPU, no CUDA) writes it
*unverified*. With `--triton` the version folder then holds, beside the variant (`model.onnx`):

- `model.fp32.onnx`, the float32 export the variant is gated against and served instead when it fails;
- `sample.npz`, the gate's sample: the first eval examples (`input_0`, `input_1`, ... in the order
  `variant.json` names the inputs, and `labels` for a classifier), at most SAMPLE_EXAMPLES examples and
  SAMPLE_BYTES bytes;
- `variant.json`: precision, whether and where it was verified, why not, the accuracy budget and the
  classifier's logits output.

`config.pbtxt` carries two parameters Triton shows but ignores, `specgen_precision` and `specgen_verified`
("true"/"false"). Every variant written with `--triton` gets these files, a verified one included: the server
checks again when it runs on another provider than the one the export measured (`needs_check`).

`verify_variant` is what the server runs at load: onnxruntime's kernel check, the accuracy gate against the
float32 model on the sample, and the speed gate, on the provider it actually gets (gates.py, as the export).
It never raises for a variant that fails: the result says why in one line and names the file to serve.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import zipfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specgen.errors import SpecgenError
from specgen.paths import shown
from specgen.runtime.graph_runs import predictor_batch, run_rows
from specgen.runtime.precision import REGISTRY
from specgen.runtime.precision.base import PrecisionRefusal
from specgen.runtime.precision.gates import accuracy_gate, interleaved_medians, speed_verdict
from specgen.runtime.predictor import CUDA, InputError, Predictor
from specgen.runtime.sources.base import MISSING, REGULAR, DataError, file_kind, open_regular
from specgen.runtime.sources.npz import npz_bytes

REFERENCE_FILE, SAMPLE_FILE, INFO_FILE = "model.fp32.onnx", "sample.npz", "variant.json"
PARAMETER_PRECISION, PARAMETER_VERIFIED = "specgen_precision", "specgen_verified"
# 512 examples: the export's default int8 calibration count. 32 MiB: 53 ResNet50 images at 224 (602,112 bytes
# each) or all 360 digits; a repository copied to many servers should not carry a data set.
SAMPLE_EXAMPLES, SAMPLE_BYTES = 512, 32 * 2**20
MAX_INFO_BYTES = 64 * 2**10  # variant.json is a few hundred bytes
SPEED_BATCH = 8  # as the export's speed gate (step.py)


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


@dataclass
class VariantCheck:
    """The gates' verdict at load: `serve` is the file to serve (the variant, or the float32 reference), `line`
    the one line to log, `predictor` that file already loaded with the caller's options (reuse it or close it)."""

    passed: bool
    line: str
    serve: Path
    provider: str
    report: dict[str, Any] = field(default_factory=dict)
    predictor: Predictor | None = None


def sample_rows(inputs: dict[str, np.ndarray], labels: np.ndarray | None) -> int:
    """How many leading examples the recorded sample holds: at most SAMPLE_EXAMPLES and SAMPLE_BYTES."""
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
    arrays = {f"input_{k}": np.ascontiguousarray(a[:rows]) for k, a in enumerate(inputs.values())}
    if labels is not None:
        arrays["labels"] = np.ascontiguousarray(labels[:rows])
    return npz_bytes(arrays)


def info_bytes(info: VariantInfo) -> bytes:
    return (json.dumps({"precision": info.precision, "verified": info.verified, "verified_on": info.verified_on,
                        "reason": info.reason, "budget": info.budget, "logits": info.logits,
                        "inputs": list(info.inputs), "model_sha256": info.model_sha256, "reference": REFERENCE_FILE,
                        "sample": SAMPLE_FILE},
                       indent=2, sort_keys=True) + "\n").encode()


def config_parameters(info: VariantInfo) -> dict[str, str]:
    """The config.pbtxt parameters that mark a variant (Triton shows them and ignores them)."""
    return {PARAMETER_PRECISION: info.precision, PARAMETER_VERIFIED: "true" if info.verified else "false"}


def version_files(info: VariantInfo, reference: bytes, inputs: dict[str, np.ndarray],
                  labels: np.ndarray | None) -> dict[str, bytes]:
    """The files written beside the variant in its Triton version folder."""
    return {REFERENCE_FILE: reference, SAMPLE_FILE: sample_bytes(inputs, labels), INFO_FILE: info_bytes(info)}


def needs_check(info: VariantInfo, provider: str) -> bool:
    """Whether the server must gate the variant: unverified, or verified on another provider than `provider`."""
    return not info.verified or info.verified_on != provider


def _refused(path: Path, what: str) -> VariantFileError:
    return VariantFileError(f"{shown(path)}: {what}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _regular(path: Path, expected: str) -> None:
    """VariantFileError unless `path` is a regular file (checked without opening it: a FIFO would block the open)."""
    what = file_kind(path)
    if what == MISSING:
        raise _refused(path, f"is missing; expected {expected}, as `specgen export --triton` writes it")
    if what != REGULAR:
        raise _refused(path, f"is {what}, not a regular file; expected {expected}, as `specgen export --triton` "
                       "writes it")


def _read_bytes(path: Path, limit: int, expected: str) -> bytes:
    """At most `limit` + 1 bytes of a regular file (never blocking on a FIFO), or VariantFileError naming it."""
    _regular(path, expected)
    try:
        with open_regular(path) as handle:
            return handle.read(limit + 1)
    except (OSError, DataError) as exc:
        raise _refused(path, f"cannot be read ({exc}); expected {expected}") from None


def _field(path: Path, raw: dict[str, Any], key: str, kinds: tuple[type, ...], expected: str) -> Any:
    value = raw.get(key)
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if not ok or (isinstance(value, float) and not math.isfinite(value)):
        received = "nothing (the key is missing)" if key not in raw else f"{value!r} ({type(value).__name__})"
        raise _refused(path, f"'{key}' is {received}; expected {expected}, as `specgen export` writes it")
    return value


def read_info(folder: Path) -> VariantInfo | None:
    """variant.json of a version folder; None where there is none (a float32 export, or one made before)."""
    path = Path(folder) / INFO_FILE
    if file_kind(path) == MISSING:
        return None
    raw_bytes = _read_bytes(path, MAX_INFO_BYTES, "the variant's description, a JSON object")
    if len(raw_bytes) > MAX_INFO_BYTES:
        raise _refused(path, f"more than {MAX_INFO_BYTES:,} bytes; expected a few hundred, as `specgen export` writes it")
    try:
        raw = json.loads(raw_bytes.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _refused(path, f"not JSON ({type(exc).__name__}); expected the object `specgen export` writes") from None
    if not isinstance(raw, dict):
        raise _refused(path, f"a JSON {type(raw).__name__}; expected an object, as `specgen export` writes it")
    precision = _field(path, raw, "precision", (str,), f"one of {', '.join(REGISTRY)}")
    if precision not in REGISTRY:
        raise _refused(path, f"'precision' is {precision!r}; expected one of {', '.join(REGISTRY)}")
    inputs = _field(path, raw, "inputs", (list,), "a list of input names")
    if not inputs or not all(isinstance(n, str) for n in inputs):
        raise _refused(path, f"'inputs' is {inputs!r}; expected a non-empty list of input names")
    budget = _field(path, raw, "budget", (int, float), "a finite number")
    try:
        budget = float(budget)
    except OverflowError:  # an integer past float's range (1e308): json reads it as an int
        raise _refused(path, f"'budget' is an integer of {len(str(budget))} digits; expected a finite number, as "
                       "`specgen export` writes it") from None
    digest = _field(path, raw, "model_sha256", (str,), "the variant's SHA-256, 64 hex digits")
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise _refused(path, f"'model_sha256' is {digest[:80]!r}; expected 64 lowercase hex digits")
    return VariantInfo(precision=precision, verified=_field(path, raw, "verified", (bool,), "true or false"),
                       verified_on=_field(path, raw, "verified_on", (str, type(None)), "a provider name or null"),
                       reason=_field(path, raw, "reason", (str, type(None)), "a string or null"),
                       budget=budget, logits=_field(path, raw, "logits", (str, type(None)), "an output name or null"),
                       inputs=tuple(inputs), model_sha256=digest)


def file_sha256(path: Path) -> str:
    """The SHA-256 of a regular file (DataError for anything else: a FIFO is refused, not waited on)."""
    digest = hashlib.sha256()
    with open_regular(path) as handle:
        for block in iter(lambda: handle.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_sample(path: Path, info: VariantInfo) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """sample.npz as the model's inputs (by name) and labels: a regular file, read once (never blocking on a
    FIFO), its sizes checked from the zip directory before any array is inflated, at most SAMPLE_EXAMPLES rows."""
    from specgen.runtime.sources.npz import ZIP_MAGICS, npz_array

    expected = [f"input_{k}" for k in range(len(info.inputs))]
    data = _read_bytes(path, SAMPLE_BYTES + 2**16, "the gate's sample (an .npz archive)")
    if len(data) > SAMPLE_BYTES + 2**16:  # stored uncompressed: never larger than its arrays and headers
        raise _refused(path, f"is more than {SAMPLE_BYTES + 2**16:,} bytes; expected at most {SAMPLE_BYTES:,}")
    if data[:4] not in ZIP_MAGICS:
        raise _refused(path, "not a readable sample (it does not start with a zip header); expected the .npz "
                       "`specgen export` writes")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            declared = sum(i.file_size for i in archive.infolist())
        if declared > SAMPLE_BYTES + 2**16:  # the .npy headers: 128 bytes or so each
            raise _refused(path, f"holds {declared:,} bytes uncompressed; expected at most {SAMPLE_BYTES:,}")
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            missing = [n for n in expected if n not in npz.files]
            if missing:
                raise _refused(path, f"has arrays {sorted(npz.files)}; expected {expected} (and 'labels')")
            arrays = {name: npz_array(npz, key) for name, key in zip(info.inputs, expected, strict=True)}
            labels = npz_array(npz, "labels") if "labels" in npz.files else None
    except VariantFileError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, DataError) as exc:
        raise _refused(path, f"not a readable sample ({_first_line(exc)})") from None
    rows = {len(a) if a.ndim else None for a in arrays.values()} | ({len(labels)} if labels is not None else set())
    if len(rows) != 1 or None in rows or 0 in rows:
        raise _refused(path, "arrays of different or zero lengths; expected one row per example in each")
    count = rows.pop()
    if count is not None and count > SAMPLE_EXAMPLES:
        raise _refused(path, f"holds {count:,} examples; expected at most {SAMPLE_EXAMPLES}, as `specgen export` "
                       "writes it")
    return arrays, labels


def verify_variant(variant_path: Path, reference_path: Path, sample: Path, provider: str = "auto",
                   info: VariantInfo | None = None, variant: Predictor | None = None, **options: Any) -> VariantCheck:
    """The variant's gates on `provider` (what the server runs with): kernels, accuracy on the sample, speed.

    `options` go to both Predictors (`cuda_graphs`, `max_batch_size`, `threads`...), so the speed gate times
    them as they will be served; `variant`, when given, is the variant already loaded so (closed here unless it
    is returned). A variant that fails (or cannot load or run) is refused: `serve` is then `reference_path`,
    and `line` says why, in one line.

    The files the gates read (variant.json, sample.npz, model.fp32.onnx) are checked first, against the
    float32 reference: a damaged one raises VariantFileError naming the file (and the key), and the version
    cannot be served (there is nothing sound to fall back to). Only the variant's own failures fall back.
    """
    variant_path, reference_path = Path(variant_path), Path(reference_path)
    with ExitStack() as on_refusal:  # closes what was loaded when a file is refused; emptied once all are sound
        if variant is not None:
            on_refusal.callback(variant.close)
        info = info or read_info(variant_path.parent)
        if info is None:
            raise _refused(variant_path.parent / INFO_FILE, "is missing; expected the file `specgen export --triton` "
                           "writes beside a precision variant")
        inputs, labels = read_sample(Path(sample), info)
        reference, expected = _reference(reference_path, provider, options)
        on_refusal.callback(reference.close)
        fp32 = _checked_sidecars(info, reference, Path(sample), expected, inputs, labels)
        on_refusal.pop_all()
    report: dict[str, Any] = {"examples": len(next(iter(inputs.values())))}
    try:
        variant = variant or Predictor(variant_path, provider, **options)
        report["kernels"] = REGISTRY[info.precision].check(variant_path.read_bytes(),
                                                            "cuda" if variant.provider == CUDA else "cpu")
        report["accuracy"] = accuracy_gate(info.precision, info.budget, fp32, run_rows(variant, inputs), labels,
                                           info.logits if labels is not None else None)
        batch = {k: v[:predictor_batch(reference) or SPEED_BATCH] for k, v in inputs.items()}  # as the export times
        times = interleaved_medians(lambda: reference(batch), lambda: variant(batch))
        report["speed"] = speed_verdict(info.precision, variant.provider, len(next(iter(batch.values()))), *times,
                                        force=False)
    except Exception as exc:  # a gate's PrecisionRefusal, or onnxruntime failing on the variant: refused, not fatal
        if variant is not None:
            variant.close()
        why = str(exc) if isinstance(exc, PrecisionRefusal) else f"onnxruntime fails on it: {exc}"
        return _refuse(info, variant_path, reference_path, reference, why, report)
    reference.close()
    speed, accuracy = report["speed"], report["accuracy"]
    figure = (f"{accuracy['lost_points']:.2f} points of accuracy lost" if "lost_points" in accuracy
              else f"{accuracy['relative_error_percent']:.3f}% relative error")
    line = (f"{shown(variant_path)}: {info.precision} variant verified on {variant.provider}: {figure} on "
            f"{report['examples']} examples (budget {info.budget:g}), {speed['speedup']:.2f}x float32's speed")
    return VariantCheck(True, line, variant_path, variant.provider, report, variant)


def _reference(path: Path, provider: str, options: dict[str, Any]) -> tuple[Predictor, str]:
    """The float32 reference loaded, and how messages describe what it takes; VariantFileError when it cannot
    load (InputError, about the provider, passes through)."""
    expected = "the float32 export the variant is gated against"
    _regular(path, expected)
    try:
        return Predictor(path, provider, **options), expected
    except InputError:
        raise
    except Exception as exc:  # onnxruntime's own exception types for a model it cannot load
        raise _refused(path, f"onnxruntime cannot load it ({_first_line(exc)}); expected {expected}") from None


def _checked_sidecars(info: VariantInfo, reference: Predictor, sample: Path, expected: str,
                      inputs: dict[str, np.ndarray], labels: np.ndarray | None) -> dict[str, np.ndarray]:
    """variant.json's names and sample.npz's arrays checked against the float32 reference, which then runs on the
    sample: its outputs (the accuracy gate's baseline), or VariantFileError naming the file and the key."""
    info_path, ref = sample.parent / INFO_FILE, REFERENCE_FILE
    if sorted(info.inputs) != sorted(reference.inputs) or len(set(info.inputs)) != len(info.inputs):
        raise _refused(info_path, f"'inputs' is {list(info.inputs)!r}; expected {ref}'s inputs, "
                       f"{sorted(reference.inputs)!r}")
    if info.logits is not None and info.logits not in reference.outputs:
        raise _refused(info_path, f"'logits' is {info.logits!r}; expected one of {ref}'s outputs, "
                       f"{reference.outputs!r}")
    for k, name in enumerate(info.inputs):
        shape, dtype = reference.inputs[name]
        array = inputs[name]
        fixed = [d if isinstance(d, int) else -1 for d in shape]
        fixed[:1] = [-1] if fixed else []  # any number of rows: a fixed batch runs the sample in chunks of it
        fits = array.ndim == len(shape) and all(d < 0 or d == a for d, a in zip(fixed, array.shape, strict=True))
        if not fits or array.dtype != np.dtype(dtype):
            raise _refused(sample, f"'input_{k}' is {array.dtype} {list(array.shape)}; expected {ref}'s input "
                           f"'{name}', {np.dtype(dtype).name} {fixed} (-1: any size)")
    try:
        outputs = run_rows(reference, inputs)
    except Exception as exc:  # the values (onnxruntime's INVALID_ARGUMENT), or a length the model refuses
        raise _refused(sample, f"the float32 reference fails on it ({_first_line(exc)}); expected examples "
                       f"{ref} runs on") from None
    if labels is not None and info.logits is not None:
        classes = outputs[info.logits].shape[-1] if outputs[info.logits].ndim else 0
        if labels.ndim != 1 or labels.dtype.kind not in "iu":
            raise _refused(sample, f"'labels' is {labels.dtype} {list(labels.shape)}; expected one integer class "
                           "per example")
        bad = np.flatnonzero((labels < 0) | (labels >= classes))
        if bad.size:
            raise _refused(sample, f"'labels' holds {labels[bad[0]]} at row {bad[0]}; expected classes of "
                           f"'{info.logits}', integers in [0, {classes})")
    return outputs


def _refuse(info: VariantInfo, variant_path: Path, reference_path: Path, reference: Predictor, why: str,
            report: dict[str, Any]) -> VariantCheck:
    first = why.strip().splitlines()[0] if why.strip() else "no reason given"
    line = (f"{shown(variant_path)}: {info.precision} variant refused on {reference.provider}: {first}; "
            f"serving {shown(reference_path)} (float32) instead")
    return VariantCheck(False, line, reference_path, reference.provider, report | {"refused": first}, reference)


def check_version(folder: Path, model_filename: str = "model.onnx", provider: str = "auto",
                  **options: Any) -> VariantCheck | None:
    """The server's one call per version folder: None for a float32 model; else the verdict.

    A float32 model: no variant.json, or one whose `model_sha256` is not the model's (an earlier export's
    marker in a version folder rewritten since).

    The variant is loaded first, with `options`, to learn the provider that really runs it (onnxruntime falls
    back to the CPU silently). Verified on that provider by the export: passed at once, no gate run. Else
    `verify_variant`. Either way the result holds the served file loaded (`predictor`), ready to serve.
    """
    folder = Path(folder)
    info = read_info(folder)
    if info is None:
        return None
    model = folder / model_filename
    try:
        digest = file_sha256(model)
    except (OSError, DataError) as exc:
        raise _refused(model, f"cannot be read ({exc})") from None
    if digest != info.model_sha256:
        return None
    try:
        variant: Predictor | None = Predictor(model, provider, **options)
    except Exception:  # onnxruntime's own types; verify_variant refuses it with the reason (loading it once more)
        variant = None
    if variant is not None and not needs_check(info, variant.provider):
        line = f"{shown(model)}: {info.precision} variant, verified on {variant.provider} by the export"
        return VariantCheck(True, line, model, variant.provider, {}, variant)
    return verify_variant(model, folder / REFERENCE_FILE, folder / SAMPLE_FILE, provider, info, variant, **options)
