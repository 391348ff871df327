"""Every registered op lacks nothing: spec model in the union, templates, a parity case, docs.

The op lists all come from specgen.kinds.ops.REGISTRY; these checks fail naming the op and what
it misses, so that adding an op module tells its author what else to write (docs/ops.md).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args

import pytest
from test_op_parity import CASES, covered_ops

from specgen.kinds.ops import REGISTRY, Layer, OpDef
from specgen.render.environment import templates_dir
from specgen.spec.layers import Activation

ROOT = Path(__file__).resolve().parents[1]
OPS = sorted(REGISTRY)


def _union_members() -> tuple[Any, ...]:
    union = get_args(Layer)[0]
    return get_args(union) or (union,)


def _op_names(model: Any) -> tuple[str, ...]:
    return get_args(model.model_fields["op"].annotation)


def _documented_ops() -> set[str]:
    """Ops named in a heading of docs/spec.md's "### Ops" section, e.g. "#### `max_pool`, `avg_pool`"."""
    text = (ROOT / "docs" / "spec.md").read_text()
    section = text.split("\n### Ops\n", 1)[1].split("\n### ", 1)[0]
    return {name for line in section.splitlines() if line.startswith("#### ")
            for name in re.findall(r"`([a-z0-9_]+)`", line)}


@pytest.mark.parametrize("name", OPS)
def test_op_has_a_spec_model_in_the_union(name: str) -> None:
    op = REGISTRY[name]
    assert op.name == name
    assert op.spec in _union_members(), f"op '{name}': its spec model {op.spec.__name__} is not in the Layer union"
    assert name in _op_names(op.spec), (
        f"op '{name}': its spec model {op.spec.__name__} does not accept op: {name} "
        f"(its `op` Literal lists {list(_op_names(op.spec))})")


@pytest.mark.parametrize("name", OPS)
def test_op_has_both_templates(name: str) -> None:
    op: OpDef = REGISTRY[name]
    tf = templates_dir() / "tf" / "ops" / f"{op.tf_template}.py.j2"
    assert tf.is_file(), f"op '{name}': missing TensorFlow template {tf.relative_to(templates_dir().parent)}"
    for template in op.onnx_templates:  # none when the op declares onnx_template=None (no ONNX node)
        onnx = templates_dir() / "onnx" / "ops" / f"{template}.onnx.j2"
        assert onnx.is_file(), f"op '{name}': missing ONNX template {onnx.relative_to(templates_dir().parent)}"


@pytest.mark.parametrize("name", OPS)
def test_op_has_a_parity_case(name: str) -> None:
    assert name in covered_ops(), (
        f"op '{name}': no case in tests/test_op_parity.py CASES has a layer with op: {name}")


@pytest.mark.parametrize("name", OPS)
def test_op_is_documented(name: str) -> None:
    assert name in _documented_ops(), (
        f"op '{name}': docs/spec.md has no heading naming it (add a \"#### `{name}`\" section under ### Ops)")


def test_every_union_member_is_registered() -> None:
    """A model in the union whose ops are not all registered would validate and then fail to resolve."""
    for model in _union_members():
        unregistered = [n for n in _op_names(model) if n not in REGISTRY or REGISTRY[n].spec is not model]
        assert not unregistered, f"spec model {model.__name__} accepts op(s) {unregistered} that no OpDef owns"


def test_activation_key_lists_exactly_the_ops_that_can_be_activations() -> None:
    allowed = set(get_args(Activation)) - {"linear"}
    capable = {name for name, op in REGISTRY.items() if op.as_activation is not None}
    assert allowed <= set(REGISTRY), f"Activation (spec/layers.py) names unregistered op(s) {sorted(allowed - set(REGISTRY))}"
    assert allowed == capable, (
        f"Activation (spec/layers.py) lists {sorted(allowed)} but the ops with as_activation are {sorted(capable)}")


def test_parity_cases_name_registered_ops() -> None:
    unknown = sorted(covered_ops() - set(REGISTRY))
    assert not unknown, f"tests/test_op_parity.py CASES use op(s) {unknown} that are not registered"
    assert CASES


def test_layout_and_templates_are_well_formed() -> None:
    for name, op in REGISTRY.items():
        assert op.layout in ("first", "any", "last"), name
        assert re.fullmatch(r"[a-z0-9_]+", op.tf_template), name
        assert all(re.fullmatch(r"[a-z0-9_]+", t) for t in op.onnx_templates), name
