"""Every registered op lacks nothing: spec model in the union, templates, a parity case, docs, the Keras
classes it declares; and no module outside specgen/kinds/ops names an op (its capabilities are OpDef fields).

The op lists all come from specgen.kinds.ops.REGISTRY; these checks fail naming the op and what
it misses, so that adding an op module tells its author what else to write (docs/extending.md, Ops).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any, get_args

import pytest
from test_op_parity import CASES, covered_ops

from specgen.fields.layers import Activation
from specgen.kinds.ops import REGISTRY, Layer, OpDef
from specgen.render.environment import templates_dir

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
    assert allowed <= set(REGISTRY), f"Activation (fields/layers.py) names unregistered op(s) {sorted(allowed - set(REGISTRY))}"
    assert allowed == capable, (
        f"Activation (fields/layers.py) lists {sorted(allowed)} but the ops with as_activation are {sorted(capable)}")


def test_parity_cases_name_registered_ops() -> None:
    unknown = sorted(covered_ops() - set(REGISTRY))
    assert not unknown, f"tests/test_op_parity.py CASES use op(s) {unknown} that are not registered"
    assert CASES


def test_layout_and_templates_are_well_formed() -> None:
    for name, op in REGISTRY.items():
        assert op.layout in ("first", "any", "last"), name
        assert re.fullmatch(r"[a-z0-9_]+", op.tf_template), name
        assert all(re.fullmatch(r"[a-z0-9_]+", t) for t in op.onnx_templates), name


# --- an op's capabilities live on its OpDef: no op name outside specgen/kinds/ops ---------------------------------

# Op names used in another sense, by file: the names the file may hold, and why they are no op there.
OTHER_SENSES: dict[str, tuple[frozenset[str], str]] = {
    "specgen/fields/layers.py": (frozenset(get_args(Activation)) - {"linear"}, (
        "the `activation:` enum, a literal for the JSON schema: spec/ sits below kinds/ops, and "
        "test_activation_key_lists_exactly_the_ops_that_can_be_activations checks it against the registry")),
    "specgen/runtime/lib/recurrent.py": (frozenset({"tanh", "sigmoid", "relu", "hard_sigmoid", "concat"}), (
        "a recurrent cell's activations in TensorFlow (kinds/ops/recurrent.py's RecurrentActivation), and "
        "Bidirectional's merge_mode concat")),
    "specgen/importers/keras/bidirectional.py": (frozenset({"concat"}), "Bidirectional's merge_mode"),
    "specgen/render/mask_plan.py": (frozenset({"concat"}), "Bidirectional's merge_mode"),
    "templates/onnx/masks.onnx.j2": (frozenset({"concat"}), "Bidirectional's merge_mode"),
    "specgen/kinds/compat.py": (frozenset({"batch_norm", "dropout"}), (
        "rows of the feature-compatibility table, named after the layers they refuse; Levenberg-Marquardt finds a "
        "layer's row by its op's name when OpDef.stateful says so")),
    "specgen/kinds/features/levenberg_marquardt.py": (frozenset({"batch_norm", "dropout"}), (
        "its refusals beside those table rows, by the rows' names (the layer's op name when OpDef.stateful says so)")),
}
JINJA = re.compile(r"{%.*?%}|{{.*?}}", re.S)
QUOTED = re.compile(r"""["']([a-z0-9_]+)["']""")


def _op_name_uses(tree: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) for each op name compared against, or listed beside another op name (a table, a switch)."""
    def named(nodes: list[ast.expr | None]) -> set[str]:
        return {n.value for n in nodes if isinstance(n, ast.Constant) and n.value in names}

    found: list[tuple[int, str]] = []
    compared: set[int] = set()  # the collections a comparison reads (`op in ("lstm", "gru")`): counted with it
    for node in ast.walk(tree):  # breadth first: a comparison before its sides
        hits: set[str] = set()
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                listed = side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else []
                compared |= {id(side)} if listed else set()
                hits |= named([side, *listed])
        elif id(node) in compared:
            continue
        elif isinstance(node, ast.Tuple | ast.List | ast.Set) and len(named(node.elts)) > 1:
            hits = named(node.elts)
        elif isinstance(node, ast.Dict):  # keyed by op names, or mapping something onto them
            hits = {n for part in (node.keys, node.values) if len(named(part)) > 1 for n in named(part)}
        elif isinstance(node, ast.Call) and len(named(node.args)) > 1:  # pick("conv2d", "dense", ...)
            hits = named(node.args)
        found += [(getattr(node, "lineno", 0), name) for name in sorted(hits)]
    return found


def _template_uses(text: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) for each quoted op name inside a Jinja expression or statement."""
    return [(text.count("\n", 0, block.start() + quoted.start()) + 1, quoted.group(1))
            for block in JINJA.finditer(text) for quoted in QUOTED.finditer(block.group())
            if quoted.group(1) in names]


def _uses_outside_the_registry() -> dict[str, list[tuple[int, str]]]:
    names = set(REGISTRY)
    found = {str(path.relative_to(ROOT)): _op_name_uses(ast.parse(path.read_text()), names)
             for path in sorted((ROOT / "specgen").rglob("*.py"))
             if not path.is_relative_to(ROOT / "specgen" / "kinds" / "ops")}
    found |= {str(path.relative_to(ROOT)): _template_uses(path.read_text(), names)
              for path in sorted((ROOT / "templates").rglob("*.j2"))
              if path.parent.name != "ops"}  # templates/*/ops/<op>: each op's own templates
    return {path: uses for path, uses in found.items() if uses}


def test_no_op_is_named_outside_the_registry() -> None:
    """A module that compares op names or keeps a table of them holds an op capability a new op cannot see: it
    belongs on OpDef (kinds/ops/base.py), which the module then asks (docs/extending.md, Ops)."""
    uses = _uses_outside_the_registry()
    named = {path: [f"{line}: {name}" for line, name in found if name not in OTHER_SENSES.get(path, (set(), ""))[0]]
             for path, found in uses.items()}
    assert {path: lines for path, lines in named.items() if lines} == {}, (
        "op names compared or listed outside specgen/kinds/ops (file: line: name); declare the capability on OpDef")
    stale = {path: sorted(names - {name for _, name in uses.get(path, [])})
             for path, (names, _) in OTHER_SENSES.items()}
    assert {path: names for path, names in stale.items() if names} == {}, "OTHER_SENSES allows names no longer there"


def test_the_name_check_finds_comparisons_and_tables() -> None:
    source = ('if node.op == "dense": pass\nif op in ("lstm", "gru"): pass\nKERNELS = {"conv2d": 1, "dense": 2}\n'
              'PAIR = ("add", "multiply")\nMODE = "concat" if x else "sum"\nONE = {"op": "relu"}\nb.add("relu", "relu")\n')
    assert _op_name_uses(ast.parse(source), set(REGISTRY)) == [
        (1, "dense"), (2, "gru"), (2, "lstm"), (3, "conv2d"), (3, "dense"), (4, "add"), (4, "multiply")]
    assert _template_uses('{% if s.op == "dense" %}\nGelu <approximate = "tanh">\n{{ "relu" }}', set(REGISTRY)) == [
        (1, "dense"), (3, "relu")]


KERAS_CONFIG: dict[str, dict[str, Any]] = {  # beyond the keys the converters need of every class (units, ...)
    "Rescaling": {"scale": 0.5},
    "Bidirectional": {"layer": {"class_name": "LSTM", "config": {"units": 2}}},
}


@pytest.mark.parametrize(("name", "cls"), [(name, cls) for name in OPS for cls in REGISTRY[name].keras])
def test_keras_class_imports_as_its_op(name: str, cls: str) -> None:
    """OpDef.keras: the importer has a converter for the class, and it makes this op (the converters a family shares
    read their op from these declarations: importers/keras/base.py's KERAS_OPS)."""
    from specgen.importers.keras.args import Args
    from specgen.importers.keras.dag import KLayer, Ref
    from specgen.importers.keras.layers import CONVERTERS

    declared = [c for op in REGISTRY.values() for c in op.keras]
    assert declared.count(cls) == 1, f"Keras class {cls} is declared by more than one op"
    assert cls in CONVERTERS, f"op '{name}': OpDef.keras names {cls}, which importers/keras/layers.py cannot convert"
    config = {"units": 2, "filters": 2, "kernel_size": 3, "rate": 0.5, "input_dim": 4, "output_dim": 2,
              "target_shape": [2], "num_heads": 1, "key_dim": 2, **KERAS_CONFIG.get(cls, {})}
    layer = KLayer("x", cls, "keras.layers", config, [Ref("q"), Ref("v")] if cls == "MultiHeadAttention" else [])
    made = CONVERTERS[cls](Args(layer, False, []), [(None, 4, 4, 2)])
    assert isinstance(made, dict) and made["op"] == name, f"Keras class {cls} imports as {made}, not as op '{name}'"
