"""Keras files as untrusted input: the one place that opens a `.keras` zip or a Keras HDF5 file.

A zip member is read in bounded chunks and the count stops at a cap whatever size the zip header
claims (the header is the attacker's word: a 1 MB member can claim 1 KB and inflate to 1 GB).
`config.json` has a fixed cap; `model.weights.h5` is spooled to an anonymous temporary file (memory
stays at one chunk), capped by the caller: restore derives the cap from the spec's variables,
the importer, which has no spec yet, uses a fixed one. Nothing is ever extracted under a member's
own name, so `../` paths in an archive mean nothing here; duplicate names (one reader would see
the first, another the last) and archives of more than MAX_MEMBERS members are refused, and a
member that is not HDF5 (a zip inside the zip) is refused rather than opened.

An HDF5 file is walked link by link before any dataset is read: a dataset stored outside the file
(external storage: HDF5 opens any path the file names, a FIFO included; a virtual dataset maps
other files), a soft or external link, a second name for an object (the only way to make a cycle
with hard links), a filter outside HDF5's built-in set (HDF5 would look for a plugin) or a tree
deeper than MAX_DEPTH is refused in one line naming the link.
"""

from __future__ import annotations

import json
import lzma
import os
import sys
import tempfile
import zipfile
import zlib
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

import h5py

from specgen.errors import SpecgenError

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

CHUNK = 2**20  # bytes decompressed per read: what one member costs in memory at most while it is copied
MAX_CONFIG = 16 * 2**20  # config.json; the largest keras.applications config (NASNetLarge) is 1.07 MB
MAX_MEMBERS = 10_000  # a .keras holds metadata.json, config.json, model.weights.h5 and a few assets
# model.weights.h5 when no spec says how big it may be (`specgen import keras --weights`): ConvNeXtXLarge,
# the largest keras.applications model, is 1.4 GB. It goes to a temporary file, not to memory.
IMPORT_WEIGHTS_CAP = 2 * 2**30
# With a spec: the file may hold each declared variable, up to 3 more copies of it (Adam's two slots
# and Keras' optimizer EMA: `model.save` keeps optimizer state) and HDF5's own metadata, which was
# 2.6 MB for the 3,630 datasets of NASNetLarge; the allowance also covers a few layers the spec drops.
SLOTS = 4
OVERHEAD = 64 * 2**20
MAX_DEPTH = 256  # HDF5 path components; Keras nests 2 per nested model, the weight reader recurses per level
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
# HDF5's built-in filters and h5py's own LZF: any other id makes HDF5 search its plugin path for a library.
FILTERS = {h5py.h5z.FILTER_DEFLATE: "gzip", h5py.h5z.FILTER_SHUFFLE: "shuffle",
           h5py.h5z.FILTER_FLETCHER32: "fletcher32", h5py.h5z.FILTER_SZIP: "szip",
           h5py.h5z.FILTER_NBIT: "nbit", h5py.h5z.FILTER_SCALEOFFSET: "scaleoffset", 32000: "lzf"}


# What zipfile, zlib, lzma, bz2 (OSError), h5py and json raise on a damaged file; none may become a traceback.
READ_ERRORS = (OSError, KeyError, ValueError, RuntimeError, TypeError, EOFError, NotImplementedError,
               zipfile.BadZipFile, zlib.error, lzma.LZMAError)


class UnsafeKerasFile(SpecgenError, ValueError):
    """Why a Keras file is refused, without the file's name (the caller's message names it)."""


def weights_cap(declared_bytes: int) -> int:
    """The most bytes a `.keras`'s model.weights.h5 may inflate to for a spec declaring `declared_bytes`."""
    return SLOTS * declared_bytes + OVERHEAD


def size_text(n: int) -> str:
    return f"{n} bytes" if n < 2**20 else f"{n / 2**20:.1f} MiB"


def open_zip(path: os.PathLike[str] | str) -> zipfile.ZipFile:
    """The archive, its directory checked: not too many members, no name twice."""
    archive = zipfile.ZipFile(path)
    try:
        names = archive.namelist()
        if len(names) > MAX_MEMBERS:
            raise UnsafeKerasFile(f"the zip holds {len(names)} members, more than the {MAX_MEMBERS} a .keras may hold")
        twice = sorted(n for n, count in Counter(names).items() if count > 1)
        if twice:
            raise UnsafeKerasFile(f"the zip holds two members named '{twice[0]}' (readers disagree on which counts)")
    except BaseException:
        archive.close()
        raise
    return archive


def copy_member(archive: zipfile.ZipFile, name: str, cap: int, target: SupportsWrite[bytes], why: str = "") -> int:
    """Copy member `name` into `target` in CHUNK pieces; refuse it once more than `cap` bytes come out."""
    total = 0
    with archive.open(name) as member:
        while chunk := member.read(min(CHUNK, cap + 1 - total)):  # bounded decompression per call
            total += len(chunk)
            if total > cap:
                raise UnsafeKerasFile(f"{name} inflates to more than the {size_text(cap)} allowed{why} (its zip "
                                      f"header says {archive.getinfo(name).file_size} bytes)")
            target.write(chunk)
    return total


def read_config(archive: zipfile.ZipFile) -> Any:
    """config.json, at most MAX_CONFIG bytes, parsed as plain JSON (any value: the caller checks its shape)."""
    buffer = _Buffer()
    copy_member(archive, "config.json", MAX_CONFIG, buffer)
    return load_json(b"".join(buffer.parts), "config.json")


def load_json(data: bytes | str, where: str) -> Any:
    """JSON as plain data; nesting deeper than Python's stack is one error, not a RecursionError."""
    try:
        return json.loads(data)
    except RecursionError:
        raise UnsafeKerasFile(f"{where} nests JSON arrays or objects deeper than Python's parser goes "
                              f"({sys.getrecursionlimit()} levels)") from None
    except ValueError as exc:
        raise UnsafeKerasFile(f"{where} is not JSON: {exc}") from None


class _Buffer:
    """The list of chunks copy_member writes: joined once, never copied per write."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.parts.append(data)
        return len(data)


def spool_weights(archive: zipfile.ZipFile, cap: int, why: str = "") -> IO[bytes]:
    """model.weights.h5 in an anonymous temporary file (gone when closed), at most `cap` bytes."""
    spool = tempfile.TemporaryFile()
    try:
        copy_member(archive, "model.weights.h5", cap, spool, why)
        spool.seek(0)
        if spool.read(8) != HDF5_MAGIC:
            raise UnsafeKerasFile("model.weights.h5 is not an HDF5 file")
        spool.seek(0)
    except BaseException:
        spool.close()
        raise
    return spool


def open_hdf5(source: os.PathLike[str] | str | IO[bytes]) -> h5py.File:
    """The HDF5 file, read-only, after check_hdf5 found nothing stored or linked outside it."""
    h5 = h5py.File(source, "r")
    try:
        check_hdf5(h5)
    except BaseException:
        h5.close()
        raise
    return h5


def check_hdf5(h5: h5py.File) -> None:
    """Walk every link (metadata only, no dataset read); UnsafeKerasFile naming the first refused one."""
    problems: list[str] = []
    seen: dict[Any, str] = {}

    def visit(name: str, link: Any) -> bool | None:
        problem = _link_problem(h5, name, link, seen)
        if problem:
            problems.append(problem)
            return True  # stops the walk; raising inside h5py's callback would surface as a SystemError
        return None

    h5.visititems_links(visit)
    if problems:
        raise UnsafeKerasFile(problems[0])


def _link_problem(h5: h5py.File, name: str, link: Any, seen: dict[Any, str]) -> str:
    where = f"'/{name}'"
    if isinstance(link, h5py.SoftLink):
        return f"{where} is a soft link (to '{link.path}'); a Keras file has none, and specgen follows none"
    if isinstance(link, h5py.ExternalLink):
        return (f"{where} is an external link to '{link.path}' in file '{link.filename}'; specgen reads nothing "
                "outside the file it was given")
    if not isinstance(link, h5py.HardLink):
        return f"{where} is a user-defined link; specgen follows hard links only"
    if name.count("/") + 1 > MAX_DEPTH:
        return f"{where} lies {name.count('/') + 1} groups deep, deeper than {MAX_DEPTH}"
    obj = h5.get(name)  # every link above it was checked first: the walk visits a group before its members
    if obj.id in seen:
        return f"{where} is a second name for '/{seen[obj.id]}'; a Keras file names each object once"
    seen[obj.id] = name
    return _dataset_problem(obj, where) if isinstance(obj, h5py.Dataset) else ""


def _dataset_problem(dataset: h5py.Dataset, where: str) -> str:
    """Storage outside the file, or a filter HDF5 would load as a plugin; '' when the dataset is plain."""
    if dataset.external:
        files = ", ".join(f"'{os.fsdecode(entry[0])}'" for entry in dataset.external)
        return (f"dataset {where} keeps its bytes in another file ({files}: HDF5 external storage); "
                "specgen reads weights only from inside the file")
    if dataset.is_virtual:
        return (f"dataset {where} is a virtual dataset (its bytes come from other files); "
                "specgen reads weights only from inside the file")
    plist = dataset.id.get_create_plist()
    for i in range(plist.get_nfilters()):
        code, _, _, label = plist.get_filter(i)
        if code not in FILTERS:
            return (f"dataset {where} uses filter {code} ({os.fsdecode(label) or 'unnamed'}), not one of HDF5's "
                    f"built-in filters ({', '.join(FILTERS.values())})")
    return ""


@contextmanager
def open_keras(path: os.PathLike[str] | str, cap: int, why: str = "") -> Iterator[tuple[h5py.File, Any, bool]]:
    """The weights as a checked HDF5 file, the parsed config.json (None for an HDF5 file) and whether it was a zip.

    A zip is read with its model.weights.h5 capped at the larger of `cap` and the archive's own size:
    a member stored without compression (as Keras writes it) can never exceed the archive, so only
    compressed bytes are held to the spec's bound.
    """
    with open(path, "rb") as handle:
        head = handle.read(8)
    if not head.startswith(b"PK\x03\x04"):
        if not head.startswith(HDF5_MAGIC):
            raise UnsafeKerasFile("neither an HDF5 file nor a .keras archive")
        with open_hdf5(path) as h5:
            yield h5, None, False
        return
    with open_zip(path) as archive:
        names = set(archive.namelist())
        if not {"config.json", "model.weights.h5"} <= names:
            raise UnsafeKerasFile("a zip archive without config.json and model.weights.h5, not a .keras model")
        config = read_config(archive)
        size = os.path.getsize(path)
        spool = spool_weights(archive, max(cap, size), why if cap >= size else ", the size of the archive itself")
    with spool, open_hdf5(spool) as h5:
        yield h5, config, True
