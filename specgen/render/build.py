"""`specgen build`: render every spec in memory, then write atomically or diff (`--check`)."""

from __future__ import annotations

import difflib
import functools
import multiprocessing
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from specgen.atomic import STALE_AFTER, TEMP_NAME, UnsafePathError, kind, pid_alive, read_regular, write_atomic, writing
from specgen.diagnostics import Diagnostic, SpecError
from specgen.errors import AbstractSpec
from specgen.ir.resolve import ir_from_file
from specgen.paths import shown
from specgen.progress import delayed
from specgen.render.files import load_templates, render_files

BINARY_SUFFIXES = (".onnx",)


@dataclass(frozen=True)
class Output:
    """The files one spec renders to, relative to the output folder."""

    spec: Path
    folder: str  # the spec name
    files: dict[str, bytes]


PARALLEL_FROM = 8  # specs; below this a worker pool costs more than it saves


def _render_many(paths: list[Path], pictures: bool = False) -> list[Output | list[Diagnostic] | None]:
    """Render in worker processes forked after imports (one per core), results in input order.

    Writing stays in this process: measured, writing from the workers as well gained nothing
    (sending the rendered bytes back to them costs what the parallel writes save).
    """
    workers = min(os.cpu_count() or 1, len(paths))
    if workers < 2 or len(paths) < PARALLEL_FROM or "fork" not in multiprocessing.get_all_start_methods():
        return [render_one(p, pictures) for p in delayed(paths, "build")]
    load_templates()  # once here rather than once per worker
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        one = functools.partial(render_one, pictures=pictures)
        # imap keeps the input order, as map did, and lets the bar count specs as they come back.
        done = pool.imap(one, paths, chunksize=max(1, len(paths) // (4 * workers)))
        return list(delayed(done, "build", total=len(paths)))


def render_one(path: Path, pictures: bool = False) -> Output | list[Diagnostic] | None:
    """One spec's files (with `pictures`, model.svg too), or its diagnostics (returned, not raised, so they
    cross process boundaries); None for an abstract spec, which exists only to be extended."""
    try:
        ir = ir_from_file(path)
        files = render_files(ir)
        if pictures:
            from specgen.pictures.graph import render_svg  # no dependency beyond specgen's own (pictures/layout.py)

            files["model.svg"] = render_svg(ir).encode()
        return Output(path, ir.name, files)
    except SpecError as exc:
        return exc.diagnostics
    except AbstractSpec:
        return None


def render_all(paths: list[Path], pictures: bool = False) -> list[Output]:
    """Load, resolve and render every spec (with `pictures`, also its model.svg); raise SpecError with every
    problem in every file."""
    outputs: list[Output] = []
    problems: list[Diagnostic] = []
    for result in _render_many(paths, pictures):
        if result is None:
            continue
        if isinstance(result, Output):
            outputs.append(result)
        else:
            problems += result
    problems += _shared_folders(outputs)
    if problems:
        raise SpecError(problems)
    return outputs


def _shared_folders(outputs: list[Output]) -> list[Diagnostic]:
    """One line per spec whose output folder another spec of the build already takes: the same name, or a name
    that differs only in case (`Mlp`, `mlp`), one folder on a case-insensitive file system (macOS, Windows),
    where the second spec's files overwrote the first's."""
    seen: dict[str, Output] = {}
    problems = []
    for out in outputs:
        first = seen.setdefault(out.folder.casefold(), out)
        if first is out:
            continue
        if first.folder == out.folder:
            problems.append(Diagnostic(str(out.spec), None, f"spec name '{out.folder}' is also used by "
                                       f"{first.spec}; each spec needs its own name (its output folder)"))
        else:
            problems.append(Diagnostic(str(out.spec), None, f"spec name '{out.folder}' differs only in case from "
                                       f"'{first.folder}' of {first.spec}: on a case-insensitive file system "
                                       "(macOS, Windows) the two output folders are one; give the specs names that "
                                       "differ in more than case"))
    return problems


@dataclass(frozen=True)
class _OnDisk:
    """One spec's output folder as found: each generated file's bytes (None: missing), and stale files."""

    shown: Path  # <root>/<name> as the user spelled the root, for messages
    real: str  # the same folder on the resolved root, where specgen reads and writes
    current: dict[str, bytes | None]
    stale: list[str]
    temporary: list[str] = field(default_factory=list)  # left by a build killed between write and rename


def _real_root(root: Path) -> str:
    """The output root resolved once (links above and at it are the user's choice); a folder or missing."""
    real = os.path.realpath(root)
    if kind(Path(real), root) == "file":
        raise UnsafePathError(root, "is a file, not a folder", "remove it or choose another output folder")
    return real


def _survey(out: Output, root: Path, real_root: str) -> _OnDisk:
    """Read one spec's output folder without following any link below the root.

    The folder must be a real folder; a link, device or pipe in it, or a folder where a
    generated file goes, raises UnsafePathError naming it. Other real subfolders (a
    __pycache__) are not ours and are left alone. Paths are strings here: this runs for every
    file of every spec, and pathlib objects cost more than the system calls.
    """
    shown, real = root / out.folder, os.path.join(real_root, out.folder)
    disk = _OnDisk(shown, real, dict.fromkeys(out.files), [])
    found = kind(Path(real), shown)
    if found == "file":
        raise UnsafePathError(shown, "is a file where specgen needs a folder", "remove it and run again")
    if found is None:
        return disk
    with os.scandir(real) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            ours = entry.name in out.files
            # DirEntry answers from the folder listing (no extra system call); kind() names the odd ones.
            if entry.is_dir(follow_symlinks=False) and not ours:
                continue
            if entry.is_symlink() or not entry.is_file(follow_symlinks=False):
                kind(Path(entry.path), shown / entry.name)
                raise UnsafePathError(shown / entry.name, "is a folder where specgen writes a generated file",
                                      "remove it and run again")
            if ours:
                disk.current[entry.name] = read_regular(Path(entry.path))
            elif (left := _temporary(entry.name, entry.stat(follow_symlinks=False).st_mtime, out)) is not None:
                if left:  # a live writer's (another build running now) is renamed away in a moment: not ours
                    disk.temporary.append(entry.name)
            else:
                disk.stale.append(entry.name)
    return disk


def _temporary(name: str, modified: float, out: Output) -> bool | None:
    """None unless `name` is the temporary file of one of `out`'s files (atomic.staged); then whether it was left
    behind: its writer's process is gone (kill -9 between the write and the rename), or it is older than any write
    of a generated file takes (its pid since reused). Reported and removed as what it is, not as a file the spec
    "no longer generates". Either sign is enough here, unlike atomic.remove_stale_temps' rule (a dead pid and
    old), which guards a folder other machines write at once: an output folder is a checkout's, written by one
    build at a time, and a build killed a second ago is what `--check` should name."""
    found = TEMP_NAME.fullmatch(name)  # a write in progress, as atomic.staged names it
    if found is None or found["target"] not in out.files:
        return None
    return not pid_alive(int(found["pid"])) or time.time() - modified > STALE_AFTER


def _make_folder(disk: _OnDisk) -> None:
    """Create a spec's folder if missing, with mkdir (never follows a link); then it must be a real folder."""
    with writing(disk.shown):
        os.makedirs(os.path.dirname(disk.real), exist_ok=True)  # the root itself
        if kind(Path(disk.real), disk.shown) is None:
            os.mkdir(disk.real)
            kind(Path(disk.real), disk.shown)  # still a folder, not a link raced into its place


@dataclass
class Changes:
    """What `write` changed, as the user spelled the root, filled in as it goes: a write that fails half-way (an
    immutable file) still reports what it did before the failure (`lines`, printed before the error line)."""

    written: list[Path] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)  # no longer generated
    temporary: list[Path] = field(default_factory=list)  # left by an interrupted build

    def lines(self) -> list[str]:
        return ([f"wrote {shown(p)}" for p in self.written]
                + [f"removed {shown(p)} (no longer generated)" for p in self.removed]
                + [f"removed {shown(p)} (a temporary file an interrupted build left)" for p in self.temporary])


def write(outputs: list[Output], root: Path, changes: Changes) -> None:
    """Write every changed file through a temporary file and a rename; remove files no longer generated and the
    temporary files of an interrupted build; record each in `changes`.

    Runs only after every spec rendered and passed its checks (render_all), so a mistake in
    any spec writes nothing; likewise every output folder is surveyed (no links, nothing but
    regular files where files go) before the first write, so an unsafe path writes nothing.
    The root is resolved once; everything below it is read and written on the resolved path.
    """
    with writing(root):
        real_root = _real_root(root)
    found = [_survey(out, root, real_root) for out in outputs]
    for out, disk in zip(outputs, found, strict=True):
        _make_folder(disk)
        for name in disk.temporary:
            if _unlink(disk, name):
                changes.temporary.append(disk.shown / name)
        for name, content in out.files.items():
            if disk.current[name] == content:
                continue
            with writing(disk.shown / name):
                # No fsync: generated files are rebuilt from the specs; the rename alone keeps them whole.
                write_atomic(Path(disk.real, name), content, fsync=False)
            changes.written.append(disk.shown / name)
        for name in disk.stale:
            if _unlink(disk, name):
                changes.removed.append(disk.shown / name)


def _unlink(disk: _OnDisk, name: str) -> bool:
    """Remove a regular file the survey found (unlink never follows a link); False if it is gone already."""
    with writing(disk.shown / name):
        try:
            os.unlink(os.path.join(disk.real, name))
        except FileNotFoundError:  # a temporary file another build's write_atomic removed since the survey
            return False
    return True


def check(outputs: list[Output], root: Path) -> list[str]:
    """A unified diff (or a one-line note) for every drifted, missing, stale or unsafe file."""
    try:
        real_root = _real_root(root)
    except UnsafePathError as exc:
        return [f"unsafe: {exc}"]
    reports = []
    for out in outputs:
        try:
            disk = _survey(out, root, real_root)
        except UnsafePathError as exc:
            reports.append(f"unsafe: {exc}")
            continue
        for name, content in out.files.items():
            target, old = disk.shown / name, disk.current[name]
            if old is None:
                reports.append(f"missing: {target} (run `specgen build`)")
            elif old != content:
                reports.append(_line_endings(target, old, content, root) or _diff(target, old, content))
        reports += [f"stale: {disk.shown / name} is no longer generated" for name in disk.stale]
        reports += [f"leftover: {disk.shown / name} is a temporary file an interrupted build left (the next "
                    "`specgen build` removes it)" for name in disk.temporary]
    return reports


def _line_endings(target: Path, old: bytes, content: bytes, root: Path) -> str | None:
    """One line when only CRLF vs LF differs (git's core.autocrlf on Windows): a whole-file diff of lines that look
    the same on screen would hide the cause. Generated files are written with LF on every system."""
    if b"\r\n" not in old or old.replace(b"\r\n", b"\n") != content:
        return None
    return (f"drifted: {target} (line endings: CRLF on disk, LF expected; add "
            f"`{root.as_posix().rstrip('/')}/** text eol=lf` to .gitattributes)")


def _diff(target: Path, old_bytes: bytes, content: bytes) -> str:
    if target.suffix in BINARY_SUFFIXES:
        return f"drifted: {target} (binary; its text form shows the change)"
    old = old_bytes.decode("utf-8", errors="replace").splitlines(keepends=True)
    new = content.decode().splitlines(keepends=True)
    return "".join(difflib.unified_diff(old, new, f"{target} (on disk)", f"{target} (from the spec)"))
