"""Helpers of the registry completeness tests (tests/test_<axis>_registry.py): docs tables and own tests."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any, get_args

ROOT = Path(__file__).resolve().parents[1]


def table_kinds(doc: str, heading: str) -> set[str]:
    """Names in backticks in the first cell of the table rows of section `heading` of docs/<doc>
    (up to the next heading of any level)."""
    text = (ROOT / "docs" / doc).read_text()
    assert f"\n{heading}\n" in text, f"docs/{doc} has no heading {heading!r}"
    section = re.split(r"\n#+ ", text.split(f"\n{heading}\n", 1)[1], maxsplit=1)[0]
    return {name for line in section.splitlines() if line.startswith("| ")
            for name in re.findall(r"`([a-z0-9_]+)`", line.split("|")[1])}


def has_own_test(name: str) -> bool:
    """A kind whose parity test has a file of its own: tests/test_<kind>.py defining a test that names the kind.

    False when there is no such file. A file that is there but holds no test naming the kind (a placeholder with
    only a docstring, or tests of something else) fails here with that message, not as "no test": the author
    created it and needs to know why it does not count.
    """
    path = ROOT / "tests" / f"test_{name}.py"
    if not path.is_file():
        return False
    problem = own_test_problem(path, name)
    assert problem is None, f"{path.relative_to(ROOT)}: {problem}"
    return True


def own_test_problem(path: Path, name: str) -> str | None:
    """Why `path` is not a test of kind `name`, or None: it must define a test function (`test_*`, at the top
    level or in a `Test*` class) whose name, decorators or body (its docstring aside) name the kind, directly or
    through a module-level constant or helper that does (`KIND = "adamax"`, `CASES = {...}`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    tests = _test_functions(tree)
    if not tests:
        return "defines no test function (test_*): a file of its own must hold the kind's parity test"
    naming = _module_names_mentioning(tree, name)
    if any(f"_{name}_" in f"_{test.name}_" or _mentions(test, name, naming) for test in tests):
        return None
    return (f"no test function names '{name}' (in its name, its parameters or its body): write the kind's parity "
            "test there, or delete the file and add a case where the completeness test says")


def _test_functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    found: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            found += [n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                      and n.name.startswith("test")]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            found.append(node)
    return found


def _without_docstring(node: ast.AST) -> list[ast.AST]:
    """The parts of a definition that do something: a docstring naming the kind is no test of it."""
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return [node]
    body = node.body[1:] if ast.get_docstring(node) is not None else node.body
    return [*node.decorator_list, node.args, *body]


def _names_kind(node: ast.AST, name: str) -> bool:
    """A string constant that is the kind or holds it as a word ("adamax", "kind: adamax", "opt_adamax")."""
    word = re.compile(rf"(?<![a-z0-9]){re.escape(name)}(?![a-z0-9])")
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and word.search(n.value)
               for part in _without_docstring(node) for n in ast.walk(part))


def _module_names_mentioning(tree: ast.Module, name: str) -> set[str]:
    """Module-level names (constants, helpers) whose value or body names the kind."""
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and _names_kind(node, name):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.FunctionDef) and not node.name.startswith("test") and _names_kind(node, name):
            found.add(node.name)
    return found


def _mentions(test: ast.FunctionDef | ast.AsyncFunctionDef, name: str, naming: set[str]) -> bool:
    """The test (its decorators included) names the kind, or reads a module-level name that does."""
    return _names_kind(test, name) or any(isinstance(n, ast.Name) and n.id in naming
                                          for part in _without_docstring(test) for n in ast.walk(part))


def union_members(union: Any) -> tuple[Any, ...]:
    """The models of an Annotated discriminated union."""
    inner = get_args(union)[0]
    return get_args(inner) or (inner,)


def literal_names(model: Any, field: str) -> tuple[str, ...]:
    return get_args(model.model_fields[field].annotation)
