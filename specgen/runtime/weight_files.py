"""What a weight file is, told by its name and what it holds: a Keras weight file (a .keras archive, an HDF5 file
of Keras weights), another zip archive (a numpy .npz) or HDF5 file, or none of these; and the one line for a file
given where a TensorFlow checkpoint is expected (checkpoint_read.py, restore_sources.py, the Keras importer).
Kept apart from keras_weights.py, which reads the weights of a file this module has told apart."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import h5py

from specgen.paths import shown
from specgen.runtime import keras_files
from specgen.runtime.keras_files import READ_ERRORS
from specgen.runtime.sources.base import DataError, open_regular

SUFFIXES = (".h5", ".hdf5", ".keras")
HDF5_MAGIC, ZIP_MAGIC = keras_files.HDF5_MAGIC, b"PK\x03\x04"


def is_keras_file(path: Path) -> bool:
    """A Keras weight file by its suffix (read_weights then says what is wrong with one that holds none), else by
    what it holds (`sniff`): a zip or HDF5 signature alone says nothing (a numpy .npz is a zip too). Folders never."""
    if path.suffix in SUFFIXES or path.name.endswith(".weights.h5"):
        return not path.is_dir()
    return sniff(path) == KERAS


KERAS, ZIP, HDF5 = "keras", "zip", "hdf5"
KERAS_MEMBERS = frozenset({"config.json", "model.weights.h5"})  # what every .keras archive holds (keras_files)
KERAS_ROOT = frozenset({"layers", "vars", "model_weights"})  # the root groups of Keras 3 and Keras 2 weight files
CHECKPOINT_FILE = re.compile(r"\.(index|data-\d+-of-\d+)$")  # TensorFlow's names: a shard's bytes may start like a zip


def sniff(path: Path) -> str | None:
    """What a regular file holds: KERAS (a .keras archive, an HDF5 file with Keras' root groups or attributes), ZIP
    or HDF5 (an archive or HDF5 file without them), or None (neither, unreadable, no regular file). Names only are
    read (the zip's directory, the HDF5 root's link and attribute names): nothing is inflated or followed."""
    if not path.is_file():  # a FIFO or device would block the read below
        return None
    head = b""
    try:
        with open_regular(path) as handle:  # checked again as opened: a FIFO swapped in is refused, not waited on
            head = handle.read(8)
            handle.seek(0)
            if head.startswith(ZIP_MAGIC):
                with zipfile.ZipFile(handle) as archive:
                    return KERAS if KERAS_MEMBERS <= set(archive.namelist()) else ZIP
            if head.startswith(HDF5_MAGIC):
                with h5py.File(handle, "r") as h5:
                    keras = KERAS_ROOT & set(h5.keys()) or {"layer_names", "layer_names0"} & set(h5.attrs.keys())
                return KERAS if keras else HDF5
    except (*READ_ERRORS, DataError):  # a damaged archive or HDF5 file is still one (read_weights names the damage)
        return ZIP if head.startswith(ZIP_MAGIC) else HDF5 if head.startswith(HDF5_MAGIC) else None
    return None


def not_a_checkpoint(path: Path) -> str | None:
    """Why `path`, given where a TensorFlow checkpoint is expected, is none, saying what it holds: a Keras weight
    file (and where those are read), a zip archive or an HDF5 file; None for anything else (the checkpoint reader's
    own checks say what is wrong with it)."""
    if CHECKPOINT_FILE.search(path.name):  # a checkpoint's own file: what it holds is the checkpoint reader's to check
        return None
    kind = sniff(path)
    if kind == KERAS or (kind is None and is_keras_file(path)):  # by its content, else by its name
        return (f"{shown(path)} is a Keras weight file, not a TensorFlow checkpoint: name it in checkpoint.restore "
                "(or pass it to `specgen restore-plan --from`); `specgen export` without --checkpoint exports the "
                "spec's restore plan")
    what = {ZIP: "a zip archive (a numpy .npz?)", HDF5: "an HDF5 file without Keras weights"}.get(kind or "")
    if what is None:
        return None
    return (f"{shown(path)} is {what}, not a TensorFlow checkpoint nor a Keras weight file (.keras, .weights.h5, "
            ".h5): expected a checkpoint's prefix or .index file, a ckpt-* folder or a run folder")
