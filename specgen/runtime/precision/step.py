"""The precision step of `specgen export`: make the variant, check its kernels, gate it; all before any write.

Where the provider the variant is for cannot run it here (no CUDA on this machine, or no float16 kernels
on the CPU), `--force` writes it *unverified*: the accuracy gate still runs, on the CPU (for fp16 with its
float16 arithmetic emulated, fp16_emulation.py: the CPU provider itself would compute in float32), but kernels
and speed are left to the server, which gates it at load on the provider it gets (verify.py). Without `--force`
that is a refusal saying so.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from specgen.diagnostics import Diagnostic, SpecError
from specgen.ir.model import ModelIR
from specgen.kinds.precisions import calibration_mistake
from specgen.runtime.graph_runs import predictor_batch, run_rows
from specgen.runtime.precision import REGISTRY, degenerate, int8
from specgen.runtime.precision.base import Calibration, PrecisionDef, PrecisionRefusal, spread_rows
from specgen.runtime.precision.gates import accuracy_gate, paired_timing, speed_verdict
from specgen.runtime.precision.optimized import RunsAsFloat32
from specgen.runtime.precision.valid import checked_variant
from specgen.runtime.precision.verify import SPEED_BATCH, VariantInfo
from specgen.runtime.predictor import EXPORT_PROVIDERS, InputError, Predictor
from specgen.spec.load import LoadedSpec

DEFAULT_CALIBRATION = 512
UNVERIFIED_HINT = ("pass --force to write it unverified (`specgen serve` runs its gates at load, on the provider it "
                   "gets)")
CONSTANT_HINT = ("pass --force to write it unverified (`specgen serve` runs its gates at load, on the provider it gets, "
                 "all but this rule)")


@dataclass(frozen=True)
class PrecisionRequest:
    """What the command line asks; None leaves the spec's `export.onnx` value."""

    precision: str | None = None
    calibration: int | None = None
    force: bool = False
    provider: str = "cpu"


@dataclass(frozen=True)
class Variant:
    name: str
    file_name: str
    model_bytes: bytes
    report: dict[str, Any]
    info: VariantInfo  # what the Triton version folder records beside it (verify.py)


def _where(loaded: LoadedSpec, request: PrecisionRequest, flag: str, key: str, value: Any) -> Callable[[str], SpecError]:
    """A refusal pointing at the flag when the command line gave the value, else at the spec key."""
    given = request.calibration if key == "calibration_examples" else request.precision

    def refuse(message: str) -> SpecError:
        text = f"{message}; nothing was written"
        if given is not None:
            return SpecError([Diagnostic(loaded.display, None, f"{flag} {value}: {text}")])
        return SpecError([loaded.diagnostic(("export", "onnx", key), f"export.onnx.{key} {value}: {text}")])
    return refuse


def _calibration(loaded: LoadedSpec, ir: ModelIR, request: PrecisionRequest, inputs: dict[str, np.ndarray],
                 rows: int) -> Calibration:
    export = ir.training.export if ir.training else None
    asked = request.calibration or (export.calibration_examples if export else None)
    if asked is not None and asked > rows:
        where = _where(loaded, request, "--calibration", "calibration_examples", asked)
        raise where(f"int8 calibration asks for {asked} examples; the eval set has {rows}: ask for {rows} or fewer")
    count = asked or min(DEFAULT_CALIBRATION, rows)
    chosen = spread_rows(rows, count)  # over the whole eval set: its first rows may be one class (base.spread_rows)
    return Calibration(export.calibration if export else "minmax", {k: v[chosen] for k, v in inputs.items()})


def make_variant(loaded: LoadedSpec, ir: ModelIR, model_bytes: bytes, inputs: dict[str, np.ndarray],
                 labels: np.ndarray | None, sample: str, request: PrecisionRequest) -> Variant | None:
    """The gated variant the spec or `--precision` asks for; None for fp32; SpecError (nothing written) else."""
    assert ir.training is not None
    export = ir.training.export
    name = request.precision or export.precision
    problem = calibration_mistake(name, request.calibration)  # the spec's precision: known only now
    if problem is not None:
        raise SpecError([Diagnostic(loaded.display, None, f"{problem} (export.onnx.precision); nothing was written")])
    if name == "fp32":
        return None
    where = _where(loaded, request, "--precision", "precision", name)
    if sample != "eval set":
        raise where(f"{name} is calibrated and gated on the eval set, and the spec has none: add 'data.eval'")
    definition = REGISTRY[name]
    rows = len(next(iter(inputs.values())))
    calibration = _calibration(loaded, ir, request, inputs, rows) if definition.calibrated else Calibration()
    logits = _logits(ir, name, labels, where)
    try:
        variant_bytes, converted = definition.convert(model_bytes, calibration)
        variant_bytes = checked_variant(variant_bytes, name)  # sorted, onnx.checker's full check: as model.onnx
        fp32, kernels, unchecked = _checked(definition, model_bytes, variant_bytes, request)
        constant = degenerate.constant_inputs(inputs) if int8.calibrated_ranges(variant_bytes) else ()
        untestable = _untestable(name, inputs, labels, logits, constant, request.force)  # after the provider's say
        variant = Predictor(variant_bytes, "cpu" if unchecked else request.provider, choices=_choices(definition))
        outputs, measured = _variant_outputs(definition, variant, variant_bytes, inputs, unchecked is not None)
        # a graph with a fixed batch (export.onnx.dynamic_batch: false) runs the eval set in chunks of it
        gated = accuracy_gate(name, export.budget, run_rows(fp32, inputs), outputs, labels, logits) | measured
        unverified = "; ".join(r for r in (untestable, unchecked) if r) or None
        speed = None
        if not unverified:  # timed at the batch the graph takes: its fixed one, else SPEED_BATCH rows
            batch = {k: v[:predictor_batch(fp32) or SPEED_BATCH] for k, v in inputs.items()}
            timing = paired_timing(lambda: fp32(batch), lambda: variant(batch))
            speed = speed_verdict(name, variant.provider, len(next(iter(batch.values()))), timing, request.force)
    except PrecisionRefusal as exc:
        raise where(str(exc)) from None
    if speed is not None and "warning" in speed:  # a gate overridden with --force: the server gates it again
        unverified = f"{name} {speed['warning']}"
    # the digests of the two files the figures are about: a reader of export.json (specgen report) tells a file
    # replaced since from the one measured
    report = {"precision": name, "file": definition.file_name, "bytes": len(variant_bytes),
              "sha256": hashlib.sha256(variant_bytes).hexdigest(), "fp32_bytes": len(model_bytes),
              "fp32_sha256": hashlib.sha256(model_bytes).hexdigest(), **converted, **kernels,
              "verified": unverified is None,
              "accuracy": gated | ({"provider": variant.provider} if unverified else {}), "speed": speed}
    if unverified:
        report["unverified"] = unverified
    info = VariantInfo(precision=name, verified=unverified is None,
                       verified_on=None if unverified else variant.provider, reason=unverified,
                       budget=export.budget, logits=logits, inputs=tuple(inputs),
                       model_sha256=hashlib.sha256(variant_bytes).hexdigest(),
                       # int8's numbers depend on the CPU's integer kernels (VNNI or not): the server gates a
                       # variant again on a CPU of the other kind (verify.needs_check)
                       vnni=int8.has_vnni() if name == "int8" else None,
                       reduce_range=converted.get("reduce_range") if name == "int8" else None,
                       # non-empty only past the constant-input rule with --force: the server skips it for these
                       constant_inputs=constant)
    return Variant(name, definition.file_name, variant_bytes, report, info)


def _logits(ir: ModelIR, name: str, labels: np.ndarray | None, where: Callable[[str], SpecError]) -> str | None:
    """A classifier's logits output (its gate counts points of accuracy on it), or None for other models; a
    classifier whose eval set has no labels is refused, rather than gated on another metric in another unit."""
    assert ir.training is not None
    loss = ir.training.loss
    if loss is None or loss.target != "sparse":
        return None
    if labels is None:
        raise where(f"{name} gates a classifier on its eval accuracy, and the eval set has no labels "
                    f"'{loss.labels}': add them to data.eval")
    return loss.logits


def _untestable(name: str, inputs: dict[str, np.ndarray], labels: np.ndarray | None, logits: str | None,
                constant: tuple[str, ...], force: bool) -> str | None:
    """Why the eval set cannot test the variant (degenerate.py; `constant`: the float inputs the same in every
    example of a variant with calibrated ranges), as the reason it is written unverified with --force; without
    --force a PrecisionRefusal. None for an eval set that can."""
    problem = degenerate.problem(inputs, labels, logits, constant)
    if problem is None:
        return None
    why = f"{name}: the eval set cannot test the variant: {problem}"
    if force:
        return f"{why}; written unverified with --force"
    if constant:  # legitimate where the input is constant in use: the server then skips this rule (degenerate.py)
        raise PrecisionRefusal(f"{why}; use an eval set of varied examples (data.eval), or, if '{constant[0]}' always "
                               f"holds that value (a mask, a flag), {CONSTANT_HINT}")
    raise PrecisionRefusal(f"{why}; use an eval set of varied examples (data.eval), or {UNVERIFIED_HINT}")


def _choices(definition: PrecisionDef) -> tuple[str, ...]:
    """The --provider values a refusal may advise: a GPU precision (fp16) is not verified on the CPU, so advising
    `--provider cpu` would only lead to another refusal (its advice is then --force alone)."""
    return tuple(p for p in EXPORT_PROVIDERS if p != "cpu") if definition.for_gpu else EXPORT_PROVIDERS


def _variant_outputs(definition: PrecisionDef, variant: Predictor, variant_bytes: bytes, inputs: dict[str, np.ndarray],
                     unverified: bool) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The variant's outputs on the eval set for the accuracy gate, and how they were computed (for the report).

    Where its provider checked it, the variant itself. Unverified, it runs on the CPU, which lacks the kernels of
    a GPU precision: onnxruntime would run an fp16 variant there in float32 (float16 weights only), so the gate
    runs its emulated arithmetic instead (fp16_emulation.py), which also refuses a float16 overflow."""
    if unverified and definition.emulate is not None:
        return definition.emulate(variant_bytes, inputs)
    return run_rows(variant, inputs), {}


def _checked(definition: PrecisionDef, model_bytes: bytes, variant_bytes: bytes,
             request: PrecisionRequest) -> tuple[Predictor, dict[str, Any], str | None]:
    """The float32 model loaded where the gates run, the kernel check's figures, and why the variant is
    unverified (None when its provider checked it here).

    Not checkable here: `--provider cuda` where CUDA cannot start, or a GPU precision (fp16) refused by the
    CPU's kernels. With --force the variant is then gated for accuracy on the CPU and written unverified;
    without, that is a PrecisionRefusal saying what --force would do. Any other refusal stands.
    """
    try:
        # first: a CUDA that cannot start is said before any check, in export's --provider values
        fp32 = Predictor(model_bytes, request.provider, choices=_choices(definition))
        return fp32, definition.check(variant_bytes, request.provider), None
    except InputError as exc:  # the CUDA provider is absent or cannot start here
        reason = str(exc).rstrip(".")
        if definition.for_gpu:  # why --provider cpu is not the way out (_choices)
            reason += f"; the CPU cannot verify {definition.name}, which is made for the CUDA provider"
    except PrecisionRefusal as exc:  # a graph that computes nothing in its precision is refused anywhere
        if request.provider != "cpu" or not definition.for_gpu or isinstance(exc, RunsAsFloat32):
            raise
        reason = str(exc)
    if not request.force:
        raise PrecisionRefusal(f"{reason}; {UNVERIFIED_HINT}") from None
    return Predictor(model_bytes, "cpu"), {}, f"{reason}; written unverified with --force"
