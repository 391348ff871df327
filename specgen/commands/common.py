"""What several commands share: argparse types and the spec paths of `validate`, `build` and `report`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from specgen.config import load_config
from specgen.diagnostics import Diagnostic, SpecError
from specgen.errors import SpecgenError
from specgen.paths import shown

SPEC_SUFFIXES = (".yaml", ".yml")


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1 (a count of examples, trials or workers)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"received {text!r}; expected a positive integer")
    return value


def shape(text: str) -> tuple[int, ...]:
    """argparse type: positive integers joined by commas (an input shape: 96,96,3)."""
    try:
        dims = tuple(int(d) for d in text.split(","))
    except ValueError:
        dims = ()
    if not dims or min(dims) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers joined by commas (96,96,3); received {text!r}")
    return dims


class NoSpecs(SpecgenError):
    """A folder argument holding no spec file: a typo or an unpopulated folder, never a silent success."""


def expand(paths: Sequence[Path]) -> list[Path]:
    """Files as given; folders contribute their *.yaml / *.yml files, sorted. A folder without any is an error
    (one line per such folder), so `specgen report specs/` on an empty or mistyped folder does not pass CI."""
    found: list[Path] = []
    empty: list[Path] = []
    for path in paths:
        if path.is_dir():
            specs = sorted(p for p in path.rglob("*") if p.suffix in SPEC_SUFFIXES and p.is_file())
            found += specs
            empty += [] if specs else [path]
        else:
            found.append(path)
    if empty:
        raise NoSpecs("\n".join(f"no spec files (*.yaml, *.yml) in {shown(p)}" for p in empty))
    return found


def require_regular(path: Path, what: str) -> None:
    """A path a command hands to a foreign reader (onnxruntime, TensorFlow) is a regular file, or it is one line:
    a FIFO would block that reader forever and a folder gets a misleading parse error. A missing path is left to
    the reader, whose message names it."""
    from specgen.runtime.sources.base import MISSING, REGULAR, file_kind

    kind = file_kind(path)
    if kind not in (MISSING, REGULAR):
        raise SpecError([Diagnostic(shown(path), None, f"{what} is {kind}, not a regular file")])


def spec_paths(given: Sequence[Path]) -> list[Path]:
    """The spec files a command works on: those given, else pyproject's `[tool.specgen] specs`."""
    paths = expand(given or load_config().specs)
    if not paths:
        raise SpecError([Diagnostic("specgen", None, "no spec files given; pass paths or set "
                                    "[tool.specgen] specs in pyproject.toml")])
    return paths


def schema_drift(target: Path, text: str) -> list[str]:
    """[] if `target` holds `text`; else one report line. Never reads through a link or a device."""
    from specgen.atomic import UnsafePathError, read_regular

    try:
        on_disk = read_regular(target)
    except UnsafePathError as exc:
        return [f"unsafe: {exc}"]
    return [] if on_disk == text.encode() else [f"drifted: {shown(target)} (run `specgen schema`)"]
