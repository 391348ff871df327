"""`tfrecord`: `tf.train.Example` records, checked in one pass up front, then streamed."""

from __future__ import annotations

from pydantic import Field

from specgen.kinds.sources.base import SourceDef, SourceSpec, file_source
from specgen.spec.base import FilePath, Identifier


class TfRecordSource(SourceSpec):
    tfrecord: FilePath
    features: dict[Identifier, Identifier] = Field(description="Input name -> feature key.")
    labels: dict[Identifier, Identifier] = Field(default_factory=dict)


KINDS = (SourceDef(
    name="tfrecord",
    spec=TfRecordSource,
    doc="`tfrecord: <path>`, `features: {<input name>: <feature key>}` (required), "
        "`labels: {<label name>: <feature key>}` (default `{}`)",
    expects="a .tfrecord file",
    example={"tfrecord": "data.tfrecord", "features": {"x": "x"}, "labels": {"label": "y"}},
    reader="specgen.runtime.sources.tfrecord.read",
    resolve=file_source("tfrecord"),
),)
