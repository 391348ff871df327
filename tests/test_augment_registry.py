"""Completeness of the augmentation registry (specgen/kinds/augment): each failure names the kind and the
piece it misses (docs/extending.md, "Augmentations")."""

from __future__ import annotations

import pkgutil
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from specgen.kinds import augment
from specgen.kinds.augment import REGISTRY, SCHEMA_ORDER, Augment, describe, kind_of

ROOT = Path(__file__).resolve().parents[1]
KINDS = list(REGISTRY)


def test_every_module_is_a_kind_in_schema_order() -> None:
    modules = {m.name for m in pkgutil.iter_modules(augment.__path__)} - {"base"}
    assert sorted(modules) == sorted(REGISTRY), "each module of specgen/kinds/augment is one kind, named as its file"
    assert KINDS[:len(SCHEMA_ORDER)] == list(SCHEMA_ORDER)


@pytest.mark.parametrize("name", KINDS)
def test_kind_parses_its_example_and_names_its_keras_layer(name: str) -> None:
    import keras

    kind = REGISTRY[name]
    assert list(kind.spec.model_fields) == [name], f"augment '{name}': its model has exactly the field '{name}'"
    item = TypeAdapter(Augment).validate_python({name: kind.example})
    assert type(item) is kind.spec and kind_of(item) is kind
    line = describe(item)
    assert line.startswith(name + " ") and "\n" not in line, f"augment '{name}': describe() is one line naming it"
    layer, kwargs = kind.keras(kind.value(item))
    assert getattr(keras.layers, layer)(**kwargs).__class__.__name__ == layer


def test_docs_list_every_kind() -> None:
    assert augment.markdown() in (ROOT / "docs" / "spec.md").read_text(), (
        "docs/spec.md's table of augmentations (under ### `augment`) is not specgen.kinds.augment.markdown()")
    assert "## Augmentations" in (ROOT / "docs" / "extending.md").read_text()
