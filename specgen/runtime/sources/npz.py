"""The `npz` reader: named arrays read into memory without pickles, one row per example.

`open_npz` and `npz_array` are also `specgen infer`'s (its --input is an .npz checked like a source);
this module imports TensorFlow only through `context.from_arrays`, so infer does not pay for it.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from specgen.diagnostics import did_you_mean
from specgen.runtime.sources.base import DataError, Source, open_regular
from specgen.runtime.sources.context import SourceContext

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


def open_npz(path: Path) -> np.lib.npyio.NpzFile:
    """The archive at `path`, or DataError saying why it is not a readable .npz (never loads pickles)."""
    with open_regular(path) as handle:  # a FIFO is refused, not waited on (specgen infer --input too)
        magic = handle.read(6)
    if magic.startswith(NPY_MAGIC):
        raise DataError("this is a single .npy array, not an .npz archive; save the arrays with "
                        "numpy.savez(path, name=array, ...)")
    if magic[:4] not in ZIP_MAGICS:
        raise DataError("not an .npz file (it does not start with a zip header); save the arrays with numpy.savez")
    try:
        with zipfile.ZipFile(path):  # read the zip directory first: np.load leaks its file handle when that fails
            pass
        archive: np.lib.npyio.NpzFile = np.load(path, allow_pickle=False)
        return archive
    except DAMAGED as exc:
        raise DataError(f"damaged or truncated .npz file ({exc}); write it again with numpy.savez") from None


def npz_array(npz: np.lib.npyio.NpzFile, name: str) -> np.ndarray:
    """One array of an open archive, or DataError: object arrays are refused, since loading them runs pickle."""
    try:
        return npz[name]
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
        arrays = {}
        for name, (section, ref) in context.names().items():
            if ref not in available:
                raise context.fail((section, name), f"array '{ref}' not found{did_you_mean(ref, available)} "
                                   f"(arrays: {', '.join(available)})")
            try:
                arrays[name] = npz_array(npz, ref)
            except DataError as exc:
                raise context.fail((section, name), str(exc)) from None
    return arrays
