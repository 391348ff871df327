"""The compatibility table (specgen/kinds/compat.py) is what specgen does, and what the docs say.

Every pair of the table's names either combines (and a golden spec uses it: tests/golden/pairs.py) or is
refused with its exact message: by `specgen validate` on tests/golden/probe.py's spec for the pair, or,
for the three refused when `specgen train` starts, as recorded in tests/golden/compat.py before issue 18.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from golden import compat as golden
from golden import pairs, probe

from specgen.kinds import compat, features
from specgen.kinds.losses import REGISTRY as LOSSES
from specgen.kinds.metrics import REGISTRY as METRICS
from specgen.kinds.optimizers import REGISTRY as OPTIMIZERS

ROOT = Path(__file__).resolve().parents[1]
# The facts of probe.py's specs: the levenberg_marquardt optimizer is 'first', the other 'second', the
# accumulation and loss-term counts 2, and its stateful layers 'bn' and 'drop'.
PROBE_FACTS = {"this": "first", "other": "second", "received": 2, "count": 2}
LAYERS = {"batch_norm": "bn", "dropout": "drop"}
RUNTIME_FACTS = {"strategy": "<strategy>", "replicas": "<N>"}  # the placeholders tests/golden/compat.py prints


def _golden(p: tuple[str, str]) -> tuple[str, str]:
    """A pair of specgen's table (in its order: the features' pipeline order) as the golden writes it (its order,
    the seed of the table before the features declared their own rows)."""
    return golden.pair(*p)


def _validate_message(a: str, b: str) -> str:
    other = b if a == "levenberg_marquardt" else a
    text = compat.message(a, b, **PROBE_FACTS, layer=LAYERS.get(other, ""), op=other)
    # Pydantic prefixes a key's refusal with the key (kinds/optimizers/levenberg_marquardt.py refuses these keys).
    key = {"schedule": "learning_rate", "weight_decay": "weight_decay", "optimizer_clip": "clip"}.get(other)
    return f"{key}: {text}" if key else text


def test_the_universe_is_the_golden_sets() -> None:
    assert sorted(compat.UNIVERSE) == sorted(golden.FEATURE_NAMES)


def test_the_table_is_derived_from_the_registry() -> None:
    """Each feature's names (FeatureDef.table) in pipeline order, the settings, then one name per optimizer kind."""
    names = [name for f in features.PIPELINE_DEFS for name, _ in f.table]
    assert list(compat.UNIVERSE) == [*names, *compat.SETTINGS, *(f"opt_{k}" for k in compat.OPTIMIZER_KINDS)]
    assert list(compat.REFUSED) == [compat.pair(own, other) for f in features.PIPELINE_DEFS for own, other, _ in f.refuses]
    assert [f.name for f in features.PIPELINE_DEFS if not f.table] == list(features.SETTINGS) == ["precision"]


def test_every_registered_feature_is_in_the_table() -> None:
    assert sorted(set(compat.FEATURE_OF.values())) == sorted(features.REGISTRY)
    assert set(compat.FEATURE_OF) <= set(compat.UNIVERSE)


def test_every_optimizer_kind_is_a_name_of_the_table() -> None:
    """levenberg_marquardt is a feature of its own; every other kind is `opt_<kind>`, refused beside it."""
    for kind in OPTIMIZERS:
        name = kind if kind in compat.FEATURE_OF else f"opt_{kind}"
        assert name in compat.UNIVERSE, f"optimizer kind '{kind}': no name '{name}' in compat.UNIVERSE"
        if name != "levenberg_marquardt":
            assert not compat.allowed("levenberg_marquardt", name), f"optimizer kind '{kind}': allowed beside LM"


@pytest.mark.parametrize(("axis", "registry"), [("optimizer", OPTIMIZERS), ("loss", LOSSES), ("metric", METRICS)])
def test_every_registered_kind_is_in_the_golden_set(axis: str, registry: dict[str, object]) -> None:
    used = set().union(*(pairs.kinds(spec) for spec in pairs.golden_specs().values()))
    for kind in registry:
        assert kind in pairs.AXES[axis], (
            f"{axis} kind '{kind}': not in AXES['{axis}'] of tests/golden/pairs.py (docs/extending.md: a new kind "
            "extends the golden set)")
        assert (axis, kind) in used, f"{axis} kind '{kind}': no golden spec uses it"


def test_allowed_pairs_are_the_golden_ones_and_golden_specs_cover_them() -> None:
    allowed = {compat.pair(a, b) for a, b in itertools.combinations(compat.UNIVERSE, 2) if compat.allowed(a, b)}
    assert {_golden(p) for p in allowed} == {(a, b) for a, later in golden.ALLOWED.items() for b in later}
    assert len(allowed) == 331 and len(compat.REFUSED) == 20
    covered = pairs.coverage(pairs.golden_specs())
    assert sorted(p for p in allowed if not covered.get(_golden(p))) == []


def test_refused_pairs_keep_todays_messages() -> None:
    validate = {_golden(p): (_validate_message(*p),) for p, r in compat.REFUSED.items()
                if r.where.startswith("specgen validate")}
    assert validate == golden.REFUSED
    runtime = {_golden(p): (r.where, compat.message(*p, **RUNTIME_FACTS)) for p, r in compat.REFUSED.items()
               if not r.where.startswith("specgen validate")}
    assert runtime == golden.RUNTIME_REFUSED


def test_validate_refuses_exactly_the_tables_validate_pairs(tmp_path: Path) -> None:
    found = probe.validate_all(tmp_path)
    refused = {_golden(p): (_validate_message(*p),) for p, r in compat.REFUSED.items()
               if r.where.startswith("specgen validate")}
    assert {p: m for p, m in found.items() if m} == refused


def _section(text: str, marker: str) -> str:
    match = re.search(rf"<!-- {marker}.*?-->\n\n(.*?)<!-- end of generated table -->", text, re.S)
    assert match, f"docs/features.md has no '{marker}' section"
    return match[1]


def test_the_docs_hold_the_generated_tables() -> None:
    text = (ROOT / "docs" / "features.md").read_text(encoding="utf-8")
    assert _section(text, "names table") == compat.names_markdown()
    assert _section(text, "compatibility table") == compat.markdown()
    assert _section(text, "features table") == features.markdown()
