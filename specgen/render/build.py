"""`specgen build`: render every spec in memory, then write atomically or diff (`--check`)."""

from __future__ import annotations

import difflib
import functools
import multiprocessing
import os
import re
import signal
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeAlias

from specgen.atomic import STALE_AFTER, TEMP_NAME, UnsafePathError, kind, pid_alive, read_regular, write_atomic, writing
from specgen.diagnostics import Diagnostic, SpecError
from specgen.errors import AbstractSpec, SpecgenError
from specgen.ir.resolve import ir_from_file
from specgen.paths import shown
from specgen.progress import delayed
from specgen.render.build_lock import resolved_root
from specgen.render.files import load_templates, render_files
from specgen.render.pool import forked_map
from specgen.render.stale_folders import built, not_ours
from specgen.runtime.interrupt import Interrupts

BINARY_SUFFIXES = (".onnx",)


@dataclass(frozen=True)
class Output:
    """The files one spec renders to, relative to the output folder."""

    spec: Path
    folder: str  # the spec name
    files: dict[str, bytes]


Rendered: TypeAlias = Output | list[Diagnostic] | None  # one spec's files, its diagnostics, or None (abstract)

PARALLEL_FROM = 8  # specs; below this a worker pool costs more than it saves


def _render_many(paths: list[Path], pictures: bool = False) -> list[Rendered]:
    """Render in worker processes forked after imports (one per usable CPU), results in input order.

    Writing stays in this process: measured, writing from the workers as well gained nothing
    (sending the rendered bytes back to them costs what the parallel writes save).
    """
    workers = min(usable_cpus(), len(paths))
    if workers < 2 or len(paths) < PARALLEL_FROM or "fork" not in multiprocessing.get_all_start_methods():
        return [render_one(p, pictures) for p in delayed(paths, "build")]
    load_templates()  # once here rather than once per worker
    # Ctrl-C reaches the whole process group. The workers ignore it (pool.py); this process only notes it, so no
    # KeyboardInterrupt lands inside the pool's code, stops the workers and raises it then: cli prints the one line.
    # SIGTERM keeps its default (the process group's, from `timeout`, ends the workers as well).
    results: list[Rendered] = [None] * len(paths)
    with Interrupts((signal.SIGINT,)) as interrupts, \
            closing(forked_map(functools.partial(render_one, pictures=pictures), paths, workers,
                               lambda: interrupts.received)) as done:
        for index, result in delayed(done, "build", total=len(paths)):  # the bar counts specs as they come back
            results[index] = result
    interrupts.check()  # the workers are gone: a Ctrl-C that came is raised here
    return results


def usable_cpus() -> int:
    """The CPUs this process may run on: under `taskset` or a container's cpuset that is fewer than the machine
    has (os.cpu_count()), and workers beyond them would only take turns on the same CPUs."""
    if hasattr(os, "sched_getaffinity"):  # Linux; elsewhere the machine's count is the best figure at hand
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def render_one(path: Path, pictures: bool = False) -> Rendered:
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
    """One spec's output folder as found: each generated file's bytes (None: missing), stale files (specgen's, no
    longer generated), the files specgen did not write (`foreign`, never deleted) and the files under a generated
    name that specgen did not write and would overwrite (`theirs`: name -> what it holds; never overwritten)."""

    shown: Path  # <root>/<name> as the user spelled the root, for messages
    real: str  # the same folder on the resolved root, where specgen reads and writes
    current: dict[str, bytes | None]
    stale: list[str]
    temporary: list[str] = field(default_factory=list)  # left by a build killed between write and rename
    foreign: list[str] = field(default_factory=list)
    theirs: dict[str, str] = field(default_factory=dict)

    def refusal(self, name: str) -> str:
        """`<file> is not build's own: <what it holds>`, the start of `build`'s error line and `--check`'s."""
        return f"{shown(self.shown / name)} is not build's own: {self.theirs[name]}"


def _survey(out: Output, root: Path, real_root: str) -> _OnDisk:
    """Read one spec's output folder without following any link below the root.

    The folder must be a real folder; a link, device or pipe in it, or a folder where a
    generated file goes, raises UnsafePathError naming it. Subfolders and dot-names are not
    looked at (`_not_looked_at`). A file the spec no longer generates is stale only when it
    carries specgen's mark (stale_folders.built: the rule for whole folders); any other file is
    foreign: named, never deleted. A file under a generated name that would change is checked by the
    same rule (stale_folders.not_ours): one without the mark is `theirs`, never overwritten. Paths are
    strings here: this runs for every file of every spec, and pathlib objects cost more than the
    system calls.
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
            if not ours and _not_looked_at(entry, out):
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
            elif built(real, entry.name, out.folder):
                disk.stale.append(entry.name)
            else:
                disk.foreign.append(entry.name)
    _claim(out, disk)
    return disk


def _claim(out: Output, disk: _OnDisk) -> None:
    """Fill `disk.theirs`: each file `build` would overwrite (found, and not the bytes it renders) that it did not
    write. Only changed files are tested: an unchanged one is never written, and most files of a build are."""
    for name, content in out.files.items():
        old = disk.current[name]
        if old is not None and old != content and (why := not_ours(disk.real, name, out.folder, old)) is not None:
            disk.theirs[name] = why


def _not_looked_at(entry: os.DirEntry[str], out: Output) -> bool:
    """Whether an entry the spec does not generate is outside `build`'s business: a subfolder (read from the
    listing, no system call), or a name starting with "." but a temporary file of `build`'s own (atomic.staged).

    Tools make both beside the files without asking: Python's __pycache__, Jupyter's .ipynb_checkpoints/,
    TensorBoard's logs/, macOS's .DS_Store, an editor's swap file, a .gitignore. `build` writes neither (the
    folder rule, render/stale_folders.py, skips dot-folders too), and `--check` failing on them would stay red
    with no specgen command to fix it. Other files are named (`foreign`): a README.md beside generated code is
    a choice the user can undo."""
    if entry.is_dir(follow_symlinks=False):
        return True
    return entry.name.startswith(".") and _staged(entry.name, out) is None


def _staged(name: str, out: Output) -> re.Match[str] | None:
    """`name` parsed, when it is how atomic.staged names a temporary file of one of `out`'s files."""
    found = TEMP_NAME.fullmatch(name)
    return found if found is not None and found["target"] in out.files else None


def _temporary(name: str, modified: float, out: Output) -> bool | None:
    """None unless `name` is the temporary file of one of `out`'s files (atomic.staged); then whether it was left
    behind: its writer's process is gone (kill -9 between the write and the rename), or it is older than any write
    of a generated file takes (its pid since reused). Reported and removed as what it is, not as a file the spec
    "no longer generates". Either sign is enough here, unlike atomic.remove_stale_temps' rule (a dead pid and
    old), which guards a folder other machines write at once: an output folder is a checkout's, written by one
    build at a time, and a build killed a second ago is what `--check` should name."""
    found = _staged(name, out)  # a write in progress
    if found is None:
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
    kept: list[str] = field(default_factory=list)  # files not written by specgen, never deleted (shown)

    def lines(self) -> list[str]:
        return ([f"wrote {shown(p)}" for p in self.written]
                + [f"removed {shown(p)} (no longer generated)" for p in self.removed]
                + [f"removed {shown(p)} (a temporary file an interrupted build left)" for p in self.temporary])

    def notes(self) -> list[str]:
        """For stderr, as `build` names a folder it keeps (commands/build.py): the files it left for the user."""
        return [f"specgen build: kept {kept} ({NOT_OURS})" for kept in self.kept]


NOT_OURS = "not written by specgen: remove it by hand"


def write(outputs: list[Output], root: Path, changes: Changes) -> None:
    """Write every changed file through a temporary file and a rename; remove files no longer generated and the
    temporary files of an interrupted build; record each in `changes`.

    Runs only after every spec rendered and passed its checks (render_all), so a mistake in
    any spec writes nothing; likewise every output folder is surveyed (no links, nothing but
    regular files where files go, no file of the user's under a name it would change: `_claim`)
    before the first write, so an unsafe path or a file it did not write writes nothing.
    The root is resolved once; everything below it is read and written on the resolved path.
    """
    with writing(root):
        real_root = resolved_root(root)
    found = [_survey(out, root, real_root) for out in outputs]
    _refuse_theirs(found)
    for out, disk in zip(outputs, found, strict=True):
        _make_folder(disk)
        for name in disk.temporary:
            if _unlink(disk, name):
                changes.temporary.append(disk.shown / name)
        for name, content in out.files.items():
            if disk.current[name] == content:
                continue
            with writing(disk.shown / name):
                write_atomic(Path(disk.real, name), content, fsync=False)  # why no fsync: NO_FSYNC
            changes.written.append(disk.shown / name)
        for name in disk.stale:
            if _unlink(disk, name):
                changes.removed.append(disk.shown / name)
        changes.kept += [shown(disk.shown / name) for name in disk.foreign]


class NotBuildsOwn(SpecgenError):
    """Files `build` would overwrite that it did not write (a trained model.onnx, a hand-written model.py): one line
    each; raised before the first write, so nothing changes in any spec's folder."""


OVERWRITE_REMEDY = "specgen build never overwrites a file it did not write: move it elsewhere and run again"


def _refuse_theirs(found: list[_OnDisk]) -> None:
    lines = [f"{disk.refusal(name)}; {OVERWRITE_REMEDY}" for disk in found for name in disk.theirs]
    if lines:
        raise NotBuildsOwn("\n".join(lines))


# Why `build` writes without fsync (docs/security.md section 4). What it must survive is the process ending mid-write:
# kill -9, Ctrl-C, an OOM kill, a full disk. The temporary file and the rename cover all of these without fsync:
# every generated file is the old one or the new one, and none is half-written. A power loss (or a kernel crash)
# is the one case fsync adds: on file systems that do not write a renamed file's data before the rename (XFS, ext4
# mounted noauto_da_alloc, some network file systems) a file can come back empty. Generated files are derived data,
# so that costs nothing lasting: `build` compares bytes and rewrites it, and `build --check` (CI, on a fresh
# checkout) names it as drifted. An fsync per file would cost every save-hook build a disk flush per changed file
# (tens of milliseconds each on a laptop's disk) to guard files the next build recreates anyway.
NO_FSYNC = "generated files are rebuilt from the specs: the rename keeps them whole, the next build repairs the rest"


def _unlink(disk: _OnDisk, name: str) -> bool:
    """Remove a regular file the survey found (unlink never follows a link); False if it is gone already."""
    with writing(disk.shown / name):
        try:
            os.unlink(os.path.join(disk.real, name))
        except FileNotFoundError:  # a temporary file another build's write_atomic removed since the survey
            return False
    return True


def check(outputs: list[Output], root: Path, extras: list[str] | None = None,
          blocked: list[str] | None = None) -> list[str]:
    """A unified diff (or a one-line note) for every drifted, missing, stale, foreign or unsafe file; `extras` gets
    the foreign files' paths, which `specgen build` keeps, and `blocked` the paths of the files it will not
    overwrite (`_OnDisk.theirs`): the summary names their remedies apart."""
    try:
        real_root = resolved_root(root)
    except UnsafePathError as exc:
        return [f"unsafe: {exc}"]
    reports = []
    for out in outputs:
        try:
            disk = _survey(out, root, real_root)
        except UnsafePathError as exc:
            reports.append(f"unsafe: {exc}")
            continue
        reports += _compared(out, disk, root)
        if extras is not None:
            extras += [shown(disk.shown / name) for name in disk.foreign]
        if blocked is not None:
            blocked += [shown(disk.shown / name) for name in disk.theirs]
    return reports


def _compared(out: Output, disk: _OnDisk, root: Path) -> list[str]:
    """`check`'s lines for one spec's folder."""
    reports = []
    for name, content in out.files.items():
        target, old = disk.shown / name, disk.current[name]
        if name in disk.theirs:  # not drift that `specgen build` fixes: it stops rather than destroy the file
            reports.append(f"foreign: {disk.refusal(name)}; `specgen build` will not overwrite it: move it elsewhere")
        elif old is None:
            reports.append(f"missing: {target} (run `specgen build`)")
        elif old != content and target.suffix in BINARY_SUFFIXES:
            reports.append(_binary(target, out, disk))
        elif old != content:
            reports.append(_line_endings(target, old, content, root) or _diff(target, old, content))
    reports += [f"stale: {disk.shown / name} is no longer generated" for name in disk.stale]
    reports += [f"leftover: {disk.shown / name} is a temporary file an interrupted build left (the next "
                "`specgen build` removes it)" for name in disk.temporary]
    # kept by `build` too: only the user knows whether it matters (render/stale_folders.py's rule for folders)
    reports += [f"extra: {disk.shown / name} ({NOT_OURS}; `specgen build` keeps it)" for name in disk.foreign]
    return reports


def _binary(target: Path, out: Output, disk: _OnDisk) -> str:
    """One line for a drifted binary file, saying what is true of the text file it is built from (model.onnx from
    model.onnx.txt): changed too (its lines come first: out.files holds it before), missing too, or up to date."""
    text = target.name + ".txt"
    old = disk.current.get(text, b"")
    if text not in out.files:
        state = "run `specgen build`"
    elif old is None:
        state = f"its text form {text} is missing too; run `specgen build`"
    elif old != out.files[text]:
        state = f"its text form {text} differs too, as shown above; run `specgen build`"
    else:
        state = f"its text form {text} is up to date: the binary itself was edited or damaged; run `specgen build`"
    return f"drifted: {target} (binary; {state})"


def _line_endings(target: Path, old: bytes, content: bytes, root: Path) -> str | None:
    """One line when only CRLF vs LF differs (git's core.autocrlf on Windows): a whole-file diff of lines that look
    the same on screen would hide the cause. Generated files are written with LF on every system."""
    if b"\r\n" not in old or old.replace(b"\r\n", b"\n") != content:
        return None
    return (f"drifted: {target} (line endings: CRLF on disk, LF expected; add "
            f"`{root.as_posix().rstrip('/')}/** text eol=lf` to .gitattributes)")


def _diff(target: Path, old_bytes: bytes, content: bytes) -> str:
    old = old_bytes.decode("utf-8", errors="replace").splitlines(keepends=True)
    new = content.decode().splitlines(keepends=True)
    return "".join(difflib.unified_diff(old, new, f"{target} (on disk)", f"{target} (from the spec)"))
