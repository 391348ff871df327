"""`csv`: a header row naming the columns, one row per example; read into memory."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, TypeAlias

from pydantic import AfterValidator, Field, StringConstraints, WithJsonSchema

from specgen.diagnostics import safe_repr
from specgen.fields.base import FilePath, Identifier
from specgen.fields.unions import by_shape, scalar_or_list
from specgen.kinds.sources.base import SourceDef, SourceSpec, file_source

PRINTABLE = r"^[^\x00-\x1f\x7f]+$"


def _header_cell(name: str) -> str:
    """A column as the header spells it: any printable text (`sepal length (cm)`, `x.y`, `lab-el`)."""
    if not name.strip():
        raise ValueError(f"received {safe_repr(name)} (only spaces), expected a column name of the CSV's header row")
    if not re.fullmatch(PRINTABLE, name):
        raise ValueError(f"invalid CSV column name {safe_repr(name)}: a column is named as the file's header row "
                         "spells it, in printable text without control characters; rename the header column "
                         "(in the file and here)")
    return name.strip()


# A header cell, spaces around it stripped as the reader strips the header's. Not an Identifier: headers written by
# others hold spaces, dots, dashes and units, and a column reaches only the reader and messages, never generated
# code (as a tfrecord key); bounded and free of control characters so that messages stay one line.
ColumnName = Annotated[str, StringConstraints(min_length=1, max_length=255),
                       AfterValidator(_header_cell),
                       WithJsonSchema({"type": "string", "minLength": 1, "maxLength": 255, "pattern": PRINTABLE})]

if TYPE_CHECKING:  # by_shape picks a branch at run time; statically, the union of its branches
    Column: TypeAlias = str | list[str]
else:
    Column = by_shape(scalar_or_list, "a column name or a list of column names",
                      scalar=ColumnName, list=Annotated[list[ColumnName], Field(min_length=1)])


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
