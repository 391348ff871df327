"""What a data-source kind declares: `SourceDef`, and the resolution most file-backed sources share.

A source kind is one module of this package (specgen/kinds/sources/<name>.py) with `KINDS = (SourceDef(...),)`; its
reader is one module of specgen/runtime/sources/. Only this package compares a value against a kind's
name: the rest of specgen asks the registry (kinds/sources/__init__.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from specgen.fields.base import SpecModel
from specgen.kinds.augment import Augment

# An input or label name -> what names it in the file: an array, a feature key, a column or columns.
Refs = dict[str, str | tuple[str, ...]]
# Where a refusal points inside the source's spec entry (appended to ("data", stage)), and its message.
Refusal = tuple[tuple[str | int, ...], str]
# Image inputs every example is resized to a size the spec declares: the key messages name (`image_size`), and
# input name -> ([height, width], where that size is written inside the source's entry).
Resized = tuple[str, dict[str, tuple[list[int], tuple[str | int, ...]]]]


class SourceSpec(SpecModel):
    """What every source's spec model has: `augment` (validate refuses it outside data.train)."""

    augment: Annotated[list[Augment], Field(min_length=1)] | None = Field(
        None, description="Augmentations applied in order to training batches only (specgen/kinds/augment).")


@dataclass(frozen=True)
class Resolved:
    """A source's IR facts (ir/training/model.py's DataSourceIR adds the stage and kind)."""

    path: Path  # resolved against the spec's folder
    features: Refs
    labels: Refs


@dataclass(frozen=True)
class SourceDef:
    """One data-source kind: where each of its pieces lives.

    The reader is a dotted name: it lives in specgen/runtime/ (TensorFlow), which this package, imported
    by `specgen validate` and `build`, must not import.
    """

    name: str  # the spec key that names the file, and the kind's name in the IR
    spec: type  # its pydantic model, a member of the `data.train` / `data.eval` union
    doc: str  # its keys, one cell of docs/spec.md's table of sources (kinds/sources.markdown())
    expects: str  # what the path must name, for messages: "a .npz file"
    example: dict[str, Any]  # a small valid source (`features: {x: ...}`): tests/test_source_registry.py reads it
    # Dotted name of its runtime function, (SourceContext) -> Source: specgen/kinds/pointers.py resolves it.
    reader: str
    resolve: Callable[[Any, Path], Resolved]  # (its spec model, the spec's folder) -> its IR facts
    # Whether one file fills an input's named dynamic dimensions (kinds/dims.py) with one length per file;
    # a kind that cannot (a CSV row, a fixed-length TFRecord feature) refuses such an input when read.
    fills_named_dims: bool = False
    # Checks at validate time beyond the model's own (the model is typed Any: one of the spec models).
    refuse: Callable[[Any, Mapping[str, Any]], list[Refusal]] = lambda source, inputs: []
    # Defaults that need the rest of the spec, filled once it is parsed (spec/load.py): (its spec model, the
    # spec's inputs, the data labels the loss reads) -> the model with them (`images` fills features and labels).
    complete: Callable[[Any, Mapping[str, Any], list[str]], Any] = lambda source, inputs, labels: source
    # Sizes the spec declares for image inputs, known before a file is opened: validate checks the model runs at
    # them (runtime/sources/sizes.py `declared`), and so does the reader at train. (its spec model) -> Resized.
    resized: Callable[[Any], Resized] = lambda source: ("", {})
    # `specgen data`'s extra lines for the kind's own keys (runtime/commands/data.py): (its spec model) -> lines.
    describe: Callable[[Any], list[str]] = lambda source: []

    def report(self, path: str, features: Refs, labels: Refs) -> str:
        """One line for `specgen report` and messages: the kind, its file and what it reads."""
        return f"{self.name} {path}: features {_pairs(features)}; labels {_pairs(labels) or 'none'}"


def _pairs(refs: Refs) -> str:
    return ", ".join(f"{name} <- {ref if isinstance(ref, str) else '[' + ', '.join(ref) + ']'}"
                     for name, ref in refs.items())


def refs(mapping: Mapping[str, Any]) -> Refs:
    """A spec mapping of names with lists made tuples (the IR is frozen and hashable)."""
    return {k: v if isinstance(v, str) else tuple(v) for k, v in mapping.items()}


def file_source(key: str) -> Callable[[Any, Path], Resolved]:
    """Resolution for a source whose key `key` holds one path relative to the spec's folder."""

    def resolve(source: Any, folder: Path) -> Resolved:
        return Resolved(folder / getattr(source, key), refs(source.features), refs(source.labels))

    return resolve
