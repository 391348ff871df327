"""The data-source registry: one module per kind of `data.train` / `data.eval` source.

Each module defines its spec model and a `KINDS` tuple holding its `SourceDef`; modules are found by
listing the package (kinds/collect.py). Derived here: `REGISTRY` (kind -> SourceDef), `DataSource`
(the union of `data.train` / `data.eval`, which spec/io.py uses), `kind_of` and docs/spec.md's table of
sources. This package is the only place that compares a value against a source kind's name.
docs/extending.md says what a new source needs; tests/test_source_registry.py names what one lacks.
"""

from __future__ import annotations

import os
from typing import Any

from specgen.fields.unions import by_key, by_shape
from specgen.kinds.collect import collect
from specgen.kinds.sources.base import Refs, Refusal, Resolved, SourceDef

__all__ = ["REGISTRY", "SCHEMA_ORDER", "DataSource", "Refs", "Refusal", "Resolved", "SourceDef", "clashes", "complete",
           "kind_of", "markdown"]

# The first kinds, in the order the published JSON schema lists the union's branches; later ones follow
# alphabetically (kinds/collect.py), so a new source edits no list and moves no schema byte.
SCHEMA_ORDER = ("npz", "csv", "tfrecord")

REGISTRY: dict[str, SourceDef] = collect(__name__, __path__, SCHEMA_ORDER)


def _keys() -> str:
    quoted = [f"'{name}'" for name in REGISTRY]
    return ", ".join(quoted[:-1]) + " or " + quoted[-1] if len(quoted) > 1 else quoted[0]


# One source of `data.train` / `data.eval`: the branch is picked by the one kind key the mapping has, so
# an error names that branch only (fields/unions.py).
DataSource = by_shape(by_key(*REGISTRY), f"a data source with exactly one of the keys {_keys()}",
                      **{name: source.spec for name, source in REGISTRY.items()})


def kind_of(source: Any) -> SourceDef:
    """The kind of a validated source (an instance of one registered spec model)."""
    return next(s for s in REGISTRY.values() if isinstance(source, s.spec))


def clashes(data: Any) -> list[Refusal]:
    """What the two stages' sources may not share, placed from the spec's root (("data", "eval", ...)): a file
    cache path (a copy-paste), where each stage would read the other's examples, or each start remove the other's
    cache as made from other files. For validate (ir/resolve.py) and each reader (a spec built in code reaches it
    unvalidated)."""
    train, eval_ = (getattr(getattr(data, stage, None), "cache", None) for stage in ("train", "eval"))
    if train is None or eval_ is None or "memory" in (train, eval_) or os.path.normpath(train) != os.path.normpath(eval_):
        return []
    return [(("data", "eval", "cache"), f"cache '{eval_}' is also data.train's cache path; each stage's examples "
             f"need their own cache files (one path would serve one stage the other's examples): give data.eval "
             f"another path, such as '{eval_}-eval'")]


def complete(spec: Any) -> Any:
    """`spec` (a validated Spec) with each source's defaults that depend on the rest of it (SourceDef.complete)."""
    if spec.data is None:
        return spec
    labels = _loss_labels(spec)
    update = {stage: kind_of(s).complete(s, spec.inputs, labels) for stage in ("train", "eval")
              if (s := getattr(spec.data, stage)) is not None}
    if all(update[stage] is getattr(spec.data, stage) for stage in update):
        return spec
    return spec.model_copy(update={"data": spec.data.model_copy(update=update)})


def _loss_labels(spec: Any) -> list[str]:
    """The labels the loss reads from the data: ir/loss_terms.data_terms' rule, restated here because the
    registries sit below ir/ (a term reading `logits` or `predictions` whose labels name no output)."""
    terms = spec.loss if isinstance(spec.loss, list) else [] if spec.loss is None else [spec.loss]
    reads = [t.labels for t in terms if (hasattr(t, "logits") or hasattr(t, "predictions"))
             and getattr(t, "labels", None) is not None and t.labels not in spec.outputs]
    return list(dict.fromkeys(reads))


def markdown() -> str:
    """docs/spec.md's table of the registered sources (tests/test_source_registry.py keeps it current)."""
    rows = ["| source | keys |", "|---|---|"] + [f"| `{s.name}` | {s.doc} |" for s in REGISTRY.values()]
    return "\n".join(rows) + "\n"
