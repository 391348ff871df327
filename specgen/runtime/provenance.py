"""What made a run: written into its folder each time `specgen train` starts it, read back by `specgen diff RUN RUN`.

- `spec.resolved.yaml`: the merged spec (every file it `extends`, then the `--set` overrides in effect, then the
  schema's defaults) with the origin of each value as a comment (spec/provenance.py). It loads like any spec,
  so `specgen diff` compares two runs' specs section by section.
- `provenance.json`: the data it read (each file's size and sha256; a folder or a glob of shards as the sorted
  list of its files), the seed, the versions of Python and the packages that compute, and the machine (CPU model
  and instruction sets that change float results, GPUs). Folders of more than MAX_LISTED files keep only their
  count, bytes and one digest over the sorted (name, size, sha256) lines, so the record stays small.

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


def record(folder: Path, loaded: LoadedSpec, overrides: list[str], devices: list[str]) -> None:
    from specgen.spec.provenance import load_resolved, resolved_yaml

    _, tree = load_resolved(loaded.path, overrides)
    header = (f"# The spec this run trained: {shown(loaded.path)} with every base it extends, the overrides below, "
              "and the defaults; each value's origin is the comment after it.\n")
    write_atomic(folder / RESOLVED, header + resolved_yaml(tree))
    facts = {"spec": shown(loaded.path), "overrides": overrides,
             "seed": loaded.spec.train.seed if loaded.spec.train else None,
             "data": data_fingerprint(loaded), "versions": versions(), "machine": machine(devices)}
    write_atomic(folder / RECORD, json.dumps(facts, indent=2, sort_keys=True) + "\n")


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
