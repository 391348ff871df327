"""`npz`: named numpy arrays in one archive, one row per example; read into memory."""

from __future__ import annotations

from pydantic import Field

from specgen.fields.base import FilePath, Identifier
from specgen.kinds.sources.base import SourceDef, SourceSpec, file_source


class NpzSource(SourceSpec):
    npz: FilePath
    features: dict[Identifier, Identifier] = Field(description="Input name -> array name.")
    labels: dict[Identifier, Identifier] = Field(default_factory=dict)


KINDS = (SourceDef(
    name="npz",
    spec=NpzSource,
    doc="`npz: <path>`, `features: {<input name>: <array name>}` (required), "
        "`labels: {<label name>: <array name>}` (default `{}`)",
    expects="a .npz file",
    example={"npz": "data.npz", "features": {"x": "x_train"}, "labels": {"label": "y_train"}},
    reader="specgen.runtime.sources.npz.read",
    resolve=file_source("npz"),
    fills_named_dims=True,  # arrays padded to one length per file
),)
