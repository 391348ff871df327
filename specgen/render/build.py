"""`specgen build`: render every spec in memory, then write atomically or diff (`--check`)."""

from __future__ import annotations

import difflib
import multiprocessing
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from specgen.diagnostics import Diagnostic, SpecError
from specgen.ir.resolve import build_ir
from specgen.render.files import load_templates, render_files
from specgen.spec.load import load_spec

BINARY_SUFFIXES = (".onnx",)


@dataclass(frozen=True)
class Output:
    """The files one spec renders to, relative to the output folder."""

    spec: Path
    folder: str  # the spec name
    files: dict[str, bytes]


PARALLEL_FROM = 8  # specs; below this a worker pool costs more than it saves


def _render_many(paths: list[Path]) -> list[Output | list[Diagnostic]]:
    """Render in worker processes forked after imports (one per core), results in input order.

    Writing stays in this process: measured, writing from the workers as well gained nothing
    (sending the rendered bytes back to them costs what the parallel writes save).
    """
    workers = min(os.cpu_count() or 1, len(paths))
    if workers < 2 or len(paths) < PARALLEL_FROM or "fork" not in multiprocessing.get_all_start_methods():
        return [render_one(p) for p in paths]
    load_templates()  # once here rather than once per worker
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        return pool.map(render_one, paths, chunksize=max(1, len(paths) // (4 * workers)))


def render_one(path: Path) -> Output | list[Diagnostic]:
    """One spec's files, or its diagnostics (returned, not raised, so they cross process boundaries)."""
    try:
        loaded = load_spec(path)
        ir = build_ir(loaded)
        return Output(path, ir.name, render_files(ir, loaded.spec))
    except SpecError as exc:
        return exc.diagnostics


def render_all(paths: list[Path]) -> list[Output]:
    """Load, resolve and render every spec; raise SpecError with every problem in every file."""
    outputs: list[Output] = []
    problems: list[Diagnostic] = []
    for result in _render_many(paths):
        if isinstance(result, Output):
            outputs.append(result)
        else:
            problems += result
    seen: dict[str, Path] = {}
    for out in outputs:
        if out.folder in seen:
            problems.append(Diagnostic(str(out.spec), None, f"spec name '{out.folder}' is also used by "
                                       f"{seen[out.folder]}; each spec needs its own name (its output folder)"))
        seen.setdefault(out.folder, out.spec)
    if problems:
        raise SpecError(problems)
    return outputs


def write(outputs: list[Output], root: Path) -> list[Path]:
    """Write every changed file through a temporary file and a rename; remove files no longer generated.

    Runs only after every spec rendered and passed its checks (render_all), so a mistake in
    any spec writes nothing.
    """
    written = []
    for out in outputs:
        folder = root / out.folder
        folder.mkdir(parents=True, exist_ok=True)
        for name, content in out.files.items():
            target = folder / name
            if target.is_file() and target.read_bytes() == content:
                continue
            _atomic_write(target, content)
            written.append(target)
        for stale in _stale(folder, out.files):
            stale.unlink()
            written.append(stale)
    return written


def _atomic_write(target: Path, content: bytes) -> None:
    # Not mkstemp: it creates 0600 files, and generated files are ordinary files (0666 less the umask).
    temp = target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _stale(folder: Path, files: dict[str, bytes]) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name not in files)


def check(outputs: list[Output], root: Path) -> list[str]:
    """A unified diff (or a one-line note) for every drifted, missing or stale file."""
    reports = []
    for out in outputs:
        folder = root / out.folder
        for name, content in out.files.items():
            target = folder / name
            if not target.is_file():
                reports.append(f"missing: {target} (run `specgen build`)")
            elif target.read_bytes() != content:
                reports.append(_diff(target, content))
        reports += [f"stale: {p} is no longer generated" for p in _stale(folder, out.files)]
    return reports


def _diff(target: Path, content: bytes) -> str:
    if target.suffix in BINARY_SUFFIXES:
        return f"drifted: {target} (binary; its text form shows the change)"
    old = target.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
    new = content.decode().splitlines(keepends=True)
    return "".join(difflib.unified_diff(old, new, f"{target} (on disk)", f"{target} (from the spec)"))
