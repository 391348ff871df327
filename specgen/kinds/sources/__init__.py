"""The data-source registry: one module per source kind, each with a `SOURCE` (base.SourceDef).

Modules are found by listing the package. `ORDER` is the one list a new source edits: the order of the
`data.train` / `data.eval` union's branches, which is the order schemas/specgen.schema.json lists them
(so appending keeps the schema's existing bytes) and the order of docs/spec.md's table of sources.
This is the only place that compares a value against a source kind's name.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from specgen.kinds.sources.base import Refs, Refusal, Resolved, SourceDef
from specgen.spec.unions import by_key, by_shape

__all__ = ["ORDER", "REGISTRY", "DataSource", "Refs", "Refusal", "Resolved", "SourceDef", "kind_of", "markdown"]

ORDER = ("npz", "csv", "tfrecord")
NOT_SOURCES = ("base",)


def _collect() -> dict[str, SourceDef]:
    found = sorted(m.name for m in pkgutil.iter_modules(__path__)
                   if m.name not in NOT_SOURCES and not m.name.startswith("_"))
    missing = [name for name in found if name not in ORDER]
    if missing:
        raise RuntimeError(f"source module(s) {missing} have no place in specgen/kinds/sources ORDER")
    sources = {}
    for name in ORDER:
        source = importlib.import_module(f"{__name__}.{name}").SOURCE
        if source.name != name:
            raise RuntimeError(f"specgen/kinds/sources/{name}.py defines source '{source.name}'")
        sources[name] = source
    return sources


REGISTRY: dict[str, SourceDef] = _collect()


def _keys() -> str:
    quoted = [f"'{name}'" for name in ORDER]
    return ", ".join(quoted[:-1]) + " or " + quoted[-1] if len(quoted) > 1 else quoted[0]


# One source of `data.train` / `data.eval`: the branch is picked by the one kind key the mapping has, so
# an error names that branch only (spec/unions.py).
DataSource = by_shape(by_key(*ORDER), f"a data source with exactly one of the keys {_keys()}",
                      **{name: source.spec for name, source in REGISTRY.items()})


def kind_of(source: Any) -> SourceDef:
    """The kind of a validated source (an instance of one registered spec model)."""
    return next(s for s in REGISTRY.values() if isinstance(source, s.spec))


def markdown() -> str:
    """docs/spec.md's table of the registered sources (tests/test_source_registry.py keeps it current)."""
    rows = ["| source | keys |", "|---|---|"] + [f"| `{s.name}` | {s.doc} |" for s in REGISTRY.values()]
    return "\n".join(rows) + "\n"
