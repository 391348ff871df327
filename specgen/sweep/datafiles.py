"""The data a study's trials read, as the study records it, and what differs when a sweep reads other data.

A study compares trials, and a trial's metric depends on its data as much as on its spec: the same `npz:` path
rewritten with other rows trains and evaluates something else, yet the spec (which names the path) is the same. So
the study records each file that data.train and data.eval read (provenance.data_fingerprint, the record `specgen
train` keeps of a run's data: each file's size and sha256), with its path relative to the spec's folder (the same
files, reached from another working folder or machine, are the same data), and a sweep on other bytes is refused
naming the file. The record is a study user attribute of its own (ATTR), apart from the spec's (membership.py), so that
each stays under a storage's text column; past MAX_TEXT characters of file list, only each stage's digest is kept.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

from specgen.diagnostics import SpecError
from specgen.kinds import sources
from specgen.paths import shown
from specgen.spec.load import LoadedSpec

ATTR = "specgen_data"  # the study's user attribute holding the record
MAX_TEXT = 50_000  # characters of the file lists (as plan.py's MAX_KEYS_TEXT); past it, each stage's digest only
STAGES = ("train", "eval")


def fingerprint(loaded: LoadedSpec) -> dict[str, Any]:
    """Stage -> {declared, sha256 (over each file's size and sha256, names left out), files: [[path, bytes,
    sha256], ...] or None when the lists are too long to store}; a file that cannot be read is one positioned line."""
    from specgen.runtime import provenance

    try:
        found = provenance.data_fingerprint(loaded)
    except OSError as exc:
        raise _unreadable(loaded, exc) from None
    record = {stage: {"declared": found[stage]["declared"], "sha256": found[stage]["content_sha256"],
                      "files": [[_from_spec(loaded, f["file"]), f["bytes"], f["sha256"]] for f in found[stage]["list"]]
                      if "list" in found[stage] else None} for stage in STAGES if stage in found}
    if len(json.dumps(record)) > MAX_TEXT:
        record = {stage: {**entry, "files": None} for stage, entry in record.items()}
    return record


def _from_spec(loaded: LoadedSpec, file: str) -> str:
    """A file as provenance names it (from the working folder) named from the spec's folder instead."""
    return Path(os.path.relpath(os.path.abspath(file), os.path.abspath(loaded.folder))).as_posix()


def _unreadable(loaded: LoadedSpec, exc: OSError) -> SpecError:
    """Which stage's file could not be hashed, said at that stage's path in the spec as `specgen train` says it."""
    failed = Path(os.path.abspath(os.fsdecode(exc.filename))) if exc.filename is not None else None
    stage, key = next(((s, k) for s, k in _sources(loaded) if failed is None or any(
        failed == p or failed.is_relative_to(p) for p in _declared(loaded, s, k))), _sources(loaded)[0])
    declared = _declared(loaded, stage, key)
    code = exc.errno or 0
    if code == errno.ENOENT and failed in declared:  # the path the spec names
        what = "no such file"
    else:
        reason = {errno.ENOENT: "no such file", errno.EISDIR: "it is a folder"}.get(code, (exc.strerror or str(exc)))
        what = f"cannot read {shown(failed) if failed is not None else 'a file'}: {reason[:1].lower() + reason[1:]}"
    given = ", ".join(shown(p) for p in declared)
    expects = sources.kind_of(getattr(loaded.spec.data, stage)).expects
    return SpecError([loaded.diagnostic(("data", stage, key), (
        f"data.{stage} ({given}): {what}; expected {expects} relative to the spec's folder, its files readable (a "
        "sweep records each data file's size and sha256 before its first trial)"))])


def _sources(loaded: LoadedSpec) -> list[tuple[str, str]]:
    data = loaded.spec.data
    return [(stage, key_of(loaded, stage)) for stage in STAGES if data is not None and getattr(data, stage, None)]


def key_of(loaded: LoadedSpec, stage: str) -> str:
    """The key of data.STAGE that names its files (npz, csv, tfrecord, images), where a refusal points."""
    return sources.kind_of(getattr(loaded.spec.data, stage)).name


def _declared(loaded: LoadedSpec, stage: str, key: str) -> list[Path]:
    given = getattr(getattr(loaded.spec.data, stage), key)
    return [Path(os.path.abspath(loaded.folder / name)) for name in (given if isinstance(given, list) else [given])]


def difference(stored: dict[str, Any], mine: dict[str, Any]) -> tuple[str, str] | None:
    """(the first stage whose files differ, what differs, naming the file), or None when the data are the same."""
    found: list[tuple[str, str, str]] = []  # (stage, file, how)
    for stage in STAGES:
        old, new = stored.get(stage), mine.get(stage)
        if not isinstance(old, dict) or not isinstance(new, dict) or old.get("sha256") == new.get("sha256"):
            continue  # a stage only one side has: their specs differ, which membership.py says first
        found += _files_differ(stage, old, new)
    if not found:
        return None
    stage, _, how = found[0]
    others = [f"data.{s}'s {f}" for s, f, _ in found[1:]]
    more = f" (and {len(others)} more: {', '.join(others[:3])}{', ...' if len(others) > 3 else ''})" if others else ""
    return stage, how + more


def _files_differ(stage: str, old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Each file of one stage that differs, paired by its path from the spec's folder."""
    if not isinstance(old.get("files"), list) or not isinstance(new.get("files"), list):
        what = f"data.{stage} ({_text(new.get('declared'))})"
        return [(stage, what, f"{what} holds other bytes here (sha256 over its files' sizes and digests "
                 f"{str(new.get('sha256'))[:12]}) than in the study's ({str(old.get('sha256'))[:12]})")]
    before = {str(f[0]): f for f in old["files"]}
    after = {str(f[0]): f for f in new["files"]}
    found = []
    for name in [*after, *(n for n in before if n not in after)]:
        if name not in before:
            found.append((stage, name, f"data.{stage} reads {name} here, which the study's trials did not read"))
        elif name not in after:
            found.append((stage, name, f"data.{stage}'s {name}, which the study's trials read, is not read here"))
        elif before[name][1:] != after[name][1:]:
            found.append((stage, name, f"data.{stage}'s {name} is {_file(after[name])} here, {_file(before[name])} "
                          "in the study's"))
    return found


def _file(entry: list[Any]) -> str:
    return f"{entry[1]:,} bytes (sha256 {str(entry[2])[:12]})" if isinstance(entry[1], int) else f"sha256 {entry[2]}"


def _text(declared: Any) -> str:
    return ", ".join(map(str, declared)) if isinstance(declared, list) else str(declared)
