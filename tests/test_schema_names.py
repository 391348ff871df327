"""Every `$defs` entry of the JSON schema is named after its model class alone.

Pydantic names a model's schema entry after its class; when two models share a class name (a new schedule
`PolynomialDecay` beside spec/pruning.py's `PolynomialDecay`), it names both after their module paths instead
(`specgen__spec__pruning__PolynomialDecay`), which silently renames the entry the published schema already had:
editors and tools that point at `#/$defs/PolynomialDecay` break. The fix is to rename one of the two classes.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

import pytest

from specgen.schema import schema_text

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "schemas" / "specgen.schema.json"


def collisions(defs: Mapping[str, object]) -> list[str]:
    """One line per class name that pydantic qualified with module paths: which classes collide, and the fix."""
    by_class: dict[str, list[str]] = defaultdict(list)
    for key in defs:
        if "__" in key:
            *module, name = key.split("__")
            by_class[name].append(".".join(module))
    return [f"model class {name} is defined in {' and in '.join(sorted(modules))}: the schema then names them "
            f"{', '.join(sorted('__'.join([*m.split('.'), name]) for m in modules))} instead of {name}; rename one "
            "of the classes (the new one, so the published schema keeps its names), then run `specgen schema`"
            for name, modules in sorted(by_class.items())]


@pytest.mark.parametrize("source", ["models", "committed"])
def test_no_schema_entry_is_named_by_its_module(source: str) -> None:
    """`models`: what `specgen schema` writes from today's classes; `committed`: schemas/specgen.schema.json."""
    text = schema_text() if source == "models" else SCHEMA.read_text(encoding="utf-8")
    found = collisions(json.loads(text)["$defs"])
    assert not found, "\n".join(found)


def test_a_collision_names_both_classes() -> None:
    defs: dict[str, object] = {"Dense": {}, "specgen__spec__pruning__PolynomialDecay": {},
            "specgen__kinds__schedules__polynomial_decay__PolynomialDecay": {}}
    assert collisions(defs) == [
        "model class PolynomialDecay is defined in specgen.kinds.schedules.polynomial_decay and in "
        "specgen.spec.pruning: the schema then names them specgen__kinds__schedules__polynomial_decay__PolynomialDecay, "
        "specgen__spec__pruning__PolynomialDecay instead of PolynomialDecay; rename one of the classes (the new one, "
        "so the published schema keeps its names), then run `specgen schema`"]
