"""`csv`: a header row naming the columns, one row per example; read into memory."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, TypeAlias

from pydantic import Field

from specgen.fields.base import FilePath, Identifier
from specgen.fields.unions import by_shape, scalar_or_list
from specgen.kinds.sources.base import SourceDef, SourceSpec, file_source

if TYPE_CHECKING:  # by_shape picks a branch at run time; statically, the union of its branches
    Column: TypeAlias = str | list[str]
else:
    Column = by_shape(scalar_or_list, "a column name or a list of column names",
                      scalar=Identifier, list=Annotated[list[Identifier], Field(min_length=1)])


class CsvSource(SourceSpec):
    csv: FilePath
    features: dict[Identifier, Column] = Field(description="Input name -> column name(s).")
    labels: dict[Identifier, Column] = Field(default_factory=dict)


KINDS = (SourceDef(
    name="csv",
    spec=CsvSource,
    doc="`csv: <path>`, `features: {<input name>: <column> or [<column>, ...]}` (required), "
        "`labels: {<label name>: <column> or [<column>, ...]}` (default `{}`)",
    expects="a .csv file",
    example={"csv": "data.csv", "features": {"x": ["a", "b", "c"]}, "labels": {"label": "y"}},
    reader="specgen.runtime.sources.csv.read",
    resolve=file_source("csv"),
),)
