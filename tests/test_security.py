"""A spec cannot inject code into generated files.

Specs come from repositories and `specgen build` runs in CI, so every string a spec holds is
hostile input. For each string leaf of the example spec (values, and mapping keys that are user
names) and each hostile string, the spec must either be rejected with one-line diagnostics (exit 1,
no traceback), or build into Python modules (model.py, train.py, ...) whose ASTs equal the benign
build's except for string constants carrying the hostile text, an ONNX text that onnx.parser reads
into the benign graph, and a collections.yaml with the benign structure. Nothing here imports
TensorFlow.
"""

from __future__ import annotations

import ast
import copy
import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnx
import onnx.parser
import pytest
import yaml

from specgen.cli import main
from specgen.render.build import render_all

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "specs" / "digits_cnn.yaml"

HOSTILE = {
    "single_quote": "it's",
    "double_quote": 'say "hi"',
    "triple_quotes": "\"\"\" ''' \"\"\"",
    "newline_code": 'x\nimport os; os.system("x")\n',
    "dunder_import": "__import__('os').system('x')",
    "jinja_expression": "{{ 7*7 }}",
    "jinja_block": "{% raw %}{% endraw %}{# c #}",
    "backslash": "a\\b\\",
    "nul": "a\x00b",
    "line_separators": "a\r\nb\x0bc\x85d\u2028e",
    # 4000 characters: longer than any name, pattern or path may be, and it still fits `doc`
    "very_long": "x'\"\\\n" * 800,
}

# Mappings whose keys are names the user chose (and that reach generated code), by path;
# "*" matches any key. The keys of every other mapping are the spec language's own.
USER_KEYS = [("inputs",), ("outputs",), ("collections",), ("optimizers",),
             ("data", "*", "features"), ("data", "*", "labels")]
MARK = "\x00HOSTILE\x00"
DIAGNOSTIC = re.compile(r"(:\d+:\d+)?: error: \S.*")


def _user_keyed(path: tuple[Any, ...]) -> bool:
    return any(len(p) == len(path) and all(a in ("*", b) for a, b in zip(p, path, strict=True))
               for p in USER_KEYS)


def leaves(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """('value', path) for every string value, ('key', path) for every user-name key."""
    if isinstance(node, dict):
        for key, value in node.items():
            if _user_keyed(path):
                yield "key", (*path, key)
            yield from leaves(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from leaves(value, (*path, i))
    elif isinstance(node, str):
        yield "value", path


def substituted(doc: Any, kind: str, path: tuple[Any, ...], new: str) -> tuple[Any, str]:
    """A copy of `doc` with the leaf at `path` replaced by `new`; also the text it replaced."""
    doc = copy.deepcopy(doc)
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if kind == "value":
        old, parent[last] = parent[last], new
    else:  # rebuild the mapping to keep the order of keys
        old = last
        items = list(parent.items())
        parent.clear()
        parent.update((new if k == last else k, v) for k, v in items)
    return doc, old


def write(path: Path, doc: Any) -> None:
    """JSON is YAML, and PyYAML's pure-Python scanner reads it about twice as fast as block style."""
    path.write_text(json.dumps(doc, ensure_ascii=True, separators=(",", ":")))


def normalize_strings(node: Any, texts: list[str]) -> Any:
    """Replace every occurrence of each of `texts`, in order, inside str values with MARK."""
    if isinstance(node, str):
        for text in texts:
            node = node.replace(text, MARK) if text else node
        return node
    if isinstance(node, list | tuple):
        return type(node)(normalize_strings(n, texts) for n in node)
    if isinstance(node, dict):
        return {normalize_strings(k, texts): normalize_strings(v, texts) for k, v in node.items()}
    return node


@functools.lru_cache(maxsize=64)  # the benign side repeats for every built spec
def python_shape_cached(source: str, texts: tuple[str, ...]) -> str:
    return python_shape(source, list(texts))


def python_shape(source: str, texts: list[str]) -> str:
    """ast.dump of the module with the given texts masked inside string constants.

    The stripped form is masked first (generated docstrings hold `doc.strip()`), then the raw text.
    """
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node.value = normalize_strings(node.value, texts)
    return ast.dump(tree)


@functools.lru_cache(maxsize=64)
def onnx_shape(text: bytes) -> list[tuple[str, list[str], list[str], str]]:
    """The nodes of an ONNX text graph, parsed with onnx.parser."""
    graph = onnx.parser.parse_model(text.decode()).graph
    return [(n.op_type, list(n.input), list(n.output), str(n.attribute)) for n in graph.node]


@functools.lru_cache(maxsize=64)
def yaml_shape(text: bytes, texts: tuple[str, ...]) -> Any:
    return normalize_strings(yaml.safe_load(text), list(texts))


@pytest.fixture(scope="module")
def example() -> dict[str, Any]:
    return yaml.safe_load(EXAMPLE.read_text())


@pytest.fixture(scope="module")
def benign(example: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    path = tmp_path_factory.mktemp("benign") / EXAMPLE.name
    write(path, example)
    (output,) = render_all([path])
    return output.files


def test_leaves_cover_values_and_user_names(example: dict[str, Any]) -> None:
    found = {(kind, path) for kind, path in leaves(example)}
    assert ("value", ("doc",)) in found
    assert ("value", ("layers", 0, "op")) in found
    assert ("value", ("optimizers", "body", "variables")) in found
    assert ("value", ("data", "train", "npz")) in found
    assert ("value", ("collections", "backbone", 1)) in found
    for key in [("inputs", "image"), ("outputs", "logits"), ("collections", "head"), ("optimizers", "body"),
                ("data", "eval", "features", "image"), ("data", "train", "labels", "label")]:
        assert ("key", key) in found
    assert ("key", ("train", "batch_size")) not in found
    assert len(found) > 50


def assert_inert(name: str, content: bytes, benign: bytes, hostile: str, old: str, doc: str, where: str) -> None:
    """One generated file equals its benign build, up to strings that carry the substituted text."""
    if name.endswith(".py"):  # every generated module: same code, only string constants differ
        assert python_shape(content.decode(), [hostile.strip(), hostile]) == \
            python_shape_cached(benign.decode(), (old.strip(), old)), (name, where)
    elif name.endswith(".onnx.txt"):
        assert onnx_shape(content) == onnx_shape(benign), (name, where)
    elif name.endswith(".onnx"):
        assert onnx.load_from_string(content).doc_string == doc, (name, where)
    elif name.endswith(".yaml"):
        assert yaml_shape(content, (hostile,)) == yaml_shape(benign, (old,)), (name, where)
    else:
        assert content == benign, (name, where)


def check_hostile(tmp_path: Path, capsys: pytest.CaptureFixture[str], example: dict[str, Any],
                  benign: dict[str, bytes], hostile: str) -> tuple[int, int]:
    """Every leaf substituted in turn; returns how many specs were (rejected, built)."""
    path = tmp_path / EXAMPLE.name
    rejected = built = 0
    for kind, leaf in leaves(example):
        doc, old = substituted(example, kind, leaf, hostile)
        write(path, doc)
        where = f"{kind} {leaf!r}"
        code = main(["validate", str(path)])
        out, err = capsys.readouterr()
        assert "Traceback" not in out + err, where
        if code == 1:
            rejected += 1
            lines = err.splitlines()
            assert re.fullmatch(r"\d+ errors? found", lines[-1]), (where, lines)
            assert int(lines[-1].split()[0]) == len(lines) - 1 >= 1, (where, lines)
            for line in lines[:-1]:  # each diagnostic is one line that starts with the spec's path
                assert line.startswith(str(path)), (where, line)
                assert DIAGNOSTIC.fullmatch(line[len(str(path)):]), (where, line)
            continue
        assert code == 0, (where, code, err)
        built += 1
        (output,) = render_all([path])
        assert set(output.files) == set(benign), where
        for name, content in output.files.items():
            assert_inert(name, content, benign[name], hostile, old, doc["doc"], where)
    return rejected, built


@pytest.mark.parametrize("hostile", list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_strings_are_rejected_or_inert(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               example: dict[str, Any], benign: dict[str, bytes],
                                               hostile: str) -> None:
    rejected, built = check_hostile(tmp_path, capsys, example, benign, hostile)
    assert rejected > 40  # names, ops, kinds, collections: most leaves refuse hostile text
    assert built >= 1  # `doc` takes any text up to 4096 characters


def test_doc_too_long_is_rejected(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  example: dict[str, Any]) -> None:
    path = tmp_path / EXAMPLE.name
    path.write_text(yaml.safe_dump(dict(example, doc="A" * 100_000), sort_keys=False))
    assert main(["validate", str(path)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{path}:3:6: error: doc: received a string of 100000 characters, expected at most 4096", "1 error found"]


def docstring_nodes(tree: ast.Module) -> set[int]:
    """ids of the Constant nodes that are module, class or function docstrings."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def test_benign_doc_with_quotes_and_newlines_is_only_a_docstring(
        tmp_path: Path, example: dict[str, Any], benign: dict[str, bytes]) -> None:
    doc = 'He said "stop" and it\'s done.\nimport os; os.system("x")\n  {{ 7*7 }} \'\'\' end'
    path = tmp_path / EXAMPLE.name
    path.write_text(yaml.safe_dump(dict(example, doc=doc), sort_keys=False))  # as a person would write it
    (output,) = render_all([path])
    source = output.files["model.py"].decode()
    tree = ast.parse(source)
    (model_class,) = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    assert ast.get_docstring(tree, clean=False).endswith(f"\n\n{doc}\n")
    assert ast.get_docstring(model_class, clean=False) == doc
    assert 'import os; os.system("x")\n' in source  # readable: triple-quoted, not escaped
    carriers = {id(n) for n in ast.walk(tree) if isinstance(n, ast.Constant) and "os.system" in str(n.value)}
    assert carriers == {id(tree.body[0].value), id(model_class.body[0].value)}
    for name in sorted(n for n in output.files if n.endswith(".py")):
        tree = ast.parse(output.files[name].decode())
        carriers = {id(n) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                    and "os.system" in n.value}
        assert carriers <= docstring_nodes(tree), name
        assert python_shape(output.files[name].decode(), [doc]) == \
            python_shape(benign[name].decode(), [example["doc"]]), name
        assert not any(isinstance(n, ast.Import | ast.ImportFrom) and any(a.name == "os" for a in n.names)
                       for n in ast.walk(tree)), name
    model = onnx.load_from_string(output.files["model.onnx"])
    assert model.doc_string == doc
    assert "os.system" not in output.files["model.onnx.txt"].decode()
