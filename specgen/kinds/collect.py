"""Module discovery shared by the registries: one module per kind (or small family), found by listing.

Each kind module defines `KINDS`, a tuple of its axis' Def dataclasses (each with a `name` and a
`spec` model). The modules named in a registry's schema order come first, in that order, so the
published JSON schema (schemas/specgen.schema.json lists a union's members in registry order) does
not move when a kind is added; every other module follows alphabetically.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from typing import Any


def module_names(path: Iterable[str], schema_order: tuple[str, ...], skip: tuple[str, ...] = ("base",)) -> list[str]:
    found = sorted(m.name for m in pkgutil.iter_modules(path) if m.name not in skip and not m.name.startswith("_"))
    return [*(m for m in schema_order if m in found), *(m for m in found if m not in schema_order)]


def collect(package: str, path: Iterable[str], schema_order: tuple[str, ...]) -> dict[str, Any]:
    """Kind name -> Def, over every module of `package` (its `KINDS` tuples), in registry order."""
    registry: dict[str, Any] = {}
    for module_name in module_names(path, schema_order):
        module = importlib.import_module(f"{package}.{module_name}")
        for kind in module.KINDS:
            if kind.name in registry:
                where = package.replace(".", "/")
                raise RuntimeError(f"kind '{kind.name}' is defined twice (again in {where}/{module_name}.py)")
            registry[kind.name] = kind
    return registry


def models(registry: dict[str, Any]) -> tuple[Any, ...]:
    """The spec models, one per model (a family may share one), in registry order."""
    return tuple(dict.fromkeys(kind.spec for kind in registry.values()))
