"""Names in generated code (rt8 F1) and the name length (rt8 F5).

F1: a layer named `zip` became the local `zip`, and a grouped convolution's `zip(...)` called the tensor: train died
with a traceback. The protected names are not a list kept by hand here: every op's parity case
(tests/test_op_parity.py with tests/op_cases_*.py) is rendered, and every name its forward pass reads that no spec
name binds (globals, builtins, parameters) must come out of ir/naming.py's py_name with a '_'. Then each case whose
forward pass calls a builtin runs with an input and a layer named like that builtin, and a spec whose layers are
named like common builtins trains a step.

F5: docs/security.md quoted a pattern the code did not use, and a 64-letter name was refused with a message that
never said why. A name part is now at most MAX_NAME_CHARS characters, said so when it is longer, and the doc's
lines are checked against specgen/fields/base.py.
"""

from __future__ import annotations

import ast
import re
import symtable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_op_parity import CASES, TOLERANCE, check_parity, spec_text
from test_spec_semantics import validate

from specgen.cli import main
from specgen.fields import base
from specgen.fields.base import IDENT, LAYER, MAX_NAME_CHARS, is_identifier
from specgen.ir.model import ModelIR
from specgen.ir.naming import py_name
from specgen.ir.resolve import build_ir
from specgen.kinds.ops import REGISTRY
from specgen.render.files import render_model_py
from specgen.spec.load import load_spec_text

ROOT = Path(__file__).resolve().parents[1]


def _scopes(table: symtable.SymbolTable) -> Iterator[symtable.SymbolTable]:
    yield table
    for child in table.get_children():
        yield from _scopes(child)


def _forward(source: str) -> symtable.SymbolTable:
    """The generated model's layer_outputs, where every input and layer is a Python local."""
    module = symtable.symtable(source, "model.py", "exec")
    model = next(t for t in module.get_children() if t.get_type() == "class")
    return next(t for t in model.get_children() if t.get_name() == "layer_outputs")


def template_names(ir: ModelIR, source: str) -> set[str]:
    """What the forward pass reads that no spec name binds there: its parameters, the locals a template binds for
    itself, and every global or builtin it (or a comprehension in it) reads. A layer local named like one shadows it."""
    spec_locals = {i.py_name for i in ir.inputs} | {n.py_name for n in ir.nodes}
    forward, found = _forward(source), set()
    for scope in _scopes(forward):
        for symbol in scope.get_symbols():
            name = symbol.get_name()
            if scope is forward and name not in spec_locals and not name.startswith(tuple(f"{s}_" for s in spec_locals)):
                found.add(name)  # a parameter or a template's own local ('name_*' locals are a layer's own temporaries)
            elif symbol.is_global() and symbol.is_referenced():
                found.add(name)
    return found


def _rendered() -> dict[str, tuple[ModelIR, set[str]]]:
    """Every op parity case: its IR and the names its forward pass reads that no spec name binds."""
    found = {}
    for case, (inputs, layers) in sorted(CASES.items()):
        ir = build_ir(load_spec_text(spec_text(case, inputs, layers), f"{case}.yaml"))
        found[case] = (ir, template_names(ir, render_model_py(ir)))
    return found


RENDERED = _rendered()


def test_every_op_has_a_case_so_its_template_is_read() -> None:
    rendered = {n.op for ir, _ in RENDERED.values() for n in ir.nodes}
    missing = sorted(set(REGISTRY) - rendered)
    assert not missing, f"ops without a case in tests/op_cases_*.py, whose templates no test reads: {missing}"


def test_every_name_the_forward_pass_reads_is_suffixed_in_a_layer_local() -> None:
    """A layer or input named like anything the rendered forward pass reads gets a '_': else the local shadows it."""
    exposed = {name: case for case, (_, names) in RENDERED.items() for name in names if py_name(name) == name}
    assert not exposed, f"names a layer local would shadow (name: a case that reads it): {exposed}"


def _builtin_cases() -> list[tuple[str, str]]:
    """(case, builtin) for every builtin some case's forward pass calls (today: zip, in grouped convolutions)."""
    import builtins

    return sorted((case, name) for case, (_, names) in RENDERED.items() for name in names if hasattr(builtins, name))


def _renamed_input(inputs: dict[str, Any], layers: list[dict[str, Any]], new: str) -> tuple[dict[str, Any], list[Any]]:
    """The case with its one input named `new`, every reference to it renamed too."""
    (old, value), = inputs.items()

    def ref(name: Any) -> Any:
        return new if name == old else [ref(n) for n in name] if isinstance(name, list) else name

    return {new: value}, [{k: ref(v) if k in ("input", "inputs") else v for k, v in layer.items()} for layer in layers]


def _layer_first(inputs: dict[str, Any], layers: list[dict[str, Any]], name: str) -> tuple[dict[str, Any], list[Any]]:
    """The case read through a first layer named `name` (stop_gradient: the identity in inference)."""
    (old, _), = inputs.items()
    renamed = [{k: ([name if n == old else n for n in v] if k == "inputs" else name if v == old and k == "input" else v)
                for k, v in layer.items()} for layer in layers]
    return inputs, [{"name": name, "op": "stop_gradient", "input": old}, *renamed]


@pytest.mark.slow
@pytest.mark.parametrize(("case", "builtin"), _builtin_cases())
@pytest.mark.parametrize("where", ["input", "layer"])
def test_an_input_or_layer_named_like_a_builtin_the_op_calls_runs(case: str, builtin: str, where: str,
                                                                    tmp_path: Path) -> None:
    """The op's TensorFlow model runs on a batch and agrees with its ONNX graph (the local is '<builtin>_')."""
    inputs, layers = CASES[case]
    inputs, layers = (_renamed_input if where == "input" else _layer_first)(inputs, layers, builtin)
    loaded = load_spec_text(spec_text(case, inputs, layers), f"{case}.yaml")
    assert f"        {builtin}_ = " in render_model_py(build_ir(loaded))
    assert check_parity(loaded, tmp_path) <= TOLERANCE


def test_builtin_cases_are_found() -> None:
    """The derivation above sees the builtins templates call: grouped conv2d and conv1d call zip."""
    assert ("conv2d_groups_same", "zip") in _builtin_cases()
    assert any(case.startswith("conv1d") and name == "zip" for case, name in _builtin_cases())


BUILTIN_LAYERS = ("zip", "len", "range", "int", "list", "max", "sum", "input")
TRAINED = """specgen: 1
name: builtins_named
inputs:
  {first}: {{shape: [8, 8, 2]}}
  seq: {{shape: [6, 4]}}
outputs:
  logits: out
layers:
{chain}
  - {{name: conv, op: conv2d, filters: 4, kernel: 3, groups: 2}}
  - {{name: flat, op: flatten}}
  - {{name: {last}, op: conv1d, input: seq, filters: 4, kernel: 3, groups: 2}}
  - {{name: seq_flat, op: flatten}}
  - {{name: both, op: concat, inputs: [flat, seq_flat]}}
  - {{name: out, op: dense, units: 3}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers:
  all: {{variables: ["*"], kind: sgd, learning_rate: 0.01}}
train: {{batch_size: 4, epochs: 1, seed: 1}}
data:
  train: {{npz: d.npz, features: {{{first}: x, seq: s}}, labels: {{label: y}}}}
checkpoint: {{dir: run}}
"""


@pytest.mark.slow
def test_layers_named_like_builtins_train(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """rt8 F1's spec, grown: an input and layers named like builtins before grouped conv2d and conv1d train a step."""
    chain = "\n".join(f"  - {{name: {name}, op: relu{', input: zip' if i == 0 else ''}}}"
                      for i, name in enumerate(BUILTIN_LAYERS[1:-1]))
    text = TRAINED.format(first="zip", chain=chain, last="input")
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.random((8, 8, 8, 2), np.float32), s=rng.random((8, 6, 4), np.float32),
             y=rng.integers(0, 3, 8))
    (tmp_path / "spec.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    assert main(["build", "spec.yaml", "--out", "gen"]) == 0
    model = (tmp_path / "gen" / "builtins_named" / "model.py").read_text()
    assert all(f"        {name}_ = " in model for name in BUILTIN_LAYERS), model
    assert main(["train", "spec.yaml", "--steps", "1", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err


# --- F5: one length, in characters, said when it is the problem --------------------------------------------------

NAMED = """specgen: 1
name: tiny
inputs:
  image: {{shape: [8, 8, 1]}}
outputs:
  logits: {name}
layers:
  - {{name: flat, op: flatten}}
  - {{name: {name}, op: dense, units: 10}}
"""


@pytest.mark.parametrize("name", ["a" * 64, "a" + "_b" * 62, "a" * MAX_NAME_CHARS, "a_" * 63 + "bc",
                                  "head/" + "b" * MAX_NAME_CHARS])
def test_a_name_up_to_the_limit_is_valid(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """64 letters (refused before, though the docs allowed them), the 125 characters the old pattern took, 128."""
    assert validate(tmp_path, capsys, NAMED.format(name=name))[0] == 0


def test_a_name_over_the_limit_says_its_length(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cut = "a" * 40 + "…"
    assert validate(tmp_path, capsys, NAMED.format(name="a" * 129)) == (1, [
        f"6:11: error: logits: invalid name '{cut}': received 129 characters, expected at most 128; shorten it",
        f"9:12: error: name: invalid name '{cut}': received 129 characters, expected at most 128; shorten it "
        f"(in layer '{'a' * 64}')",
        "2 errors found"])


def test_a_layer_name_part_over_the_limit_says_which(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = "head/" + "b" * 135
    shown, part = name[:40] + "…", "b" * 40 + "…"
    line = (f"invalid name '{shown}': received 135 characters in its part '{part}', expected at most 128 per part; "
            "shorten it")
    assert validate(tmp_path, capsys, NAMED.format(name=name)) == (1, [
        f"6:11: error: logits: {line}", f"9:12: error: name: {line} (in layer '{name[:64]}')", "2 errors found"])


def test_a_malformed_long_name_is_refused_for_its_form(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The pattern comes first: '__' is the problem whatever the length."""
    code, err = validate(tmp_path, capsys, NAMED.format(name="a__" + "b" * 200))
    assert code == 1 and all("expected parts joined by '/'" in line for line in err[:-1]), err


@pytest.mark.parametrize(("text", "valid"), [("a" * 128, True), ("a" * 129, False), ("a_" * 64, False),
                                             ("a" + "_b" * 63, True), ("a/b", False), ("1a", False)])
def test_is_identifier_is_the_field_rule(text: str, valid: bool) -> None:
    """What code outside pydantic checks (the KerasHub importer, default loss-term names) is the field's rule."""
    assert is_identifier(text) is valid
    assert (re.fullmatch(IDENT, text) is not None and len(text) <= MAX_NAME_CHARS) is valid


def _python_block(doc: str, heading: str) -> str:
    """The first ```python block after `heading`."""
    after = doc[doc.index(heading):]
    return after[after.index("```python\n") + len("```python\n"):after.index("\n```", after.index("```python"))]


def test_security_doc_quotes_the_name_rules_the_code_uses() -> None:
    """docs/security.md section 1 shows lines of specgen/fields/base.py, each as written there, with the same values."""
    block = _python_block((ROOT / "docs" / "security.md").read_text(encoding="utf-8"), "## 1. Names")
    source = (ROOT / "specgen" / "fields" / "base.py").read_text(encoding="utf-8").splitlines()
    assert [line for line in block.splitlines() if line not in source] == []
    values: dict[str, Any] = {}
    exec(compile(ast.parse(block), "docs/security.md", "exec"), values)  # the doc's own assignments, nothing else
    shown = {k: v for k, v in values.items() if k.isupper()}
    assert shown == {k: getattr(base, k) for k in shown} and {"IDENT", "LAYER", "MAX_NAME_CHARS"} <= set(shown)
    assert values["LAYER"] == LAYER


def test_spec_doc_states_the_rule() -> None:
    doc = (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")
    row = next(line for line in doc.splitlines() if line.startswith("| identifier |"))
    layer = next(line for line in doc.splitlines() if line.startswith("| layer name |"))
    assert f"at most {MAX_NAME_CHARS} characters" in row and f"each part at most {MAX_NAME_CHARS} characters" in layer
