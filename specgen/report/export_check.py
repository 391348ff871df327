"""Whether the files of an export folder are still the ones its export.json measured.

Every figure the report shows from export.json is about files: parity and accuracy about model.onnx, a precision
variant's size and gates about the variant and model.onnx (its float32 reference). A file replaced or removed since
makes those figures another file's, so one rule covers them all (`Checked.figures`): figures about a file whose
SHA-256 is not the recorded one (its size, where an older export.json records no digest) are withheld, in one line
naming the file that changed; where export.json records neither (an fp32 export written before `model_sha256`), the
figures are shown under a line saying they cannot be checked.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specgen.runtime.sources.base import DataError, open_regular

FP32 = "model.onnx"


@dataclass(frozen=True)
class Recorded:
    """What export.json records of one file: its SHA-256 and its size in bytes, each None where it records none."""

    sha256: str | None
    size: int | None


def recorded(report: Mapping[str, Any]) -> dict[str, Recorded]:
    """The files export.json describes. model.onnx's digest is the top-level `model_sha256`, or, in an export.json
    written before it, the variant entry's `fp32_sha256` (pictures/export_json.py refuses the two disagreeing)."""
    variant: Mapping[str, Any] = report.get("precision") or {"precision": "fp32"}
    files = {FP32: Recorded(report.get("model_sha256") or variant.get("fp32_sha256"), variant.get("fp32_bytes"))}
    if variant["precision"] != "fp32":
        files[variant["file"]] = Recorded(variant.get("sha256"), variant["bytes"])
    return files


class Checked:
    """An export folder's files against its export.json, each file read once (model.onnx can be hundreds of MB,
    and several figures are about it)."""

    def __init__(self, folder: Path, report: Mapping[str, Any]) -> None:
        self.folder = folder
        self.recorded = recorded(report)
        self._changed: dict[str, str | None] = {}

    def changed(self, name: str) -> str | None:
        """Why `name` is not the file export.json measured (replaced, gone, unreadable), or None."""
        if name not in self._changed:
            self._changed[name] = _changed(self.folder / name, name, self.recorded[name])
        return self._changed[name]

    def figures(self, kinds: Sequence[str], files: Sequence[str], command: str, purpose: str,
                lines: list[str]) -> list[str]:
        """`lines`, the `kinds` figures (e.g. "parity", "accuracy") measured on `files` (the first names them), or in
        their place one line naming the file that changed; `command` measures them again, for `purpose` ("gate it")."""
        for name in files:
            reason = self.changed(name)
            if reason is not None:
                return [f"{files[0]}: no {' or '.join(kinds)} figures: {reason}; run {command} again to "
                        f"{purpose}"]
        notes = [f"{name}: the {' and '.join(kinds)} figures below cannot be checked against it: export.json, written "
                 f"by an older specgen, records neither its SHA-256 nor its size; run {command} again to record them"
                 for name in files if self.recorded[name] == Recorded(None, None)]
        return notes + lines


def _changed(path: Path, name: str, record: Recorded) -> str | None:
    """Why the file at `path` is not the one `record` describes: another SHA-256, or (no digest recorded) another
    size; or it cannot be read. None where it is, or where nothing is recorded to tell (Checked.figures says so)."""
    try:
        with open_regular(path) as handle:
            digest, read = hashlib.sha256(), 0
            while record != Recorded(None, None) and (block := handle.read(2**20)):
                digest.update(block)
                read += len(block)
    except (OSError, DataError) as exc:
        return f"{name} cannot be read ({exc}), so it is not the file export.json describes"
    if record.sha256 is not None and digest.hexdigest() != record.sha256:
        return f"{name} changed since export.json (its SHA-256 is {digest.hexdigest()}; export.json records {record.sha256})"
    if record.sha256 is None and record.size is not None and read != record.size:
        return f"{name} changed since export.json ({read:,} bytes; export.json records {record.size:,})"
    return None
