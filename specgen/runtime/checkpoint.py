"""Checkpoints keyed by spec path, written so that a crash never leaves a partial latest one.

Layout of a run's checkpoint folder:

    ckpt-00000100/variables.{index,data-*}  every saved variable under its spec path
                                            (the TF name-based format: tf.train.load_checkpoint reads it)
    ckpt-00000100/data.{index,data-*}       the training data iterator's position
    ckpt-00000100/meta.json                 step and spec name
    latest                                  the name of the newest complete checkpoint

A checkpoint is written into a temporary folder and renamed into place, and only
then is `latest` replaced (write + rename), so `latest` always names a whole one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from specgen.diagnostics import Diagnostic, SpecError

LATEST = "latest"


def _replace_file(path: Path, text: str) -> None:
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_text(text)
    os.replace(temp, path)


class CheckpointFolder:
    def __init__(self, directory: Path, keep: int):
        self.directory, self.keep = directory, keep

    def latest(self) -> Path | None:
        pointer = self.directory / LATEST
        if not pointer.is_file():
            return None
        path = self.directory / pointer.read_text().strip()
        return path if (path / "meta.json").is_file() else None

    def all(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        return sorted(p for p in self.directory.glob("ckpt-*") if p.is_dir() and (p / "meta.json").is_file())

    def save(self, step: int, variables: dict[str, tf.Variable], iterator: Any, meta: dict[str, Any]) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.directory / f"ckpt-{step:08d}"
        temp = self.directory / f".{final.name}.{os.getpid()}.tmp"
        shutil.rmtree(temp, ignore_errors=True)
        temp.mkdir()
        names = list(variables)
        tf.raw_ops.SaveV2(prefix=str(temp / "variables"), tensor_names=names, shape_and_slices=[""] * len(names),
                          tensors=[variables[n].read_value() for n in names])
        if iterator is not None:
            tf.train.Checkpoint(iterator=iterator).write(str(temp / "data"))
        (temp / "meta.json").write_text(json.dumps({"step": step, **meta}, indent=2, sort_keys=True) + "\n")
        if final.exists():
            shutil.rmtree(final)
        os.replace(temp, final)
        _replace_file(self.directory / LATEST, final.name + "\n")
        for old in self.all()[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def restore(self, path: Path, variables: dict[str, tf.Variable], iterator: Any) -> dict[str, Any]:
        """Assign every variable from `path`, or raise before assigning any when something does not fit."""
        values = read_values(path / "variables", variables)
        for name, var in variables.items():
            var.assign(values[name])
        if iterator is not None and (path / "data.index").is_file():
            tf.train.Checkpoint(iterator=iterator).read(str(path / "data")).assert_consumed()
        return json.loads((path / "meta.json").read_text())


def resolve_prefix(path: Path) -> Path:
    """The checkpoint prefix for a prefix, its .index/.data file, a run folder (its `latest`),
    a ckpt-* folder or a folder with a TensorFlow `checkpoint` state file; ValueError otherwise."""
    if path.is_dir():
        if (path / LATEST).is_file():
            name = (path / LATEST).read_text().strip()
            prefix = path / name / "variables"
            if not Path(f"{prefix}.index").is_file():
                raise ValueError(f"{path}/latest names '{name}', which holds no variables.index")
            return prefix
        if (path / "variables.index").is_file():
            return path / "variables"
        latest = tf.train.latest_checkpoint(str(path)) if (path / "checkpoint").is_file() else None
        if latest is None:
            raise ValueError(f"folder {path} holds no checkpoint (no 'latest' file, no TensorFlow 'checkpoint' file)")
        return Path(latest)
    prefix = Path(re.sub(r"\.(index|data-\d+-of-\d+)$", "", str(path)))
    if not Path(f"{prefix}.index").is_file():
        raise ValueError(f"checkpoint {path} not found: expected a checkpoint prefix (with {prefix.name}.index "
                         "beside it), a run folder with a 'latest' file or a folder with a TensorFlow 'checkpoint' file")
    return prefix


def checkpoint_prefix(path: Path) -> Path:
    """`resolve_prefix`, with its problem as a SpecError naming the path."""
    try:
        return resolve_prefix(path)
    except ValueError as exc:
        raise SpecError([Diagnostic(str(path), None, str(exc))]) from None


def read_arrays(prefix: Path, expected: dict[str, tuple[tuple[int, ...], str]]) -> dict[str, np.ndarray]:
    """Values for checkpoint keys, each checked for presence, shape and dtype before any is returned."""
    reader = tf.train.load_checkpoint(str(prefix))
    shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    problems = []
    for key, (shape, dtype) in expected.items():
        if key not in shapes:
            problems.append(f"'{key}' is missing")
        elif tuple(shapes[key]) != tuple(shape) or dtypes[key].name != dtype:
            problems.append(f"'{key}' is {dtypes[key].name}{list(shapes[key])} in the checkpoint but "
                            f"{dtype}{list(shape)} here")
    if problems:
        raise SpecError([Diagnostic(str(prefix), None, "cannot read the checkpoint: " + "; ".join(problems[:10])
                                    + (f"; and {len(problems) - 10} more" if len(problems) > 10 else "")
                                    + ". Nothing was changed.")])
    return {key: reader.get_tensor(key) for key in expected}


def read_values(prefix: Path, variables: dict[str, tf.Variable]) -> dict[str, np.ndarray]:
    """Every variable's value from a checkpoint, checked for presence, shape and dtype first."""
    return read_arrays(prefix, {name: (tuple(v.shape), v.dtype.name) for name, v in variables.items()})
