"""The parity, accuracy and precision-variant lines of an export (`specgen export` prints them; the HTML report
shows them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specgen import text


def export_lines(report: Mapping[str, Any]) -> list[str]:
    """From export()'s report, as export.json keeps it."""
    scaled = report["parity_scaled_diff"]  # the gated figure: diff / max(1, max |output|), as exporter.scaled_diff
    relative = "" if scaled == report["parity_max_abs_diff"] else f"; {scaled:.3g} of the output's magnitude"
    lines = [f"parity: max abs diff {report['parity_max_abs_diff']:.3g} between onnxruntime and TensorFlow "
             f"on {report['compared_examples']} examples{relative} (limit 1e-4)"]
    if report.get("onnxruntime_accuracy") is not None:
        lines.append(f"eval accuracy: onnxruntime {report['onnxruntime_accuracy']:.4f}, "
                     f"TensorFlow {report['tensorflow_accuracy']:.4f}")
    return lines


def variant_lines(out: str, report: Mapping[str, Any]) -> list[str]:
    """What `specgen export --precision` wrote and its gates' figures, from export.json's `precision` entry."""
    name, accuracy, speed = report["precision"], report["accuracy"], report.get("speed")
    kernels = f", {report['integer_kernels']} integer kernels after onnxruntime's fusion" if "integer_kernels" in report else ""
    if report.get("float32_compute"):
        kernels += f"; left in float32: {', '.join(report['float32_compute'])}"
    lines = [f"{name}: wrote {out}/{report['file']} ({report['bytes']:,} bytes, float32 {report['fp32_bytes']:,}){kernels}"]
    where = f", on {accuracy['provider']}" if accuracy.get("provider") else ""  # an unverified variant's: the CPU
    budget = text.limit(accuracy["budget"])  # with the digits it was given: `:g` shows 0.2777778 as 0.277778
    if "lost_points" in accuracy:
        lines.append(f"{name} accuracy: {accuracy['accuracy']:.4f} vs float32 {accuracy['fp32_accuracy']:.4f} "
                     f"({_change(accuracy['lost_points'], accuracy['budget'])}, budget {budget}{where})")
        errors = accuracy.get("relative_error_percent_by_output")  # a classifier's other outputs (older: none)
        if errors:
            each = ", ".join(f"'{k}' {text.against(v, accuracy['budget'], 3)}%" for k, v in errors.items())
            lines.append(f"{name} error of the other outputs: {each} relative to float32 (budget {budget}%{where})")
    else:
        lines.append(f"{name} error: {text.against(accuracy['relative_error_percent'], accuracy['budget'], 3)}% "
                     f"relative to float32 (budget {budget}%{where})")
    if speed is None:  # unverified (runtime/precision/verify.py): the server gates it at load
        lines.append(f"warning: {name} is unverified: {report.get('unverified')}; `specgen serve` runs its kernel, "
                     "accuracy and speed gates at load and serves the float32 model where it fails")
        return lines
    interval = speed.get("speedup_interval")  # export.json before the paired gate has none
    spread = (f"; {speed['confidence']:.0%} interval {interval[0]:.2f}-{interval[1]:.2f}x over {speed['rounds']} rounds"
              if interval else "")
    lines.append(f"{name} speed: {speed['variant_ms']:.3f} ms vs float32 {speed['fp32_ms']:.3f} ms per batch of "
                 f"{speed['batch']} on {speed['provider']} ({speed['speedup']:.2f}x{spread})")
    if "warning" in speed:
        lines.append(f"warning: {name} {speed['warning']}".replace(f"{name} written", "written"))
    return lines


def _change(lost: float, budget: float) -> str:
    """Points lost (or gained), with the digits that show the loss within `budget` (text.against)."""
    return f"{text.against(lost, budget)} points lost" if lost >= 0 else f"{text.against(-lost, budget)} points gained"
