"""Every `from <test module> import NAME` in tests/ names something that module defines at its top level.

Tests share helpers by importing one another's modules, often inside a test function (to keep a heavy import
out of collection); such an import is only checked when that test runs, so a helper removed from one file broke a
slow test in another at the end of a 16-minute run (test_transformer_blocks_example imported test_serve's
free_port after it had gone). Read with ast: nothing is imported here."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _top_level_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def test_imports_between_test_modules_resolve() -> None:
    missing = []
    for path in sorted(TESTS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and (TESTS / f"{node.module}.py").is_file():
                defined = _top_level_names(TESTS / f"{node.module}.py")
                missing += [f"{path.name}:{node.lineno}: {node.module}.{a.name}" for a in node.names
                            if a.name not in defined]
    assert missing == []
