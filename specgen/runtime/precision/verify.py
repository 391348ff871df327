"""A precision variant checked where it runs: the gates `specgen export` could not run there, run at load.

CI machines usually have no GPU, and an fp16 variant pays off only on one. `specgen export --precision fp16
--force` where the variant's provider cannot run it (no float16 kernels on the CPU, no CUDA) writes it
*unverified*. With `--triton` the version folder then holds, beside the variant (`model.onnx`):

- `model.fp32.onnx`, the float32 export the variant is gated against and served instead when it fails;
- `sample.npz`, the gate's sample: eval examples drawn over the whole eval set (`base.spread_rows`; in the
  eval set's order), `input_0`, `input_1`, ... in the order `variant.json` names the inputs, and `labels` for a
  classifier, at most SAMPLE_EXAMPLES examples and SAMPLE_BYTES bytes;
- `variant.json`: precision, whether and where it was verified, why not, the accuracy budget, the
  classifier's logits output, and the inputs `--force` was told are constant in use (`constant_inputs`,
  degenerate.py).

`config.pbtxt` carries two parameters Triton shows but ignores, `specgen_precision` and `specgen_verified`
("true"/"false"). Every variant written with `--triton` gets these files, a verified one included: the server
checks again when it runs on another provider than the one the export measured, and an int8 variant on a CPU
whose VNNI differs from the export's (`needs_check`).

`verify_variant` is what the server runs at load: onnxruntime's kernel check, the accuracy gate against the
float32 model on the sample, and the speed gate, on the provider it actually gets (gates.py, as the export).
It never raises for a variant that fails: the result says why in one line and names the file to serve.
"""

from __future__ import annotations

import logging
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specgen import text
from specgen.paths import shown
from specgen.runtime.graph_runs import predictor_batch, run_rows
from specgen.runtime.precision import REGISTRY, degenerate, int8
from specgen.runtime.precision.base import PrecisionRefusal
from specgen.runtime.precision.gates import accuracy_gate, gate_figures, paired_timing, speed_verdict
from specgen.runtime.precision.sidecars import (
    INFO_FILE,
    MAX_INFO_BYTES,
    REFERENCE_FILE,
    SAMPLE_BYTES,
    SAMPLE_EXAMPLES,
    SAMPLE_FILE,
    VariantFileError,
    VariantInfo,
    file_sha256,
    first_line,
    info_bytes,
    read_info,
    read_sample,
    refused,
    require_regular,
    sample_bytes,
    sample_rows,
    version_files,
)
from specgen.runtime.predictor import CPU, CUDA, InputError, Predictor
from specgen.runtime.sources.base import DataError

PARAMETER_PRECISION, PARAMETER_VERIFIED = "specgen_precision", "specgen_verified"
SPEED_BATCH = 8  # as the export's speed gate (step.py)
log = logging.getLogger("specgen.serve")  # the server's logger: check_version is what it calls at load

# the sidecar files' names, formats and readers live in sidecars.py; imported from here as before
__all__ = ["INFO_FILE", "MAX_INFO_BYTES", "PARAMETER_PRECISION", "PARAMETER_VERIFIED", "REFERENCE_FILE", "SAMPLE_BYTES",
           "SAMPLE_EXAMPLES", "SAMPLE_FILE", "SPEED_BATCH", "VariantCheck", "VariantFileError", "VariantInfo",
           "check_version", "config_parameters", "file_sha256", "info_bytes", "needs_check", "read_info", "read_sample",
           "sample_bytes", "sample_rows", "verify_variant", "version_files"]


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


def config_parameters(info: VariantInfo) -> dict[str, str]:
    """The config.pbtxt parameters that mark a variant (Triton shows them and ignores them)."""
    return {PARAMETER_PRECISION: info.precision, PARAMETER_VERIFIED: "true" if info.verified else "false"}


def needs_check(info: VariantInfo, provider: str) -> bool:
    """Whether the server must gate the variant: unverified, verified on another provider than `provider`, or an
    int8 variant on a CPU of another kind than the export's.

    int8's integer kernels differ with VNNI: without it (AVX2 only) they add pairs of uint8 x int8 products in
    int16, which can saturate where the export's VNNI CPU summed in int32 (a static variant's 8-bit weights made
    there lost 1.39 points on an AVX2 CPU, docs/export.md), and the reverse CPU computes other numbers too. So the
    export records its CPU's VNNI (`vnni`) and a CPU that differs gates the variant again. A variant.json from
    before that record: gated again where this CPU lacks VNNI (the saturating case), not where it has it."""
    if not info.verified or info.verified_on != provider:
        return True
    if info.precision != "int8" or provider != CPU:
        return False
    here = int8.has_vnni()  # looked up on the module: tests play the other CPU kind by replacing it
    return info.vnni != here if info.vnni is not None else not here


def verify_variant(variant_path: Path, reference_path: Path, sample: Path, provider: str = "auto",
                   info: VariantInfo | None = None, variant: Predictor | None = None, **options: Any) -> VariantCheck:
    """The variant's gates on `provider` (what the server runs with): kernels, accuracy on the sample, speed.

    `options` go to both Predictors (`cuda_graphs`, `max_batch_size`, `threads`...), so the speed gate times
    them as they will be served; `variant`, when given, is the variant already loaded so (closed here unless it
    is returned). A variant that fails (or cannot load or run) is refused: `serve` is then `reference_path`,
    and `line` says why, in one line.

    The files the gates read (variant.json, sample.npz, model.fp32.onnx) are checked first, against the
    float32 reference: a damaged one raises VariantFileError naming the file (and the key), and the version
    cannot be served (there is nothing sound to fall back to). The variant's own failures, and a
    sample that cannot test it (`_testable`), fall back.
    """
    variant_path, reference_path = Path(variant_path), Path(reference_path)
    with ExitStack() as on_refusal:  # closes what was loaded when a file is refused; emptied once all are sound
        if variant is not None:
            on_refusal.callback(variant.close)
        info = info or read_info(variant_path.parent)
        if info is None:
            raise refused(variant_path.parent / INFO_FILE, "is missing; expected the file `specgen export --triton` "
                           "writes beside a precision variant")
        inputs, labels = read_sample(Path(sample), info)
        reference, expected = _reference(reference_path, provider, options)
        on_refusal.callback(reference.close)
        fp32 = _checked_sidecars(info, reference, Path(sample), expected, inputs, labels)
        on_refusal.pop_all()
    report: dict[str, Any] = {"examples": len(next(iter(inputs.values())))}
    stage = "onnxruntime cannot load the variant"  # what the catch-all names: only the variant's steps are in it
    try:
        variant = variant or Predictor(variant_path, provider, **options)
        data = variant_path.read_bytes()
        _testable(info, data, inputs, labels)  # as the export's rule, so it refused or wrote it unverified
        stage = "the kernel check fails on the variant"
        report["kernels"] = REGISTRY[info.precision].check(data, "cuda" if variant.provider == CUDA else "cpu")
        stage = "onnxruntime fails running the variant on the sample"
        outputs = run_rows(variant, inputs)
        stage = "the accuracy gate fails on the variant's outputs"
        # read_sample holds labels exactly when variant.json names the logits: the gate never switches metric
        report["accuracy"] = accuracy_gate(info.precision, info.budget, fp32, outputs, labels, info.logits)
        stage = "onnxruntime fails timing the variant"
        batch = {k: v[:predictor_batch(reference) or SPEED_BATCH] for k, v in inputs.items()}  # as the export times
        timing = paired_timing(lambda: reference(batch), lambda: variant(batch))
        report["speed"] = speed_verdict(info.precision, variant.provider, len(next(iter(batch.values()))), timing,
                                        force=False, advice=None)  # serve has no --force: _refuse says what it does
    except Exception as exc:  # a gate's PrecisionRefusal, or onnxruntime failing on the variant: refused, not fatal
        if variant is not None:
            variant.close()
        why = str(exc) if isinstance(exc, PrecisionRefusal) else f"{stage}: {first_line(exc)}"
        return _refuse(info, variant_path, reference_path, reference, why, report)
    reference.close()
    speed, accuracy = report["speed"], report["accuracy"]
    line = (f"{shown(variant_path)}: {info.precision} variant verified on {variant.provider}: "
            f"{gate_figures(accuracy)} on {report['examples']} examples (budget {text.limit(info.budget)}), "
            f"{speed['speedup']:.2f}x float32's speed "
            f"({speed['confidence']:.0%} interval {speed['speedup_interval'][0]:.2f}-{speed['speedup_interval'][1]:.2f}x)")
    if info.constant_inputs:  # the one rule not run: say so where the verdict is read
        named = ", ".join(repr(n) for n in info.constant_inputs)
        line += (f"; input{'s' * (len(info.constant_inputs) > 1)} {named} taken as constant in use "
                 f"({INFO_FILE} 'constant_inputs', --force at export)")
    return VariantCheck(True, line, variant_path, variant.provider, report, variant)


def _testable(info: VariantInfo, data: bytes, inputs: dict[str, np.ndarray], labels: np.ndarray | None) -> None:
    """PrecisionRefusal (the variant refused, its float32 reference served) where the sample cannot test the
    variant: degenerate.py's rules, but the constant-input rule only for a variant with calibrated ranges, and not
    for the inputs variant.json's `constant_inputs` names (`specgen export --force` was told they are constant)."""
    if info.logits is not None and labels is None:  # a classifier's gate counts points, and nothing else may
        raise PrecisionRefusal(f"{SAMPLE_FILE} cannot test the variant: it holds no 'labels' for the classifier "
                               f"output '{info.logits}' named in {INFO_FILE}, so the accuracy gate, in points, cannot "
                               "run; run specgen export --triton again to record them")
    ruled = degenerate.constant_inputs(inputs) if int8.calibrated_ranges(data) else ()
    constant = [name for name in ruled if name not in info.constant_inputs]
    problem = degenerate.problem(inputs, labels, info.logits, constant)
    if problem is not None:
        raise PrecisionRefusal(f"{SAMPLE_FILE} cannot test the variant: {problem}")


def _reference(path: Path, provider: str, options: dict[str, Any]) -> tuple[Predictor, str]:
    """The float32 reference loaded, and how messages describe what it takes; VariantFileError when it cannot
    load (InputError, about the provider, passes through)."""
    expected = "the float32 export the variant is gated against"
    require_regular(path, expected)
    try:
        return Predictor(path, provider, **options), expected
    except InputError:
        raise
    except Exception as exc:  # onnxruntime's own exception types for a model it cannot load
        raise refused(path, f"onnxruntime cannot load it ({first_line(exc)}); expected {expected}") from None


def _checked_sidecars(info: VariantInfo, reference: Predictor, sample: Path, expected: str,
                      inputs: dict[str, np.ndarray], labels: np.ndarray | None) -> dict[str, np.ndarray]:
    """variant.json's names and sample.npz's arrays checked against the float32 reference, which then runs on the
    sample: its outputs (the accuracy gate's baseline), or VariantFileError naming the file and the key."""
    info_path, ref = sample.parent / INFO_FILE, REFERENCE_FILE
    if sorted(info.inputs) != sorted(reference.inputs) or len(set(info.inputs)) != len(info.inputs):
        raise refused(info_path, f"'inputs' is {list(info.inputs)!r}; expected {ref}'s inputs, "
                       f"{sorted(reference.inputs)!r}")
    if info.logits is not None and info.logits not in reference.outputs:
        raise refused(info_path, f"'logits' is {info.logits!r}; expected one of {ref}'s outputs, "
                       f"{reference.outputs!r}")
    for k, name in enumerate(info.inputs):
        shape, dtype = reference.inputs[name]
        array = inputs[name]
        fixed = [d if isinstance(d, int) else -1 for d in shape]
        fixed[:1] = [-1] if fixed else []  # any number of rows: a fixed batch runs the sample in chunks of it
        fits = array.ndim == len(shape) and all(d < 0 or d == a for d, a in zip(fixed, array.shape, strict=True))
        if not fits or array.dtype != np.dtype(dtype):
            raise refused(sample, f"'input_{k}' is {array.dtype} {list(array.shape)}; expected {ref}'s input "
                           f"'{name}', {np.dtype(dtype).name} {fixed} (-1: any size)")
        if array.dtype.kind in "fc" and (problem := _non_finite_row(array)) is not None:
            raise refused(sample, f"'input_{k}' {problem}; expected finite values, as the eval set `specgen export` "
                           "records")
    try:
        outputs = run_rows(reference, inputs)
    except Exception as exc:  # the values (onnxruntime's INVALID_ARGUMENT), or a length the model refuses
        raise refused(sample, f"the float32 reference fails on it ({first_line(exc)}); expected examples "
                       f"{ref} runs on") from None
    for name, output in outputs.items():  # the accuracy gate's baseline: a non-finite one would blame the variant
        if output.dtype.kind in "fc" and (problem := _non_finite_row(output)) is not None:
            raise refused(sample, f"on it, {ref}'s output '{name}' {problem}; expected examples on which the "
                           "float32 reference answers finite values")
    if labels is not None and info.logits is not None:
        classes = outputs[info.logits].shape[-1] if outputs[info.logits].ndim else 0
        if labels.ndim != 1 or labels.dtype.kind not in "iu":
            raise refused(sample, f"'labels' is {labels.dtype} {list(labels.shape)}; expected one integer class "
                           "per example")
        bad = np.flatnonzero((labels < 0) | (labels >= classes))
        if bad.size:
            raise refused(sample, f"'labels' holds {labels[bad[0]]} at row {bad[0]}; expected classes of "
                           f"'{info.logits}', integers in [0, {classes})")
    return outputs


def mismatch_line(folder: Path, model: Path, info: VariantInfo, digest: str) -> str:
    """The warning for a variant.json whose `model_sha256` is not the model's: the model is served as float32."""
    return (f"{shown(folder / INFO_FILE)}: 'model_sha256' is {info.model_sha256}; {shown(model)}'s SHA-256 is "
            f"{digest}: the description is of another model (an earlier export's, or the model was replaced), so "
            f"{shown(model)} is served as a plain model, without the {info.precision} variant's gates")


def _non_finite_row(array: np.ndarray) -> str | None:
    """'is NaN at row 3 (and 2 more rows)' for the first row of `array` holding NaN or inf, or None."""
    bad = ~np.isfinite(array.reshape(len(array), -1)).all(axis=1) if array.ndim else ~np.isfinite(array[None])
    rows = np.flatnonzero(bad)
    if not rows.size:
        return None
    row = array[rows[0]].reshape(-1)
    first = row[~np.isfinite(row)][0]
    what = "NaN" if np.isnan(first) else ("infinite" if first.real > 0 else "-infinite")
    more = f" (and {rows.size - 1} more rows)" if rows.size > 1 else ""
    return f"is {what} at row {rows[0]}{more}"


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
        raise refused(model, f"cannot be read ({exc})") from None
    if digest != info.model_sha256:  # as documented, not a variant; but never silently (a copied-over model?)
        log.warning("variant.json describes another model", extra={"fields": {
            "event": "variant_ignored", "file": shown(folder / INFO_FILE), "line": mismatch_line(folder, model, info,
                                                                                                 digest)}})
        return None
    try:
        variant: Predictor | None = Predictor(model, provider, **options)
    except Exception:  # onnxruntime's own types; verify_variant refuses it with the reason (loading it once more)
        variant = None
    if variant is not None and not needs_check(info, variant.provider):
        line = f"{shown(model)}: {info.precision} variant, verified on {variant.provider} by the export"
        return VariantCheck(True, line, model, variant.provider, {}, variant)
    return verify_variant(model, folder / REFERENCE_FILE, folder / SAMPLE_FILE, provider, info, variant, **options)
