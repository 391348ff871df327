"""The `npz` reader: named arrays read into memory without pickles, one row per example.

`open_npz` and `npz_array` are also `specgen infer`'s (its --input is an .npz checked like a source);
this module imports TensorFlow only through `context.from_arrays`, so infer does not pay for it.

Nothing in the file is trusted before it is checked (docs/security.md): the zip directory is read first and a
member name written twice is refused (zipfile would keep the last one, so two readers could see different
arrays); each array's .npy header is parsed on its own (npy_header.py) and its declared size checked against
what the member holds and against the machine's memory before numpy allocates anything; only the arrays the
spec (or infer's --feed) names are read.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from specgen.diagnostics import did_you_mean
from specgen.runtime.sources.base import DataError, Source, open_regular
from specgen.runtime.sources.context import SourceContext
from specgen.runtime.sources.npy_header import NpyHeader, check_total, read_header

ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")  # a zip with members; an empty zip
NPY_MAGIC = b"\x93NUMPY"
# What zipfile, zlib and numpy raise on a damaged archive: a cut-off central directory,
# a bad CRC, a member that is not a valid .npy. None of it should reach the user as a traceback.
DAMAGED = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError)


def npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """`arrays` as the .npz np.savez writes (stored members `<name>.npy`, zip64), whatever their names:
    np.savez(file, **arrays) takes an array named `file` or `allow_pickle` for its own parameter."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, array in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=True)
    return buffer.getvalue()


class CheckedNpz(np.lib.npyio.NpzFile):
    """numpy's NpzFile whose members are read only through a checked header (`npz[name]` as numpy's):
    `check(names)` reads the headers of several arrays before any data, so the first bad one is named first."""

    def __init__(self, path: Path):
        handle = open_regular(path)  # checked again on the descriptor zipfile reads: a swapped-in FIFO never blocks
        try:
            super().__init__(handle, own_fid=True, allow_pickle=False)  # reads the zip directory only
        except BaseException:
            handle.close()
            raise
        self._headers: dict[str, NpyHeader] = {}
        members = self._archive.namelist()
        # numpy's lookup: `x` or `x.npy` names the member x.npy
        self._members = {**{m.removesuffix(".npy"): m for m in members}, **{m: m for m in members}}
        try:
            _refuse_duplicates(members)
        except DataError:
            self.close()
            raise

    @property
    def _archive(self) -> zipfile.ZipFile:
        assert self.zip is not None, "read after close"
        return self.zip

    def header(self, name: str) -> NpyHeader:
        if name not in self._headers:
            self._headers[name] = read_header(self._archive, self._archive.getinfo(self._member(name)), name)
        return self._headers[name]

    def check(self, names: Iterable[str]) -> None:
        """Every named array's header checked, and their total size, before any array's data is read."""
        check_total([self.header(name) for name in names])

    def __getitem__(self, key: str) -> Any:
        header = self.header(key)
        with self._archive.open(self._member(key)) as member:
            member.seek(header.offset)
            return header.read(member)

    def _member(self, name: str) -> str:
        return self._members[name]  # KeyError for an unknown name, as numpy's


def _refuse_duplicates(members: list[str]) -> None:
    """Two members of one name (or `x` and `x.npy`): zipfile reads the last, another tool may read the first."""
    seen: set[str] = set()
    for member in members:
        name = member.removesuffix(".npy")
        if name in seen:
            raise DataError(f"the archive holds two members named '{name}' (a crafted or damaged .npz: readers "
                            "disagree on which one counts); write the file again with numpy.savez")
        seen.add(name)


def open_npz(path: Path) -> CheckedNpz:
    """The archive at `path`, or DataError saying why it is not a readable .npz (never loads pickles)."""
    with open_regular(path) as handle:  # a FIFO is refused, not waited on (specgen infer --input too)
        magic = handle.read(6)
    if magic.startswith(NPY_MAGIC):
        raise DataError("this is a single .npy array, not an .npz archive; save the arrays with "
                        "numpy.savez(path, name=array, ...)")
    if magic[:4] not in ZIP_MAGICS:
        raise DataError("not an .npz file (it does not start with a zip header); save the arrays with numpy.savez")
    try:
        return CheckedNpz(path)
    except DataError:
        raise
    except DAMAGED as exc:
        raise DataError(f"damaged or truncated .npz file ({exc}); write it again with numpy.savez") from None


def npz_array(npz: np.lib.npyio.NpzFile, name: str) -> np.ndarray:
    """One array of an open archive, or DataError: object arrays are refused, since loading them runs pickle."""
    try:
        if isinstance(npz, CheckedNpz):
            npz.check([name])
        array: np.ndarray = npz[name]
        return array
    except DataError:
        raise
    except DAMAGED as exc:
        if "allow_pickle" in str(exc):  # numpy's only signal that the member is an object (pickled) array
            raise DataError(f"array '{name}' holds Python objects (dtype object), which specgen does not load "
                            "(unpickling can run code); save it as a numeric array") from None
        raise DataError(f"array '{name}' is damaged or truncated ({exc}); write the file again with "
                        "numpy.savez") from None


def read(context: SourceContext) -> Source:
    context.require_file()
    names = context.names()

    def where(name: str, index: tuple[int, ...], flat: int) -> str:
        """An element's place in the file, as the user would look for it."""
        return f"row {index[0]} of array '{names[name][1]}'" + (f" (element {list(index)})" if len(index) > 1 else "")

    return context.from_arrays(_arrays(context), where)


def _arrays(context: SourceContext) -> dict[str, np.ndarray]:
    try:
        npz = open_npz(context.path)
    except DataError as exc:
        raise context.fail((context.kind,), str(exc)) from None
    with npz:
        available = list(npz.files)
        refs = context.names()
        for name, (section, ref) in refs.items():  # every header before any data: a bad one costs no reading
            if ref not in available:
                raise context.fail((section, name), f"array '{ref}' not found{did_you_mean(ref, available)} "
                                   f"(arrays: {', '.join(available)})")
            try:
                npz.header(ref)
            except DataError as exc:
                raise context.fail((section, name), str(exc)) from None
        try:
            npz.check(ref for _, ref in refs.values())
        except DataError as exc:
            raise context.fail((context.kind,), str(exc)) from None
        arrays = {}
        for name, (section, ref) in refs.items():
            try:
                arrays[name] = npz_array(npz, ref)
            except DataError as exc:
                raise context.fail((section, name), str(exc)) from None
    return arrays
