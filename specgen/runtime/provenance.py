"""What made a run: written into its folder each time `specgen train` starts it, read back by `specgen diff RUN RUN`.

- `spec.resolved.yaml`: the merged spec (every file it `extends`, then the `--set` overrides in effect, then the
  schema's defaults) with the origin of each value as a comment (spec/provenance.py). It loads like any spec,
  so `specgen diff` compares two runs' specs section by section.
- `provenance.json`: the data it read (each file's size and sha256; a folder or a glob of shards as the sorted
  list of its files), the seed, the versions of Python and the packages that compute, and the machine (CPU model
  and instruction sets that change float results, GPUs). Folders of more than MAX_LISTED files keep only their
  count, bytes and one digest over the sorted (name, size, sha256) lines, so the record stays small.
  Its top-level keys describe the run's latest start (what `specgen diff` compares, beside spec.resolved.yaml,
  which is the latest start's too); `starts` keeps every start of the run, oldest first, each with the step it
  started at (0 for a new run), so a run whose data changed mid-way still shows what it trained on first: a
  resume appends to it, a new run (or --fresh, which moved the old record aside) begins it again. The first
  start is recorded whole, each later one as its step and the keys that changed since the start before it, so a
  run resumed a hundred times with nothing changed keeps a record of a few KB (each start's whole record, with
  its data list and overrides, would grow it by that much every time, on the disk a full-disk run is short of).
- A resume whose training data differs from the run's previous start (another file, or the same file with other
  bytes) prints a `note:` naming the file: the checkpoint's data position (the shuffle buffer holds examples of
  the old data) and the run's earlier steps came from the old data. It is a note, not a refusal: replacing a
  data file with a cleaned or extended one is a normal thing to do between two segments of a run.

Hashing reads every byte of the data once per start (sha256 runs at about 1 GB/s a core): the price of knowing
whether two runs read the same data. Both files are written atomically; a failure to write them stops nothing
that has been trained (they are written before the first step).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import platform
import stat
from importlib import metadata
from pathlib import Path
from typing import Any

from specgen.atomic import write_atomic
from specgen.kinds import sources
from specgen.paths import shown
from specgen.spec.load import LoadedSpec

RESOLVED, RECORD = "spec.resolved.yaml", "provenance.json"
MAX_LISTED = 1000  # files listed one by one for a folder or glob; above it, a digest of the list
PACKAGES = ("specgen", "tensorflow", "keras", "numpy", "onnx", "onnxruntime", "onnxruntime-gpu", "protobuf")


def record(folder: Path, loaded: LoadedSpec, overrides: list[str], devices: list[str],
           resumed_at: int | None = None) -> list[str]:
    """Write both files for a start (`resumed_at`: the step a resume starts at; None for a new run); the notes."""
    from specgen.spec.provenance import load_resolved, resolved_yaml

    _, tree = load_resolved(loaded.path, overrides)
    header = (f"# The spec this run trained: {shown(loaded.path)} with every base it extends, the overrides below, "
              "and the defaults; each value's origin is the comment after it.\n")
    data = data_fingerprint(loaded)
    facts = {"spec": shown(loaded.path), "overrides": overrides,
             "seed": loaded.spec.train.seed if loaded.spec.train else None,
             "data": data, "versions": versions(), "machine": machine(devices)}
    previous, starts, notes = _earlier(folder / RECORD) if resumed_at is not None else ({}, [], [])
    if starts:
        notes += _data_notes(previous.get("data"), data, folder / RECORD)
        starts.append({"step": resumed_at, **{k: v for k, v in facts.items() if previous.get(k) != v}})
    else:
        starts.append({"step": resumed_at or 0, **facts})
    write_atomic(folder / RESOLVED, header + resolved_yaml(tree))
    write_atomic(folder / RECORD, json.dumps({**facts, "starts": starts}, indent=2, sort_keys=True) + "\n")
    return notes


def _earlier(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    """The previous start's record (provenance.json's top level), the starts it keeps (a record written before
    `starts` existed is its one start, at an unknown step) and notes; a damaged or missing record begins the
    history again, with a note when it was there but did not read."""
    try:
        found = json.loads(path.read_text())
    except FileNotFoundError:
        return {}, [], []
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        found = None
    if not isinstance(found, dict):
        return {}, [], [f"{shown(path)} did not read as a JSON object: its history of starts begins again here"]
    previous = {k: v for k, v in found.items() if k != "starts"}
    starts = found.get("starts")
    if isinstance(starts, list) and starts and all(isinstance(s, dict) for s in starts):
        return previous, list(starts), []
    return previous, [{"step": None, **previous}], []


def _entries(stage: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """A stage's fingerprint as (file, bytes, sha256) in its sorted order; a long list as its one digest."""
    if "sha256_of_list" in stage:
        return [(f"{stage.get('files')} files of {stage.get('declared')}", stage.get("bytes"), stage["sha256_of_list"])]
    return [(str(f.get("file")), f.get("bytes"), f.get("sha256")) for f in stage.get("list") or [] if isinstance(f, dict)]


def _data_notes(before: Any, now: dict[str, Any], path: Path) -> list[str]:
    """One note when the training files' bytes differ from the previous start's, naming the first that differs.

    Files are paired by position, not by the name recorded: names are recorded as printed from the working folder
    of each start, so a run started from another folder (or a copied run folder) names the same file otherwise."""
    old_stage = before.get("train") if isinstance(before, dict) else None
    new_stage = now.get("train")
    if not isinstance(old_stage, dict) or not isinstance(new_stage, dict):
        return []
    old, new = _entries(old_stage), _entries(new_stage)
    if [entry[1:] for entry in old] == [entry[1:] for entry in new]:
        return []
    if old_stage.get("declared") != new_stage.get("declared"):
        what = f"it reads {new_stage.get('declared')} where that start read {old_stage.get('declared')}"
    elif len(old) != len(new):
        what = f"{new_stage.get('declared')} holds {len(new)} files where it held {len(old)}"
    else:
        differ = [(a, b) for a, b in zip(old, new, strict=True) if a[1:] != b[1:]]
        (_, _, was), (name, _, now_sha) = differ[0]
        what = f"{name} changed (sha256 {str(was)[:12]} -> {str(now_sha)[:12]})" + (
            f" ({len(differ)} files differ)" if len(differ) > 1 else "")
    return [f"the training data differs from the run's previous start ({shown(path)}): {what}; the checkpoint's "
            "data position (its shuffle buffer) and the steps before it came from the old data"]


def data_fingerprint(loaded: LoadedSpec) -> dict[str, Any]:
    """Stage -> the files its source reads, each with size and sha256 (or the digest of a long list)."""
    data = loaded.spec.data
    found = {}
    for stage in ("train", "eval"):
        source = getattr(data, stage, None) if data is not None else None
        if source is not None:
            key = sources.kind_of(source).name  # the key that names the data: a file, a folder or globs
            found[stage] = _files(loaded.folder, key, getattr(source, key))
    return found


def _files(folder: Path, key: str, declared: str | list[str]) -> dict[str, Any]:
    names = declared if isinstance(declared, list) else [declared]
    paths: list[Path] = []
    for name in names:
        full = folder / name
        if full.is_dir():
            paths += _walk(full)
        elif glob.has_magic(name):
            paths += [Path(p) for p in sorted(glob.glob(str(full)))]
        else:
            paths.append(full)
    files = [_one(p) for p in paths]
    summary = {"source": key, "declared": declared, "files": len(files), "bytes": sum(f["bytes"] for f in files)}
    if len(files) <= MAX_LISTED:
        return summary | {"list": files}
    lines = "".join(f"{f['file']}\0{f['bytes']}\0{f['sha256']}\n" for f in files)
    return summary | {"sha256_of_list": hashlib.sha256(lines.encode("utf-8", "surrogateescape")).hexdigest()}


def _walk(root: Path) -> list[Path]:
    """Regular files under `root` (file links too, as the images source reads them: it has refused any that lead
    out of the folder before this runs), sorted; folder links are not walked, as the source does not walk them."""
    found = []
    for top, dirs, names in os.walk(root, followlinks=False):
        dirs.sort()
        found += [Path(top) / n for n in sorted(names) if _regular(Path(top) / n)]
    return found


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:  # a broken link: the source refused or skipped it
        return False


def _one(path: Path) -> dict[str, Any]:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return {"file": shown(os.path.normpath(path)), "bytes": size, "sha256": digest.hexdigest()}


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def machine(devices: list[str]) -> dict[str, Any]:
    """The CPU model and the instruction sets oneDNN picks kernels by (AVX-512, VNNI, BF16 change last bits)."""
    model = ""
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not model:
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:  # not Linux
        model = platform.processor()
    isa = sorted(f for f in flags if f in {"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16"})
    return {"system": platform.system(), "arch": platform.machine(), "cpu": model, "cpu_count": os.cpu_count(),
            "isa": isa, "devices": devices}
