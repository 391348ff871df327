"""specgen's layering, read from the source (AST), with every import counted: module level, inside
functions, and under `if TYPE_CHECKING:`.

The rules (issue 18, item 5):

- No import cycle among specgen modules. Importing `a.b.c` runs the packages `a.b` first, so that is an
  edge to `a.b` too, unless the importer is inside `a.b` (then the package is already running). A registry
  package that discovers its modules (`pkgutil.iter_modules(__path__)` in `kinds/*/__init__.py`) imports
  each of them: a module it discovers must not import the package's __init__ back.
- `spec/` imports nothing from `ir/`, `render/`, `runtime/`, `serve/`, `report/` or `importers/`.
- `kinds/` (the registries) sits below `spec/` and `ir/`: it imports nothing from `spec/`, `ir/`, `render/`,
  `runtime/`, `serve/`, `report/`, `importers/` or the commands. Below it lies `fields/`, the spec language's
  field vocabulary (number and name types, union helpers, layer base models, loss-term fields), which
  imports nothing from specgen but the leaves (diagnostics, errors, text) and itself (issue 31: it was
  spec/'s, so spec/ was both below and above kinds/).
- Outside `runtime/` and `serve/` (the only packages that run models), no module imports TensorFlow
  or onnxruntime at module level: `specgen validate`, `build` and `report` import those modules.
- Every exception class specgen defines for a person to read derives from `specgen.errors.SpecgenError`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "specgen"
HEAVY = ("tensorflow", "onnxruntime")
LEAVES = {"specgen", "specgen.diagnostics", "specgen.errors", "specgen.text"}
# Exceptions that are signals, not messages for a person: the server's queue is full / it is draining / an HTTP
# client left before its answer; a resumed run is already at its end (runtime/commands/run_end.py: train prints its
# line and exits 0, nothing went wrong).
SIGNALS = {"QueueFull", "ShuttingDown", "ClientGone", "RunEnded"}
# A bug's stand-in, raised where a worker's own exception could not cross its pipe (render/pool.py): shown
# whole, with the worker's traceback, as the bug it stands for would be; a SpecgenError prints one line.
BUGS = {"WorkerBug"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


FILES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
TREES = {name: ast.parse(path.read_text(encoding="utf-8"), str(path)) for name, path in FILES.items()}


def _targets(node: ast.Import | ast.ImportFrom, name: str) -> list[str]:
    """The absolute names an import statement reaches."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: resolve against the importing module's package
        package = name if FILES[name].name == "__init__.py" else name.rpartition(".")[0]
        anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    # `from a import b` reaches module a.b when there is one (a itself then only as its package), else a.
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in FILES else base for alias in node.names]


def _known(target: str) -> str | None:
    """The specgen module a name lands in (a name imported from a module is that module)."""
    while target and target not in FILES:
        target = target.rpartition(".")[0]
    return target or None


def _with_packages(module: str, name: str) -> list[str]:
    """`module` and the packages (with an __init__.py) above it that importing it runs first, except those `name` is inside
    (they are already running): `from specgen.kinds.ops.nodes import Node` runs kinds/ops/__init__.py too."""
    parts = module.split(".")
    above = [".".join(parts[:i]) for i in range(2, len(parts))]
    return [p for p in above if p in FILES and not name.startswith(p + ".") and p != name] + [module]


def _discovered(name: str) -> dict[str, int]:
    """A registry package that lists itself (`pkgutil.iter_modules(__path__)`) imports every module in it."""
    for node in ast.walk(TREES[name]):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "pkgutil.iter_modules":
            return {m: node.lineno for m in FILES if m.rpartition(".")[0] == name}
    return {}


def imports(name: str) -> dict[str, int]:
    """specgen module -> first line importing it, anywhere in `name`'s file."""
    found = _discovered(name)
    for node in ast.walk(TREES[name]):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for target in _targets(node, name):
                module = _known(target)
                for reached in _with_packages(module, name) if module else []:
                    if reached != name:
                        found.setdefault(reached, node.lineno)
    return found


GRAPH = {name: imports(name) for name in FILES}




def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected sets of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(graph[step])))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    members.append(top)
                    if top == node:
                        break
                if len(members) > 1:
                    found.append(sorted(members))
    return found


def _in(name: str, *packages: str) -> bool:
    return any(name == f"specgen.{p}" or name.startswith(f"specgen.{p}.") for p in packages)


def _edges(source: str) -> Iterator[str]:
    """`file:line: a -> b` for every import out of the modules under `source`."""
    for name, targets in GRAPH.items():
        if _in(name, source):
            for target, line in sorted(targets.items()):
                yield f"{FILES[name].relative_to(ROOT)}:{line}: {name} -> {target}"


def test_cycles_finds_a_cycle_and_only_one() -> None:
    """The detector itself: a -> b -> c -> a is one cycle, d -> a adds none."""
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b": 1}, "b": {}}) == []


def test_relative_and_deferred_imports_are_edges() -> None:
    tree = ast.parse("from . import text\ndef f():\n    from specgen.spec import load\n")
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    assert [_targets(n, "specgen.report.flops") for n in nodes] == [["specgen.report"], ["specgen.spec.load"]]
    assert _with_packages("specgen.kinds.ops.nodes", "specgen.ir.model") == [
        "specgen.kinds", "specgen.kinds.ops", "specgen.kinds.ops.nodes"]
    assert _with_packages("specgen.kinds.ops.base", "specgen.kinds.ops.dense") == ["specgen.kinds.ops.base"]


def test_no_import_cycle_among_specgen_modules() -> None:
    found = cycles(GRAPH)
    tied = [f"{FILES[m].relative_to(ROOT)}:{GRAPH[m][t]}: {m} -> {t}" for c in found for m in c for t in GRAPH[m]
            if t in c]
    assert not found, "import cycles:\n" + "\n".join(tied)


def test_spec_imports_nothing_above_it() -> None:
    bad = [e for e in _edges("spec") if _in(e.rsplit(" -> ", 1)[1], "ir", "render", "runtime", "serve", "report",
                                                 "importers", "cli", "commands")]
    assert bad == []


def test_kinds_sit_below_spec_and_ir() -> None:
    above = ("spec", "ir", "render", "runtime", "serve", "report", "importers", "cli", "commands")
    assert [e for e in _edges("kinds") if _in(e.rsplit(" -> ", 1)[1], *above)] == []


def test_fields_import_only_leaves_and_themselves() -> None:
    fields = [name for name in FILES if _in(name, "fields")]
    assert len(fields) >= 5, fields  # the package and its four modules: a rename must not empty the test
    for name in fields:
        outside = [t for t in GRAPH[name] if t not in LEAVES and not _in(t, "fields")]
        assert outside == [], name
    for name in LEAVES - {"specgen"}:
        assert set(GRAPH[name]) <= LEAVES, (name, sorted(GRAPH[name]))


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements that run when the module is imported: not function bodies, not `if TYPE_CHECKING:`."""
    for stmt in body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if isinstance(stmt, ast.If) and ast.unparse(stmt.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            yield from _module_level(stmt.orelse)
            continue
        yield stmt
        for field in ("body", "orelse", "finalbody", "handlers"):
            yield from _module_level(getattr(stmt, field, []))


def heavy_imports(name: str) -> list[str]:
    found = []
    for stmt in _module_level(TREES[name].body):
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            for target in _targets(stmt, name):
                if target.split(".")[0] in HEAVY:
                    found.append(f"{FILES[name].relative_to(ROOT)}:{stmt.lineno}: {target}")
    return found


def test_heavy_import_detection_sees_module_level_only() -> None:
    TREES["<probe>"] = ast.parse("import tensorflow as tf\nif TYPE_CHECKING:\n    import onnxruntime\n"
                                 "def f():\n    import onnxruntime\ntry:\n    import onnxruntime.capi\nexcept ImportError:\n"
                                 "    pass\n")
    FILES["<probe>"] = PACKAGE / "probe.py"
    try:
        assert heavy_imports("<probe>") == ["specgen/probe.py:1: tensorflow", "specgen/probe.py:7: onnxruntime.capi"]
    finally:
        del TREES["<probe>"], FILES["<probe>"]


def test_nothing_below_runtime_imports_tensorflow_or_onnxruntime_at_module_level() -> None:
    found = [hit for name in FILES if not _in(name, "runtime", "serve") for hit in heavy_imports(name)]
    assert found == []


def test_every_error_class_derives_from_specgen_error() -> None:
    builtin = {"Exception", "ValueError", "OSError", "RuntimeError", "TypeError", "KeyError", "LookupError"}
    plain = []
    for name, tree in TREES.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name not in SIGNALS | BUGS | {"SpecgenError"}:
                bases = {ast.unparse(b).rpartition(".")[2] for b in node.bases}
                if bases & builtin and "SpecgenError" not in bases:
                    plain.append(f"{FILES[name].relative_to(ROOT)}:{node.lineno}: {node.name}")
    assert plain == []
