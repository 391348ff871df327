"""Completeness of the data-source registry (specgen/kinds/sources): each failure names the source kind
and the piece it misses, as tests/test_op_registry.py does for ops (docs/extending.md, "Data sources")."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import ValidationError

from specgen.kinds import sources
from specgen.kinds.sources import REGISTRY, SCHEMA_ORDER, DataSource, kind_of
from specgen.runtime import sources as readers
from specgen.spec.io import Data

ROOT = Path(__file__).resolve().parents[1]
KINDS = list(REGISTRY)
NOT_READERS = ("base", "context", "decode", "framing", "npy_header", "record_problems", "sizes", "tfrecord_cache",
               "tfrecord_files")  # runtime/sources modules readers share


def _union_members() -> tuple[Any, ...]:
    return tuple(get_args(member)[0] for member in get_args(get_args(DataSource)[0]))


def test_every_module_is_registered_in_schema_order() -> None:
    modules = {m.name for m in pkgutil.iter_modules(sources.__path__)} - {"base"}
    assert sorted(modules) == sorted(REGISTRY), "each module of specgen/kinds/sources is one kind, named as its file"
    assert KINDS[:len(SCHEMA_ORDER)] == list(SCHEMA_ORDER), "the schema's kinds come first, in the schema's order"


def test_every_reader_module_belongs_to_a_kind() -> None:
    modules = {m.name for m in pkgutil.iter_modules(readers.__path__)} - set(NOT_READERS)
    assert not modules - set(REGISTRY), f"specgen/runtime/sources has readers of no kind: {sorted(modules - set(REGISTRY))}"


def test_the_union_lists_the_kinds_in_order() -> None:
    # schemas/specgen.schema.json lists the branches as the union does: the registry's order.
    assert _union_members() == tuple(REGISTRY[k].spec for k in KINDS)


@pytest.mark.parametrize("name", KINDS)
def test_kind_has_a_spec_model_picked_by_its_key(name: str) -> None:
    source = REGISTRY[name]
    assert name in source.spec.model_fields, (
        f"source '{name}': its spec model {source.spec.__name__} has no field '{name}' (the key that picks it)")
    assert name in source.example, f"source '{name}': its example has no key '{name}'"
    parsed = Data.model_validate({"train": source.example}).train
    assert type(parsed) is source.spec, f"source '{name}': its example parses as {type(parsed).__name__}"
    assert kind_of(parsed) is source


@pytest.mark.parametrize("name", KINDS)
def test_kind_resolves_against_the_spec_folder(name: str, tmp_path: Path) -> None:
    source = REGISTRY[name]
    parsed = Data.model_validate({"train": source.example}).train
    resolved = source.resolve(parsed, tmp_path)
    assert resolved.path.is_relative_to(tmp_path), f"source '{name}': {resolved.path} is not under the spec's folder"
    assert list(resolved.features) == list(source.example["features"]), f"source '{name}': features lost in the IR"
    assert list(resolved.labels) == list(source.example.get("labels", {})), f"source '{name}': labels lost in the IR"
    inputs = dict.fromkeys(source.example["features"])
    assert source.refuse(parsed, inputs) == [], f"source '{name}': its own example is refused"


@pytest.mark.parametrize("name", KINDS)
def test_kind_has_a_reader(name: str) -> None:
    module, _, function = REGISTRY[name].reader.rpartition(".")
    assert module == f"specgen.runtime.sources.{name}", (
        f"source '{name}': its reader {REGISTRY[name].reader} is not in specgen/runtime/sources/{name}.py")
    try:
        read = getattr(importlib.import_module(module), function, None)
    except ModuleNotFoundError:
        pytest.fail(f"source '{name}': no reader module specgen/runtime/sources/{name}.py")
    assert callable(read), f"source '{name}': no function '{function}' in specgen/runtime/sources/{name}.py"
    assert list(inspect.signature(read).parameters) == ["context"], (
        f"source '{name}': its reader must take one argument, context (runtime/sources/__init__.py)")


@pytest.mark.parametrize("name", KINDS)
def test_kind_is_documented(name: str) -> None:
    text = (ROOT / "docs" / "spec.md").read_text()
    row = f"| `{name}` | {REGISTRY[name].doc} |"
    assert row in text, f"source '{name}': docs/spec.md's table of sources lacks the row {row}"


def test_the_docs_table_is_the_registry() -> None:
    assert sources.markdown() in (ROOT / "docs" / "spec.md").read_text(), (
        "docs/spec.md's table of sources (under ## `data`) is not specgen.kinds.sources.markdown(), in registry order")


def parts_of_tests(path: Path) -> list[ast.AST]:
    """What the test functions of `path` run: their decorators (parametrize lists), arguments and bodies, without
    docstrings. A comment or a docstring naming a kind is no test of it (as in kind_checks.own_test_problem)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    tests = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
             and node.name.startswith("test")]
    return [part for test in tests for part in _without_docstring(test)]


def _without_docstring(test: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.AST]:
    body = test.body[1:] if ast.get_docstring(test) is not None else test.body
    return [*test.decorator_list, test.args, *body]


def _read_by_data_tests(path: Path = ROOT / "tests" / "test_data_sources.py") -> set[str]:
    """Source kinds that a test of `path` reads: a `{<kind>: ...}` source in a string of a test function."""
    strings = [n.value for part in parts_of_tests(path) for n in ast.walk(part)
               if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return {name for name in REGISTRY if any(f"{{{name}: " in text for text in strings)}


@pytest.mark.parametrize("name", KINDS)
def test_kind_is_read_by_the_data_tests(name: str) -> None:
    assert name in _read_by_data_tests(), (
        f"source '{name}': no test in tests/test_data_sources.py reads a {{{name}: ...}} source (a test function's "
        "string, not a comment or docstring)")


def test_report_lines() -> None:
    lines = {name: REGISTRY[name].report(f"data/t.{name}", {"x": ref}, {"label": "y"})
             for name, ref in (("npz", "x"), ("csv", ("a", "b")), ("tfrecord", "x"))}
    assert lines == {"npz": "npz data/t.npz: features x <- x; labels label <- y",
                     "csv": "csv data/t.csv: features x <- [a, b]; labels label <- y",
                     "tfrecord": "tfrecord data/t.tfrecord: features x <- x; labels label <- y"}
    assert REGISTRY["npz"].report("t.npz", {"x": "x"}, {}) == "npz t.npz: features x <- x; labels none"


def test_two_kind_keys_name_every_kind_in_the_error() -> None:
    with pytest.raises(ValidationError) as caught:
        Data.model_validate({"train": {"npz": "a.npz", "csv": "a.csv", "features": {}}})
    quoted = [f"'{name}'" for name in REGISTRY]
    keys = ", ".join(quoted[:-1]) + " or " + quoted[-1]
    assert [e["msg"] for e in caught.value.errors()] == [f"expected a data source with exactly one of the keys {keys}"]
    assert keys.startswith("'npz', 'csv'")  # today's message: "... keys 'npz', 'csv' or 'tfrecord'"


def _kind_name_uses(tree: ast.AST, names: set[str]) -> list[int]:
    """Lines comparing a value against a kind name, or listing several kind names (a kind switch)."""
    def named(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and node.value in names

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(named(n) or (isinstance(n, ast.Tuple | ast.List | ast.Set) and
                                                              any(map(named, n.elts)))
                                                 for n in [node.left, *node.comparators]):
            found.append(node.lineno)
        elif isinstance(node, ast.Tuple | ast.List | ast.Set) and sum(map(named, node.elts)) > 1:
            found.append(node.lineno)
        elif isinstance(node, ast.Call) and sum(map(named, node.args)) > 1:  # by_key("npz", "csv", ...)
            found.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr")
              and any(map(named, node.args))):
            found.append(node.lineno)
    return found


def test_only_the_registry_compares_against_kind_names() -> None:
    registry = ROOT / "specgen" / "kinds" / "sources"
    found = {str(path.relative_to(ROOT)): lines for path in sorted((ROOT / "specgen").rglob("*.py"))
             if not path.is_relative_to(registry)
             and (lines := _kind_name_uses(ast.parse(path.read_text()), set(REGISTRY)))}
    assert found == {}, f"source kinds named outside specgen/kinds/sources (file: lines): {found}"


def test_no_reader_reshuffles_under_trainings_shuffle() -> None:
    """runtime/data.py's training shuffle reshuffles every epoch. A reader's own reshuffling shuffle nested under it
    restores from a saved iterator at some positions only (measured: different batches at 4-8 of 21 save points),
    so kill -9 and --resume would not be bitwise. A reader orders its files once, with reshuffle False."""
    import re

    readers = Path(__file__).resolve().parents[1] / "specgen" / "runtime" / "sources"
    offenders = [f"{path.name}:{number}" for path in sorted(readers.glob("*.py"))
                 for number, line in enumerate(path.read_text().splitlines(), 1)
                 if re.search(r"reshuffle_each_iteration\s*=\s*True", line)]
    assert offenders == []
