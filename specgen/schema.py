"""JSON Schema for spec files, exported from the pydantic models."""

from __future__ import annotations

import json

from specgen.spec.model import Spec

SCHEMA_ID = "https://specgen.dev/schemas/specgen.schema.json"


def schema_text() -> str:
    """The schema as deterministic JSON text (sorted keys, two-space indent, final newline)."""
    schema = Spec.model_json_schema(by_alias=True)
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
