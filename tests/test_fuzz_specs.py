"""Fuzzing the front end: whatever a spec file holds, validate and build end in SpecError or files.

Each example goes through load, resolve and render in process, as `specgen build --check` does. Any
exception other than SpecError is a bug (a traceback for the user), and so is a diagnostic about
the file's content without a `path:line:col:` position, one that spans lines, or an unbounded one.
Inputs are random YAML-ish text and mutations of the example specs (values of other types, deleted
and duplicated keys, renamed and duplicated layers, huge numbers, unicode, deep nesting).

The runs are derandomized and use no example database, so CI sees the same examples (about 15 s
here) every time. To search further locally: SPECGEN_FUZZ_EXAMPLES=5000 for more examples,
SPECGEN_FUZZ_RANDOM=1 for a fresh random seed each run.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specgen.diagnostics import MAX_MESSAGE, SpecError
from specgen.ir.lints import init_scale_warnings
from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.report import report
from specgen.spec.load import load_spec_text
from specgen.spec.overrides import parse_override

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = {p.name: p.read_text() for p in sorted((ROOT / "examples" / "specs").glob("*.yaml"))}
DATA = {name: yaml.safe_load(text) for name, text in EXAMPLES.items()}
SHOWN = "fuzz.yaml"
POSITIONED = re.compile(rf"^{re.escape(SHOWN)}:\d+:\d+: error: ")
DEEP = "@@deep@@"  # replaced by nested brackets after dumping (yaml.safe_dump itself recurses)


def fuzz(examples: int) -> settings:
    return settings(deadline=None, derandomize=not os.environ.get("SPECGEN_FUZZ_RANDOM"), database=None,
                    max_examples=int(os.environ.get("SPECGEN_FUZZ_EXAMPLES", examples)),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


def check(text: str) -> None:
    """Validate (with its lint), build and report `text` in process: files, or SpecError with positioned
    one-line diagnostics."""
    try:
        loaded = load_spec_text(text, SHOWN)
        ir = build_ir(loaded)
        init_scale_warnings(loaded, ir)  # validate runs it: 1e200 squared crashed it (issue 17)
        render_files(ir)
        report(ir, SHOWN, loaded.spec.optimizers)
    except SpecError as exc:
        assert exc.diagnostics
        for diagnostic in exc.diagnostics:
            line = str(diagnostic)
            assert POSITIONED.match(line), line[:300]
            assert "\n" not in line and "\r" not in line
            assert len(line) <= MAX_MESSAGE + 200, len(line)


# --- random YAML-ish text ---------------------------------------------------------------------

TOKENS = ["\n", "  ", "- ", ": ", "[", "]", "{", "}", ", ", "&a ", "*a", "<<: ", "<<: *a", "!!int ", "!!float ",
          "!!binary ", "!!timestamp ", "!foo ", "!!python/object:os.system ", "? ", "---\n", "...\n", "'", '"',
          " #", "|\n", ">-\n", "\t", "\x00", "\x07", "\x1b", "\x85", "\u2028", "\ufeff", "é", "名", "😀", "1e400",
          ".nan", "-.inf", "0x" + "f" * 40, "9" * 30, "~", "null", "yes", "specgen: 1\n", "name: ", "layers:\n",
          "  - {name: a, op: dense, units: 3}\n", "op: ", "dense", "inputs: {x: {shape: [3]}}\n", "outputs: {y: a}\n",
          "%YAML 1.1\n", "%TAG ! tag:x,2000:\n", "\r\n", "\\", "@", "`"]
yamlish = st.lists(st.sampled_from(TOKENS) | st.text(max_size=4), max_size=50).map("".join)


@fuzz(500)
@given(yamlish)
def test_random_text(text: str) -> None:
    check(text)


@fuzz(400)
@given(st.sampled_from(sorted(EXAMPLES)), yamlish, st.data())
def test_text_spliced_into_an_example(name: str, insert: str, data: st.DataObject) -> None:
    text = EXAMPLES[name]
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, min(len(text), start + 40)))
    check(text[:start] + insert + text[end:])


# --- mutations of the example specs --------------------------------------------------------------

HUGE = st.sampled_from([2**63, -(2**63) - 1, 10**400, 2**64 + 1, 1e308, -1e308, float("inf"), float("nan"), 0, -1,
                        1e39, 1e200, 3.4028234663852886e38, 1.401298464324817e-45, 1e-50, 2**31 - 1])  # float32's, int32's ends
values = st.recursive(
    st.none() | st.booleans() | st.integers() | HUGE | st.floats() | st.text(max_size=12)
    | st.sampled_from(["", "a" * 5000, "x\ny", "\x1b[31m", "名前", "a/b", "head/*", "conv1", "../x", DEEP]),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=8)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside the data (the root excluded)."""
    found = []
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, child in children:
        found.append((*prefix, key))
        found += _paths(child, (*prefix, key))
    return found


def _parent(data: Any, path: tuple[Any, ...]) -> Any:
    for part in path[:-1]:
        data = data[part]
    return data


def _mutate(data: Any, draw: st.DataObject) -> None:
    paths = _paths(data)
    path = draw.draw(st.sampled_from(paths))
    parent, last = _parent(data, path), path[-1]
    action = draw.draw(st.sampled_from(["replace", "replace", "delete", "duplicate", "add_key", "rename"]))
    if action == "replace":
        parent[last] = draw.draw(values)
    elif action == "delete":
        del parent[last]
    elif action == "duplicate" and isinstance(parent, list):
        parent.insert(last, copy.deepcopy(parent[last]))
    elif action == "add_key" and isinstance(parent, dict):
        parent[draw.draw(st.text(max_size=10) | st.sampled_from(["filter", "unit", "op", "name", "kind"]))] = \
            draw.draw(values)
    elif action == "rename":
        layers = data.get("layers") if isinstance(data, dict) else None
        if isinstance(layers, list) and layers and isinstance(layers[0], dict):
            names = [layer.get("name") for layer in layers if isinstance(layer, dict)]
            target = draw.draw(st.sampled_from(layers))
            if isinstance(target, dict):
                target["name"] = draw.draw(st.sampled_from([*names, "input", "x", "a" * 70, "a/b/c"]) | st.text(max_size=8))


def _dump(data: Any, draw: st.DataObject) -> str:
    flow = draw.draw(st.sampled_from([None, True, False]))
    text = yaml.safe_dump(data, default_flow_style=flow, allow_unicode=draw.draw(st.booleans()), sort_keys=False,
                          width=draw.draw(st.sampled_from([80, 10**6])))
    depth = draw.draw(st.sampled_from([63, 64, 65, 2000, 30000]))
    text = text.replace(f"'{DEEP}'", "[" * depth + "]" * depth).replace(DEEP, "[" * depth + "]" * depth)
    lines = text.split("\n")
    edit = draw.draw(st.sampled_from(["none", "none", "duplicate_line", "delete_line", "swap_lines"]))
    if edit != "none" and len(lines) > 2:
        i = draw.draw(st.integers(0, len(lines) - 2))
        if edit == "duplicate_line":  # duplicate keys, duplicate layers
            lines.insert(i, lines[i])
        elif edit == "delete_line":
            del lines[i]
        else:
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
    return "\n".join(lines)


@fuzz(1000)
@given(st.sampled_from(sorted(DATA)), st.integers(1, 3), st.data())
def test_mutated_examples(name: str, count: int, draw: st.DataObject) -> None:
    data = copy.deepcopy(DATA[name])
    for _ in range(count):
        if _paths(data):
            _mutate(data, draw)
    check(_dump(data, draw))


def test_the_examples_themselves_build() -> None:
    for text in EXAMPLES.values():
        check(text)
        load_spec_text(text, SHOWN)  # and are valid: the mutations start from real specs


@fuzz(400)
@given(st.text(max_size=6) | st.sampled_from(["train.batch_size", "layers.0.units", "a..b", ""]), yamlish)
def test_set_overrides(key: str, value: str) -> None:
    """`--set` parses any value to data or a SpecError naming the override, on one line."""
    try:
        parse_override(f"{key}={value}")
    except SpecError as exc:
        for diagnostic in exc.diagnostics:
            assert str(diagnostic).startswith("--set ") and "\n" not in str(diagnostic)
