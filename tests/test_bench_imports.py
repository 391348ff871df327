"""Every name a bench script imports from specgen exists.

The benches drive specgen's internals (bench/train_step.py runs the training loop's own chunking and progress), and
they import lazily, inside the function that measures, so a renamed internal broke `python bench/train_step.py`
without any test noticing (`Progress` had become specgen.progress.TrainProgress). Running every bench here would
cost minutes; resolving each `from specgen... import name` they write costs none and catches that class of break.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, module, name) of every `from specgen... import name` in the file, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "specgen":
            found.extend((node.lineno, node.module, alias.name) for alias in node.names)
    return found


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.py")), ids=lambda p: p.name)
def test_every_specgen_name_a_bench_imports_exists(path: Path) -> None:
    missing = []
    for line, module, name in _imports(path):
        imported = importlib.import_module(module)
        if not hasattr(imported, name):
            try:  # a submodule imported by name (`from specgen.runtime import data`)
                importlib.import_module(f"{module}.{name}")
            except ModuleNotFoundError:
                missing.append(f"bench/{path.name}:{line}: {module} has no {name!r}")
    assert missing == []
