"""The two sides of `specgen diff`: a spec file, `REV:PATH` read through git, or a run folder's recorded spec.

`REV:PATH` never touches the work tree: the spec files (`*.yaml`, `*.yml`) of the repository at REV are read with
`git cat-file --batch` into a temporary folder (with a `.git` marker, so `extends` stays confined to it; links
named like spec files are recreated as links, so `extends` through one is judged as in the work tree; nothing is
written outside that folder, whatever a crafted tree holds: review/tree_copy.py), and the spec is loaded
from there, its files named `REV:PATH` in messages (spec/compose.py's `revision_files`). PATH is as
git reads it: from the repository's top, or from the working directory when it starts with `./` or `../`. A run
folder holds `spec.resolved.yaml`, written by `specgen train` at the start of
a run (runtime/provenance.py): the merged spec with every override and default, loaded like any spec.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from specgen.diagnostics import Diagnostic, SpecError, quoted
from specgen.errors import AbstractSpec
from specgen.ir.model import ModelIR
from specgen.ir.resolve import build_ir
from specgen.review.tree_copy import Copy, check_names
from specgen.spec.compose import load_composed, revision_files
from specgen.spec.load import LoadedSpec, load_spec

RESOLVED = "spec.resolved.yaml"  # a run folder's record of the spec it trained (runtime/provenance.py)
RECORD = "provenance.json"  # and of its data, seed, versions and machine
MAX_GIT_FILES = 20_000  # spec files read from one revision
MAX_GIT_BYTES = 256 << 20  # their bytes together
LINK_MODE = b"120000"  # a symbolic link in a git tree: its blob holds the target


@dataclass(frozen=True)
class Side:
    """One side of a diff: how the user named it, the loaded spec and its IR."""

    label: str
    loaded: LoadedSpec
    ir: ModelIR
    record: dict[str, Any] | None = None  # a run folder's provenance.json: data, seed, versions, machine


def _refused(label: str, message: str) -> SpecError:
    return SpecError([Diagnostic(label, None, message)])


def side_argument(text: str) -> str:
    """argparse type of OLD and NEW: an empty argument (an unset shell variable) is a usage error, not the
    working directory read as a run folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"received {text!r}; expected a spec file, REV:PATH (read through git) or a "
                                         "run folder")
    return text


@contextmanager
def open_side(text: str) -> Iterator[Side]:
    """The side `text` names, loaded; a REV:PATH side's temporary folder lives until the block ends."""
    path = Path(text)
    if path.is_dir():
        side = _load(text, _run_spec(path, text))
        yield replace(side, record=_run_record(path, text))
        return
    rev, sep, inner = text.partition(":")
    if path.exists() or not sep or not rev or len(rev) == 1:  # `C:\\x.yaml` is a Windows path, not a revision
        yield _load(text, path)
        return
    with tempfile.TemporaryDirectory(prefix="specgen-diff-") as folder, revision_files(Path(folder), rev):
        yield _load(text, _checkout_specs(rev, inner, Path(folder), text), display=text)


def _load(label: str, path: Path, display: str | None = None) -> Side:
    try:
        loaded = load_spec(path, display)
    except AbstractSpec:  # positioned at its `abstract: true`, as any refusal of a side
        shown = display or str(path)
        data, source = load_composed(path, shown)
        raise SpecError([Diagnostic(shown, source.locate(("abstract",), data, key=True),
                                    "abstract: true: the spec exists only to be extended by other specs; diff a "
                                    "spec that extends it")]) from None
    return Side(label, loaded, build_ir(loaded))


def _run_spec(folder: Path, label: str) -> Path:
    spec = folder / RESOLVED
    if not os.path.lexists(spec):  # one that is there but no regular file is refused by the loader, as such
        raise _refused(label, f"the folder has no {RESOLVED}; expected a spec file, REV:PATH, or a run folder written "
                              "by `specgen train` (runs record the spec they trained since specgen 0.9)")
    return spec


def _run_record(folder: Path, label: str) -> dict[str, Any] | None:
    """The run's provenance.json, or None when it has none; a damaged one is one line, never a traceback."""
    path = folder / RECORD
    if not path.is_file():
        return None
    try:
        found = json.loads(path.read_bytes()[: 64 << 20])
    except (OSError, ValueError) as exc:
        raise _refused(label, f"{RECORD} is not readable JSON ({exc}); it is written by `specgen train`") from None
    if not isinstance(found, dict):
        raise _refused(label, f"{RECORD} holds {type(found).__name__}; expected a JSON object")
    return found


def _git(args: list[str], label: str, data: bytes | None = None, silent: str = "") -> bytes:
    """git's output; a failure is one line with git's last words, or `silent` where git says nothing (--quiet)."""
    if shutil.which("git") is None:
        raise _refused(label, "reading REV:PATH needs git, which is not on PATH")
    result = subprocess.run(["git", *args], input=data, capture_output=True, timeout=120, check=False)
    if result.returncode != 0:
        reason = result.stderr.decode(errors="replace").strip().splitlines()
        if not reason and silent:
            raise _refused(label, silent)
        raise _refused(label, f"git {args[0]} failed: {reason[-1] if reason else 'exit ' + str(result.returncode)}")
    return result.stdout


def _checkout_specs(rev: str, inner: str, into: Path, label: str) -> Path:
    """Write REV's spec files under `into` and return where PATH's file landed."""
    if rev.startswith("-"):
        raise _refused(label, f"{quoted(rev)} is not a revision")
    unknown = f"unknown revision {quoted(rev)}; expected a commit, branch or tag of this repository"
    commit = _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"], label, None,
                  unknown).decode().strip()
    prefix = _git(["rev-parse", "--show-prefix"], label).decode().strip()
    relative = os.path.normpath(prefix + inner) if inner.startswith(("./", "../")) else os.path.normpath(inner)
    if relative.startswith(".."):
        raise _refused(label, f"{quoted(inner)} is outside the repository")
    blobs, links, twice = _spec_blobs(commit, label)
    if relative not in blobs:  # the spec itself is a regular file: a link is read only as a base, which compose checks
        raise _refused(label, _not_a_spec(commit, rev, relative, links, label))
    if len(blobs) > MAX_GIT_FILES:
        raise _refused(label, f"{rev} holds {len(blobs)} spec files; at most {MAX_GIT_FILES} are read")
    if sum(size for _, size in [*blobs.values(), *links.values()]) > MAX_GIT_BYTES:  # refused before a byte is read
        raise _refused(label, f"the spec files of {commit[:12]} hold more than {MAX_GIT_BYTES} bytes")
    at = f"{rev} ({commit[:12]})"
    check_names([*twice, *blobs, *links], set(twice), links, at, label)
    (into / ".git").mkdir()  # the repository's top: `extends` stays inside it. First, so no entry can take its name
    copy = Copy(into, at, label)
    _write_blobs(commit, {name: oid for name, (oid, _) in blobs.items()}, copy, label)
    _write_links(commit, {name: oid for name, (oid, _) in links.items()}, copy, label)
    return into / relative


def _not_a_spec(commit: str, rev: str, relative: str, links: dict[str, tuple[str, int]], label: str) -> str:
    """Why REV:PATH names no spec file of the revision, by what PATH is there: nothing, a link, a folder, a
    submodule, or a file without a spec's suffix (one `ls-tree` more, on this error only)."""
    at = f"{rev} ({commit[:12]})"
    if relative in links:
        return _link_refusal(commit, rev, relative, links[relative], label)
    mode = None
    for record in _git(["ls-tree", "--full-tree", "-r", "-t", "-z", commit], label).split(b"\0"):
        meta, _, name = record.partition(b"\t")
        if os.fsdecode(name) == relative and meta:
            mode = meta.split()[0]
            break
    if mode is None:
        return f"{quoted(relative)} does not exist in {at}"
    what = {b"040000": "a folder", b"160000": "a submodule", LINK_MODE: "a symbolic link"}.get(mode)
    if what is not None:
        return f"{quoted(relative)} is {what} in {at}, not a spec file (.yaml, .yml)"
    return f"{quoted(relative)} is not a spec file (.yaml, .yml) in {at}"


def _link_refusal(commit: str, rev: str, relative: str, link: tuple[str, int], label: str) -> str:
    """A spec named through a link in the revision is refused (only a base may be a link, which compose judges as
    in the work tree): the line names its target, and the REV:PATH to write instead when it is in the repository."""
    oid, size = link
    target = os.fsdecode(_git(["cat-file", "blob", oid], label)) if size <= 4096 else ""
    joined = os.path.normpath(os.path.join(os.path.dirname(relative), target))
    outside = os.path.isabs(target) or joined.startswith("..")
    where = "" if not target else f", to {target}" + (", outside the repository" if outside else "")
    advice = f": name the file it links to, {rev}:{joined}" if target and not outside else ""
    return f"{quoted(relative)} is a symbolic link in {rev} ({commit[:12]}{where}); REV:PATH reads a regular " \
           f"spec file of the revision{advice}"


def _spec_blobs(commit: str, label: str) -> tuple[dict[str, tuple[str, int]], dict[str, tuple[str, int]], list[str]]:
    """Each spec file of `commit` (a regular file: not a submodule) -> its blob's object id and size, each link
    named like one -> the same for the blob holding its target, and each name listed twice (a crafted tree:
    tree_copy.check_names refuses it). From `ls-tree -l -z`, so a name may hold any byte git allows, a newline too."""
    found: dict[str, tuple[str, int]] = {}
    links: dict[str, tuple[str, int]] = {}
    twice: list[str] = []
    for record in _git(["ls-tree", "--full-tree", "-r", "-l", "-z", commit], label).split(b"\0"):
        meta, _, name = record.partition(b"\t")
        fields = meta.split()
        path = os.fsdecode(name)
        if len(fields) != 4 or not path.lower().endswith((".yaml", ".yml")) or not fields[3].isdigit():
            continue
        kept = found if fields[0] in (b"100644", b"100755") else links if fields[0] == LINK_MODE else None
        if path in found or path in links:
            twice.append(path)
        elif kept is found or (kept is links and len(links) < MAX_GIT_FILES):
            kept[path] = (fields[2].decode(), int(fields[3]))
    return found, links, twice


def _write_links(commit: str, links: dict[str, str], copy: Copy, label: str) -> None:
    """Each link as the revision has it (its target as written), so that `extends` through a link is judged as in
    the work tree: read when it leads to a file of the revision, refused as outside the repository otherwise."""
    if not links:
        return
    out = _git(["cat-file", "--batch"], label, "".join(f"{oid}\n" for oid in links.values()).encode())
    at = 0
    for name, oid in links.items():
        header_end = out.index(b"\n", at)
        fields = out[at:header_end].decode(errors="replace").split()
        at = header_end + 1
        if len(fields) != 3 or fields[:2] != [oid, "blob"]:
            raise _refused(label, f"git cat-file answered {' '.join(fields)!r} for {quoted(name)} ({oid})")
        target = out[at:at + int(fields[2])]
        at += int(fields[2]) + 1
        if b"\0" in target or not target:  # git never writes such a link; nothing to recreate
            continue
        copy.link(name, os.fsdecode(target))


def _write_blobs(commit: str, blobs: dict[str, str], copy: Copy, label: str) -> None:
    """Every named blob, read in one `git cat-file --batch` (one process, not one per file). Requests are object
    ids, one a line, never names: a name holding a newline would split its request and shift every later file."""
    out = _git(["cat-file", "--batch"], label, "".join(f"{oid}\n" for oid in blobs.values()).encode())
    if len(out) > MAX_GIT_BYTES + 100 * len(blobs):
        raise _refused(label, f"the spec files of {commit[:12]} hold more than {MAX_GIT_BYTES} bytes")
    at = 0
    for name, oid in blobs.items():
        header_end = out.index(b"\n", at)
        header = out[at:header_end].decode(errors="replace")
        at = header_end + 1
        fields = header.split()
        if len(fields) != 3 or fields[:2] != [oid, "blob"]:  # the answer to another request: never guess
            raise _refused(label, f"git cat-file answered {header!r} for {quoted(name)} ({oid})")
        size = int(fields[2])
        copy.file(name, out[at:at + size])
        at += size + 1
