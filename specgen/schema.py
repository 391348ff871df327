"""JSON Schema for spec files, exported from the pydantic models."""

from __future__ import annotations

import json

from specgen.spec.model import Spec

SCHEMA_ID = "https://specgen.dev/schemas/specgen.schema.json"


# The two keys of a spec *file* that the loader consumes before the model sees the merged spec (spec/compose.py).
FILE_KEYS = {
    "extends": {
        "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
        "description": (
            "Spec files this one is built on, relative to this file, applied left to right, then this file's own "
            "keys, then --set. Mappings merge key by key (`key: null` removes what a base gave); lists of items "
            "with a `name` (layers) merge by name: an item naming an existing one changes only the fields it gives, "
            "a new one is appended or placed with `after: NAME` / `before: NAME`, `{name: X, remove: true}` removes "
            "one; every other list is replaced whole. Files must lie in the same repository. docs/spec.md, "
            "'Composing specs'."),
    },
    "abstract": {
        "type": "boolean",
        "description": ("A spec that exists only to be extended: validate checks the keys it has and requires "
                        "none; build generates nothing for it. Not inherited by the specs that extend it."),
    },
}


def schema_text() -> str:
    """The schema as deterministic JSON text (sorted keys, two-space indent, final newline)."""
    schema = Spec.model_json_schema(by_alias=True)
    schema["properties"] = {**FILE_KEYS, **schema["properties"]}
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
