"""The parity and accuracy lines of an export (`specgen export` prints them; the HTML report shows them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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
