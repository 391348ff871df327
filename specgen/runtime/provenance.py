"""What made a run: written into its folder each time `specgen train` starts it, read back by `specgen diff RUN RUN`.

- `spec.resolved.yaml`: the merged spec (every file it `extends`, then the `--set` overrides in effect, then the
  schema's defaults) with the origin of each value as a comment (spec/provenance.py). It loads like any spec,
  so `specgen diff` compares two runs' specs section by section.
- `provenance.json`: the data it read (each file's size and sha256; a folder or a glob of shards as the sorted
  list of its files), the seed, the versions of Python and the packages that compute, and the machine (CPU model
  and instruction sets that change float results, GPUs). Folders of more than MAX_LISTED files keep only their
  count, bytes and one digest over the sorted (name, size, sha256) lines, so the record stays small.
  A fine-tuning run's `restore` says, per `checkpoint.restore` entry, what its `from` resolved to (the checkpoint
  prefix a run folder's `latest` named then, or the Keras file), how many variables it restored and a sha256 of
  the values it assigned (runtime/commands/fine_tuning.py record): the restored weights decide the run as much as
  its data. A resume does not restore again: it keeps the record of the start that did. The data and the restore
  sources are all a start reads from disk besides the spec (which spec.resolved.yaml holds, `extends` merged):
  `normalize` statistics and other constants are spec values, or variables the restore sets.
  Its top-level keys describe the run's latest start (what `specgen diff` compares, beside spec.resolved.yaml,
  which is the latest start's too); `starts` keeps every start of the run, oldest first, each with the step it
  started at (0 for a new run), so a run whose data changed mid-way still shows what it trained on first: a
  resume appends to it, a new run (or --fresh, which moved the old record aside) begins it again. The first
  start is recorded whole, each later one as its step and the keys that changed since the start before it, so a
  run resumed a hundred times with nothing changed keeps a record of a few KB (each start's whole record, with
  its data list and overrides, would grow it by that much every time, on the disk a full-disk run is short of).
- A checkpoint records `train_files_sha256`, the training files' `content_sha256` (each file's size and sha256, in
  order). A resume whose training files differ from those (another file, or the same file with other bytes) does
  not restore the checkpoint's data position, which belongs to the old files (a TFRecord shard's byte offset
  would land inside another record; the shuffle buffer holds old examples): the data starts a new pass, and the
  resume's `note:` names the file (`data_change`). It is a note, not a refusal: replacing a data file with a
  cleaned or extended one is a normal thing to do between two segments of a run. The comparison is with the
  checkpoint, not with the latest start, so a start that failed after recording the new files changes nothing.

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
           resumed_at: int | None = None, data: dict[str, Any] | None = None,
           restore: list[dict[str, Any]] | None = None) -> list[str]:
    """Write both files for a start (`resumed_at`: the step a resume starts at; None for a new run); the notes.
    `data`: the data's fingerprint when the caller has it already (each file is hashed once a start). `restore`:
    what a fine-tuning start restored (fine_tuning.record); a resume keeps the one of the start before it."""
    from specgen.spec.provenance import load_resolved, resolved_yaml

    _, tree = load_resolved(loaded.path, overrides)
    header = (f"# The spec this run trained: {shown(loaded.path)} with every base it extends, the overrides below, "
              "and the defaults; each value's origin is the comment after it.\n")
    data = data if data is not None else data_fingerprint(loaded)
    facts: dict[str, Any] = {"spec": shown(loaded.path), "overrides": overrides,
             "seed": loaded.spec.train.seed if loaded.spec.train else None,
             "data": data, "versions": versions(), "machine": machine(devices)}
    previous, starts, notes = _earlier(folder / RECORD) if resumed_at is not None else ({}, [], [])
    restore = restore if restore is not None else previous.get("restore")
    facts |= {"restore": restore} if restore else {}
    if starts:  # a change of the training files is said by the resume, against the checkpoint's (data_change)
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


def content_digest(stage: Any) -> str | None:
    """One stage's files as one sha256 over each file's size and sha256, in their sorted order, names left out (a
    run started from another folder records other names for the same files): what a checkpoint's data position
    depends on. Computed from the list for a record written before `content_sha256` was; None when unknown."""
    if not isinstance(stage, dict):
        return None
    if isinstance(stage.get("content_sha256"), str):
        return str(stage["content_sha256"])
    if "sha256_of_list" in stage or not isinstance(stage.get("list"), list):
        return None
    return _content([{"bytes": b, "sha256": h} for _, b, h in _entries(stage)])


def _content(files: list[dict[str, Any]]) -> str:
    lines = "".join(f"{f['bytes']}\0{f['sha256']}\n" for f in files)
    return hashlib.sha256(lines.encode()).hexdigest()


def data_change(folder: Path, now: dict[str, Any], saved: str | None) -> str | None:
    """What differs between the training files now (`now`: data_fingerprint) and those a checkpoint's data position
    was saved on, naming the first file that differs; None when they are the same.

    `saved`: the checkpoint's `train_files_sha256` (its meta.json; content_digest of the training files then). The record
    of the run's starts (provenance.json) names the files of the start whose files had that digest. A checkpoint
    saved before the digest was is compared with the run's latest recorded start instead."""
    new = now.get("train")
    if not isinstance(new, dict):
        return None
    digest, starts = content_digest(new), _train_stages(folder / RECORD)
    if saved is not None:
        if digest == saved:
            return None
        old = next((s for s in starts if content_digest(s) == saved), None)
        if old is None:
            return (f"the training files' contents differ from those it was saved on (sha256 of their sizes and "
                    f"digests {saved[:12]} -> {str(digest)[:12]}; {RECORD} keeps no record of the old files)")
        return _what_changed(old, new)
    if not starts or [e[1:] for e in _entries(starts[0])] == [e[1:] for e in _entries(new)]:
        return None
    return _what_changed(starts[0], new)


def _train_stages(path: Path) -> list[dict[str, Any]]:
    """The training data of each start the record keeps, newest first (a later start records only what changed)."""
    previous, starts, _ = _earlier(path)
    stages, current = [], None
    for start in starts:
        data = start.get("data")
        if isinstance(data, dict) and isinstance(data.get("train"), dict):
            current = data["train"]
        if current is not None:
            stages.append(current)
    latest = previous.get("data")
    if isinstance(latest, dict) and isinstance(latest.get("train"), dict):
        stages.append(latest["train"])
    return stages[::-1]


def _what_changed(old_stage: dict[str, Any], new_stage: dict[str, Any]) -> str:
    """The first file that differs, said as a change, an addition, a removal or a rename, and how many do.

    Files are paired by the name recorded when both starts name some file alike (the same working folder); else by
    position, as names are recorded as printed from the working folder of each start, so a run started from
    another folder (or a copied run folder) names the same file otherwise."""
    old, new = _entries(old_stage), _entries(new_stage)
    if old_stage.get("declared") != new_stage.get("declared"):
        return f"it reads {new_stage.get('declared')} where that start read {old_stage.get('declared')}"
    before, after = {e[0]: e for e in old}, {e[0]: e for e in new}
    if not set(before) & set(after):  # named from other folders: by position
        if len(old) != len(new):
            return f"{new_stage.get('declared')} holds {len(new)} files where it held {len(old)}"
        before = {n[0]: o for o, n in zip(old, new, strict=True)}
    gone = [name for name in before if name not in after]
    changes = []
    for name, entry in after.items():
        if name not in before:
            same = next((g for g in gone if before[g][1:] == entry[1:]), None)
            changes.append(f"{name} is new" if same is None else f"{same} was renamed {name}")
            if same is not None:
                gone.remove(same)
        elif before[name][1:] != entry[1:]:
            changes.append(f"{name} changed (sha256 {str(before[name][2])[:12]} -> {str(entry[2])[:12]})")
    changes += [f"{name} was removed" for name in gone]
    if not changes:  # the same files in another order (a digest of a long list)
        return f"{new_stage.get('declared')} holds other files"
    return changes[0] + (f" ({len(changes)} files differ)" if len(changes) > 1 else "")


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
    seen: set[tuple[int, int]] = set()
    for name in names:
        full = folder / name
        if full.is_dir():
            paths += _walk(full)
        else:  # a file named twice, under any name, is read once (tfrecord_files.find_shards): recorded once
            found = [Path(p) for p in sorted(glob.glob(str(full)))] if glob.has_magic(name) else [full]
            paths += [p for p in found if _first(p, seen)]
    files = [_one(p) for p in paths]
    summary = {"source": key, "declared": declared, "files": len(files), "bytes": sum(f["bytes"] for f in files),
               "content_sha256": _content(files)}
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


def _first(path: Path, seen: set[tuple[int, int]]) -> bool:
    """Whether `path` is a file not in `seen` (os.stat's device and inode: every name of a file has them), adding
    it; a path that cannot be examined is kept (_one then says why)."""
    try:
        facts = os.stat(path)
    except OSError:
        return True
    if (facts.st_dev, facts.st_ino) in seen:
        return False
    seen.add((facts.st_dev, facts.st_ino))
    return True


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
