"""Every registered op lacks nothing: spec model in the union, templates, a parity case, a Keras parity case when
Keras has the op, docs (its heading, and the prose lists of activations), the Keras classes it declares; and no module
outside specgen/kinds/ops names an op (its capabilities are OpDef fields).

The op lists all come from specgen.kinds.ops.REGISTRY; these checks fail naming the op and what
it misses, so that adding an op module tells its author what else to write (docs/extending.md, Ops).
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Sequence
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
        f"op '{name}': no TF-vs-onnxruntime parity case has a layer with op: {name} (add CASES to "
        f"tests/op_cases_<family>.py, a new file for a new family, or to tests/test_op_parity.py's CASES)")


@pytest.mark.parametrize("name", OPS)
def test_op_is_documented(name: str) -> None:
    assert name in _documented_ops(), (
        f"op '{name}': docs/spec.md has no heading naming it (add a \"#### `{name}`\" section under ### Ops)")


# --- Keras parity: the numerical reference of an op Keras has (DESIGN.md) -------------------------------------------

# Files that compare generated layers with Keras' own (tests/keras_parity.py's harness or its tolerances) under
# another name than tests/test_keras_parity_*.py, which are all read. A new op's cases go in a
# test_keras_parity_<family>.py file.
KERAS_PARITY_FILES = ("test_bidirectional_keras.py", "test_gelu_approximate.py", "test_masks_keras.py",
                      "test_positional_embedding.py", "test_resize_keras.py", "test_return_state.py",
                      "test_rms_norm.py", "test_transformer_blocks.py")
# Ops Keras has whose only comparison with Keras is through the importer: a Keras model holding the class, imported,
# its generated model compared with Keras' predict. They move values and compute nothing, so that comparison (their
# order, their shapes) is all there is to check: file -> why.
KERAS_VIA_IMPORT: dict[str, tuple[str, str]] = {
    "flatten": ("test_import_keras.py", "a view: test_legacy_h5's Flatten after convs against predict (and "
                                        "tests/test_flatten_order.py for Keras' row order)"),
    "reshape": ("test_import_keras.py", "a view: the functional model's Reshape against predict"),
    "concat": ("test_import_keras.py", "a copy: the functional model's Concatenate against predict"),
}
# Ops Keras has that no Keras comparison can check, and why.
NO_KERAS_PARITY: dict[str, str] = {
    "dropout": ("random: its training mask is drawn from specgen's stateless per-step seeds, which Keras' generator "
                "never reproduces, and at inference it is the identity (test_op_parity.py's dropout case)"),
}
SPEC_LAYER_KEYS = ("op", "activation")  # a spec layer names an op by these


def _module_values(tree: ast.Module) -> dict[str, ast.expr]:
    values: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            values |= {t.id: node.value for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            values[node.target.id] = node.value
    return values


def _strings(node: ast.AST, values: dict[str, ast.expr], seen: frozenset[str] = frozenset()) -> set[str]:
    """The string constants of an expression, through the module-level names it reads (`ACTIVATIONS`)."""
    found: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            found.add(n.value)
        elif isinstance(n, ast.Name) and n.id in values and n.id not in seen:
            found |= _strings(values[n.id], values, seen | {n.id})
    return found


def _keras_parity_ops(source: str) -> set[str]:
    """The ops a Keras parity file runs as spec layers: `{"op": "softsign"}` or `{"activation": "softsign"}`, or the
    values a loop or a parametrize gives the variable in `{"op": op}` (`for act in ACTIVATIONS`)."""
    tree = ast.parse(source)
    values, found, variables = _module_values(tree), set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value in SPEC_LAYER_KEYS:
                    if isinstance(value, ast.Constant) and isinstance(value.value, str):
                        found.add(value.value)
                    elif isinstance(value, ast.Name):
                        variables.add(value.id)
    for node in ast.walk(tree):
        if isinstance(node, ast.For | ast.comprehension):
            if {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)} & variables:
                found |= _strings(node.iter, values)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "parametrize":
            names = {part.strip() for name in _strings(node.args[0], {}) for part in name.split(",")} if node.args else set()
            if names & variables and len(node.args) > 1:
                found |= _strings(node.args[1], values)
    return found & set(REGISTRY)


@functools.cache
def _keras_parity_cases() -> dict[str, list[str]]:
    """Op -> the Keras parity files that run it (read once: every op's test asks)."""
    found: dict[str, list[str]] = {}
    paths = [*sorted((ROOT / "tests").glob("test_keras_parity*.py")), *(ROOT / "tests" / f for f in KERAS_PARITY_FILES)]
    for path in paths:
        for op in _keras_parity_ops(path.read_text(encoding="utf-8")):
            found.setdefault(op, []).append(path.name)
    return found


def _keras_has(name: str) -> bool:
    """Keras has the op: a layer class it imports from, or an activation of its name."""
    op = REGISTRY[name]
    return bool(op.keras) or (op.as_activation is not None and op.as_activation.keras)


@pytest.mark.parametrize("name", [name for name in OPS if _keras_has(name)])
def test_op_keras_has_is_compared_with_keras(name: str) -> None:
    if name in NO_KERAS_PARITY:
        assert name not in _keras_parity_cases(), f"op '{name}': has a Keras parity case now; drop it from NO_KERAS_PARITY"
        return
    if name in KERAS_VIA_IMPORT:
        file, _ = KERAS_VIA_IMPORT[name]
        text = (ROOT / "tests" / file).read_text(encoding="utf-8")
        assert any(re.search(rf"\.{cls}\(", text) for cls in REGISTRY[name].keras), (
            f"op '{name}': KERAS_VIA_IMPORT says tests/{file} compares a Keras {'/'.join(REGISTRY[name].keras)} "
            "with its import, and it builds none")
        return
    assert name in _keras_parity_cases(), (
        f"op '{name}': Keras has it ({', '.join(REGISTRY[name].keras) or 'an activation of that name'}) but no Keras "
        f"parity case runs it: add one to tests/test_keras_parity_<family>.py (a spec layer with op: {name} and the "
        "Keras layer, compared by tests/keras_parity.py's compare: forward and gradients)")


def test_keras_parity_files_exist_and_use_the_harness() -> None:
    for file in KERAS_PARITY_FILES:
        text = (ROOT / "tests" / file).read_text(encoding="utf-8")
        assert "from keras_parity import" in text, f"tests/{file}: listed in KERAS_PARITY_FILES, compares nothing"
    stale = sorted(set(KERAS_VIA_IMPORT) & set(_keras_parity_cases()))
    assert not stale, f"ops with a Keras parity case of their own now: {stale}; drop them from KERAS_VIA_IMPORT"


def test_keras_parity_detection_reads_layers_loops_and_parameters() -> None:
    source = ('ACTS = ("relu6", "selu")\nPAIRS = [("add", "Add")]\n'
              'A = [{"op": "softmax"}, {"op": "dense", "activation": "tanh"}]\n'
              'B = [{"op": act} for act in ACTS]\n'
              '@pytest.mark.parametrize(("op", "keras_name"), PAIRS)\ndef test_x(op): return {"op": op}\n'
              '@pytest.mark.parametrize("merge_mode", ["concat"])\ndef test_y(merge_mode): return {"mode": merge_mode}\n')
    assert _keras_parity_ops(source) == {"relu6", "selu", "add", "softmax", "dense", "tanh"}


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


def _backticked(text: str) -> list[str]:
    return re.findall(r"`([a-z0-9_]+)`", text)


def _difference(listed: list[str], wanted: list[str]) -> str:
    lacks, extra = sorted(set(wanted) - set(listed)), sorted(set(listed) - set(wanted))
    return "; ".join([*([f"lacks {', '.join(lacks)}"] if lacks else []), *([f"names {', '.join(extra)}, which it "
                                                                          "should not"] if extra else [])])


def test_docs_list_every_activation() -> None:
    """The prose lists of `activation:` values: docs/spec.md's "The `activation` key" and docs/import.md's
    `Activation` row (the values the Keras importer reads: AsActivation.keras)."""
    spec = (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")
    sentence = spec.split("\n### The `activation` key\n", 1)[1].split("accepts one of", 1)[1].split("(`linear` and", 1)[0]
    listed, wanted = _backticked(sentence), list(get_args(Activation))
    assert sorted(listed) == sorted(wanted), (
        f"docs/spec.md, \"The `activation` key\": its list of values {_difference(listed, wanted)} "
        "(Activation in specgen/fields/layers.py)")
    row = next(line for line in (ROOT / "docs" / "import.md").read_text(encoding="utf-8").splitlines()
               if line.startswith("| `Activation` |"))
    listed = _backticked(row.split("|")[2].split("; `linear`")[0])
    wanted = [name for name, op in REGISTRY.items() if op.as_activation is not None and op.as_activation.keras]
    assert sorted(listed) == sorted(wanted), (
        f"docs/import.md, the `Activation` row of the layer table: {_difference(listed, wanted)} (the importer reads "
        "the activations whose AsActivation.keras is true)")


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
    def named(nodes: Sequence[ast.expr | None]) -> set[str]:
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
