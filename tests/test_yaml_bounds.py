"""Hostile YAML costs bounded work and always ends in positioned diagnostics (issue 9, items 7, 9, 10, 11).

Cases that crashed the old loader outright (a segfault in libyaml's composer, reading /dev/zero,
blocking on a FIFO) run `specgen` in a subprocess, so a crash fails the test instead of pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specgen.cli import main
from specgen.diagnostics import MAX_ECHO, MAX_MESSAGE, MAX_PER_FILE, Diagnostic, SpecError, describe, quoted
from specgen.spec import source_map, yaml_compose, yaml_source
from specgen.spec.load import load_spec, load_spec_text
from specgen.spec.overrides import parse_override
from specgen.spec.yaml_compose import MAX_DEPTH, MAX_FILE_BYTES, max_nesting
from specgen.spec.yaml_source import offset_position, parse_yaml

ROOT = Path(__file__).resolve().parents[1]
HEAD = "specgen: 1\nname: deep\ndoc: "  # the nested value starts at 3:6
NESTS = f"error: the document nests more than {MAX_DEPTH} levels deep"
FUZZ = settings(deadline=None, max_examples=150, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])


def specgen(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specgen", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


# --- 7: nesting is bounded before anything recurses on it --------------------------------------

DEEP = {  # 30,000 levels in 60-150 KB: each overflowed libyaml's C stack (exit 139, no message)
    "flow_lists": ("[" * 30000 + "]" * 30000, "3:70"),
    "flow_maps": ("{a: " * 30000 + "1" + "}" * 30000, "3:262"),
    "block_lists": ("\n" + "".join("  " * i + "-\n" for i in range(1, 200)), "68:131"),
    "compact_lists": ("\n  " + "- " * 30000 + "x", "4:131"),
    "unclosed": ("[" * 30000, "3:70"),  # a syntax error after the depth: the depth comes first
    "lists_in_maps": ("[{k: " * 15000 + "v" + "}]" * 15000, "3:166"),
}


@pytest.mark.parametrize("command", ["validate", "build"])
@pytest.mark.parametrize("case", sorted(DEEP))
def test_deep_nesting_is_a_positioned_error_not_a_crash(tmp_path: Path, case: str, command: str) -> None:
    text, where = DEEP[case]
    spec = tmp_path / "deep.yaml"
    spec.write_text(HEAD + text + "\n")
    extra = ["--out", str(tmp_path / "out")] if command == "build" else []
    result = specgen(command, str(spec), *extra)
    assert (result.returncode, result.stderr) == (1, f"{spec}:{where}: {NESTS}\n1 error found\n")


def test_deep_nesting_in_the_python_fallback_is_positioned() -> None:
    """A syntax error sends the text through PyYAML's Python composer, which ran out of recursion
    at a few hundred levels and reported the depth without a position."""
    with pytest.raises(SpecError) as caught:
        parse_yaml("x: " + "[" * 2000 + "]" * 1999, "t.yaml")
    assert [str(d) for d in caught.value.diagnostics] == [f"t.yaml:1:68: {NESTS}"]


def test_the_depth_limit_is_exact_and_the_same_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """check_depth (before composing) and the converter (after) agree on what is too deep and where."""
    cases = ["x: " + "[" * n + "]" * n for n in (63, 64, 65)] + ["x: " + "{a: " * n + "1" + "}" * n for n in (63, 64, 65)]
    cases += ["a:\n" + "".join("  " * i + "- \n" for i in range(1, 70))]
    for text in cases:
        results = []
        for gate in (10**9, 0):  # never / always check the events before composing
            monkeypatch.setattr(yaml_compose, "C_SAFE_DEPTH", gate)
            try:
                parse_yaml(text, "t.yaml")
                results.append("ok")
            except SpecError as exc:
                results.append(str(exc))
        assert results[0] == results[1], text[:40]


def _nest(value: object, levels: int) -> object:
    for _ in range(levels):
        value = [value]
    return value


@FUZZ
@given(st.recursive(st.none() | st.integers() | st.text(max_size=5),
                    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
                    max_leaves=30),
       st.booleans(), st.integers(0, 40))
def test_max_nesting_is_an_upper_bound(value: object, flow: bool, extra: int) -> None:
    """The cheap bound that lets a text skip the event check never undercounts, in either style."""
    value = _nest(value, extra)
    text = yaml.safe_dump(value, default_flow_style=flow)
    depth = _depth(yaml.compose(text, Loader=yaml.SafeLoader))
    assert max_nesting(text) >= depth


def _depth(node: yaml.Node | None) -> int:
    if isinstance(node, yaml.SequenceNode):
        return 1 + max((_depth(n) for n in node.value), default=0)
    if isinstance(node, yaml.MappingNode):
        return 1 + max((_depth(n) for pair in node.value for n in pair), default=0)
    return 0


MERGES = {  # `<<` recursed without a depth bound: RecursionError and a traceback
    "merge_chain": "a0: &a0 {x: 1}\n" + "".join(f"a{i}: &a{i} {{<<: *a{i - 1}}}\n" for i in range(1, 400)),
    "merge_itself": "a: &a {<<: *a}\n",
    "list_itself": "a: &a [*a]\n",
}


@pytest.mark.parametrize("case", sorted(MERGES))
def test_recursive_aliases_and_merge_chains_are_bounded(case: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_yaml(MERGES[case], "t.yaml")
    (diagnostic,) = caught.value.diagnostics
    # a value holding itself is named as the recursive alias it is (tests/test_cli_front_r11.py); a chain is deep
    expected = NESTS if case == "merge_chain" else "(a recursive alias)"
    assert diagnostic.position is not None and expected in str(diagnostic)


def test_merges_within_the_limit_still_work() -> None:
    text = "a0: &a0 {x: 1}\n" + "".join(f"a{i}: &a{i} {{<<: *a{i - 1}, y{i}: {i}}}\n" for i in range(1, 40))
    data, source = parse_yaml(text, "t.yaml")
    assert data["a39"]["x"] == 1 and data["a39"]["y1"] == 1
    assert source.locate(("a39", "x"), data) == yaml_source.Position(1, 13)


# --- 9: error reporting is linear; echoes and the number printed are bounded -------------------

EXAMPLE = (ROOT / "examples" / "specs" / "digits_mlp.yaml").read_text()


def test_unknown_keys_are_located_in_linear_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each mapping's keys are read once, not once per diagnostic (8,000 unknown keys took 4 s)."""
    calls = 0
    original = source_map.key_value

    def counting(node: yaml.ScalarNode) -> object:
        nonlocal calls
        calls += 1
        return original(node)

    monkeypatch.setattr(source_map, "key_value", counting)
    keys = 3000
    with pytest.raises(SpecError) as caught:
        load_spec_text(EXAMPLE + "".join(f"zz{i}: {i}\n" for i in range(keys)), "t.yaml")
    assert len(caught.value.diagnostics) == keys
    assert calls < 2 * keys + 200  # the old lookup compared every key for each diagnostic: ~keys**2 / 2


def test_sixty_thousand_unknown_keys_take_seconds_not_minutes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "keys.yaml"
    spec.write_text(EXAMPLE + "".join(f"zz{i}: 1\n" for i in range(60000)))
    start = time.process_time()  # CPU seconds of this process: other xdist workers and jobs on the shared cores do not count
    assert main(["validate", str(spec)]) == 1
    elapsed = time.process_time() - start
    err = capsys.readouterr().err.splitlines()
    assert elapsed < 30, elapsed  # 4 s here; the old code took over 4 minutes on this machine
    assert len(err) == MAX_PER_FILE + 2
    assert err[-2:] == [f"{spec}: note: and {60000 - MAX_PER_FILE} more errors in this file "
                        f"(only the first {MAX_PER_FILE} are shown)", "60000 errors found"]
    assert err[0].startswith(f"{spec}:34:1: error: unknown key 'zz0'")


def test_every_file_prints_at_most_its_cap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = []
    for name, count in (("a.yaml", 150), ("b.yaml", 3)):
        paths.append(tmp_path / name)
        paths[-1].write_text(EXAMPLE + "".join(f"zz{i}: 1\n" for i in range(count)))
    assert main(["validate", *map(str, paths)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == MAX_PER_FILE + 1 + 3 + 1
    assert err[MAX_PER_FILE] == f"{paths[0]}: note: and 50 more errors in this file (only the first 100 are shown)"
    assert err[-1] == "153 errors found"
    assert str(SpecError([Diagnostic("p", None, "m")] * 101)).count("\n") == MAX_PER_FILE


HUGE = "a" * 900_000


@pytest.mark.parametrize("text, start", [
    (EXAMPLE.replace("name: digits_mlp", f"name: {HUGE}"), "t.yaml:3:7: error: name: invalid name 'aaaa"),
    (EXAMPLE + f"? {HUGE}\n: 1\n", "t.yaml:34:3: error: unknown key 'aaaa"),  # a plain key is at most 1024
    (EXAMPLE.replace("op: flatten", f"op: {HUGE}"), "t.yaml:12:22: error: unknown op 'aaaa"),
    (EXAMPLE.replace("kernel_init: he_normal", f"kernel_init: {HUGE}"), "t.yaml:13:"),
    (EXAMPLE.replace("units: 10", f"units: [{', '.join(['1'] * 50000)}]"), "t.yaml:15:"),
    (EXAMPLE + f"doc2: !{HUGE} x\n", "t.yaml:34:7: error: unsupported YAML tag '!aaaa"),
    (EXAMPLE + f"name: {HUGE}\n", "t.yaml:34:1: error: duplicate key 'name'"),
    (EXAMPLE + "export: {onnx: {opset: 0x" + "f" * 20000 + "}}\n", "t.yaml:34:24: error: "),
    (EXAMPLE.replace("batch_size: 32", "batch_size: 0x" + "f" * 20000), "t.yaml:26:15: error: "),
])
def test_echoed_values_are_cut(text: str, start: str) -> None:
    """A 900 KB name gave a 900 KB line; an integer of 24,000 digits crashed the message (repr refuses it)."""
    with pytest.raises(SpecError) as caught:
        load_spec_text(text, "t.yaml")
    lines = str(caught.value).splitlines()
    assert lines[0].startswith(start), lines[0][:300]
    # The echo is cut to MAX_ECHO; what remains is the message's own text, which for an unknown op lists
    # every registered op (so it grows with the registry, not with the input).
    from specgen.kinds.ops import REGISTRY

    allowed = 600 + sum(len(name) + 4 for name in REGISTRY)
    assert all(len(line) < allowed for line in lines), max(map(len, lines))


def test_many_echoes_of_one_long_value_stay_small() -> None:
    """An alias of a long string used 2,000 times: each message echoes a cut copy, never the whole."""
    layers = "".join(f"  - {{name: l{i}, op: *big}}\n" for i in range(2000))
    text = f"specgen: 1\nname: x\nbig: &big {'b' * 200_000}\ninputs: {{x: {{shape: [1]}}}}\noutputs: {{y: l0}}\nlayers:\n{layers}"
    start = time.process_time()  # CPU seconds of this process: other xdist workers and jobs on the shared cores do not count
    with pytest.raises(SpecError) as caught:
        load_spec_text(text, "t.yaml")
    assert time.process_time() - start < 20  # a hang guard: 3.0 s here on 2 loaded cores
    # each use of the alias is reported where it is written (its layer's line), the unknown key `big` at its own
    assert [d.position for d in caught.value.diagnostics] == [yaml_source.Position(3, 1)] + [
        yaml_source.Position(7 + i, 19 + len(str(i))) for i in range(2000)]
    from specgen.kinds.ops import REGISTRY  # the unknown-op message lists every registered op, as above

    assert all(len(d.message) < 600 + sum(len(name) + 4 for name in REGISTRY) for d in caught.value.diagnostics)


def test_echo_helpers() -> None:
    assert quoted("conv1") == "'conv1'"
    assert quoted("k" * 100) == f"'{'k' * MAX_ECHO}…' (100 characters)"
    assert describe(10**5000) == "<an integer of about 5001 digits> (int)"
    assert describe([10**5000, "x" * 500]).startswith("[<an integer of about 5001 digits>, 'xxx")
    assert len(describe(list(range(10**5)))) < 60
    long = Diagnostic("p", None, "m" * 10 * MAX_MESSAGE)
    assert len(long.message) <= MAX_MESSAGE and "characters cut" in long.message


# --- 10: only regular files, read to the limit; --set values under the same bounds --------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    result = specgen("validate", str(fifo), timeout=30)  # the old loader waited for a writer forever
    assert (result.returncode, result.stderr) == (
        1, f"{fifo}: error: the spec path is a FIFO (named pipe), not a regular file\n1 error found\n")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_a_device_is_refused_without_reading(tmp_path: Path) -> None:
    link = tmp_path / "zero.yaml"
    link.symlink_to("/dev/zero")
    for path in ("/dev/zero", str(link)):  # the old loader read /dev/zero until memory ran out
        result = specgen("validate", path, timeout=30)
        assert (result.returncode, result.stderr) == (
            1, f"{path}: error: the spec path is a device, not a regular file\n1 error found\n")


def test_a_file_is_read_only_up_to_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (4 * MAX_FILE_BYTES))
    read: list[int] = []
    original = os.read

    def counting(fd: int, n: int) -> bytes:
        data = original(fd, n)
        read.append(len(data))
        return data

    monkeypatch.setattr(os, "read", counting)
    with pytest.raises(SpecError) as caught:
        load_spec(big)
    assert str(caught.value) == (f"{big}: error: the file is {4 * MAX_FILE_BYTES} bytes; specs are limited to "
                                 f"{MAX_FILE_BYTES} bytes (is this really a spec?)")
    assert sum(read) == MAX_FILE_BYTES + 1


def test_windows_line_ends_read_as_before(tmp_path: Path) -> None:
    spec = tmp_path / "crlf.yaml"
    spec.write_bytes(EXAMPLE.replace("\n", "\r\n").encode())
    assert load_spec(spec).data == load_spec_text(EXAMPLE).data


def _bomb(levels: int) -> str:
    parts = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    parts += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "{" + ", ".join(parts) + "}"


@pytest.mark.parametrize("value, message", [
    (_bomb(7), "error: the document expands to more than 100000 values through aliases"),
    ("[" * 30000 + "]" * 30000, f"error: the document nests more than {MAX_DEPTH} levels deep (column 66 of the value)"),
    ("!!python/object/apply:os.system [id]", "error: unsupported YAML tag '!!python/object/apply:os.system'"),
    ("a\x07", "error: the value is not valid YAML: unacceptable character U+0007: special characters are not "
              "allowed (column 2 of the value)"),
    ("{a: 1, a: 2}", "error: duplicate key 'a'"),
    ("[1, 2", "error: the '[' opened at 1:1 is never closed: the value ends first; add ']' where it ends (column 6 of "
              "the value)"),
])
def test_set_values_have_the_spec_bounds(value: str, message: str) -> None:
    """`--set` went through yaml.safe_load: an 8-level bomb took 8.7 s and 1.1 GB, deep lists a traceback."""
    start = time.process_time()  # CPU seconds of this process: other xdist workers and jobs on the shared cores do not count
    with pytest.raises(SpecError) as caught:
        parse_override(f"train.batch_size={value}")
    # A hang guard (the messages prove each bound applied): the old 8-level bomb took 8.7 s, 30,000 `[` took
    # 5.3-5.7 s here on 2 shared cores (PyYAML scans them before the depth check), so 5 s failed under load.
    assert time.process_time() - start < 30
    (line,) = str(caught.value).splitlines()
    assert line.startswith("--set train.batch_size=") and message in line, line


@pytest.mark.parametrize("text, expected", [
    ("train.batch_size=32", (["train", "batch_size"], 32)),
    ("optimizers.all.learning_rate=1.0e-4", (["optimizers", "all", "learning_rate"], 1e-4)),
    ("layers.0.units=[1, 2]", (["layers", 0, "units"], [1, 2])),
    ("doc=", (["doc"], "")),
    ("doc=null", (["doc"], None)),
    ("layers.²=1", (["layers", "²"], 1)),  # int('²') raised ValueError
    (f"layers.{'9' * 5000}=1", (["layers", "9" * 5000], 1)),  # so did int() of 5,000 digits
])
def test_set_values_still_parse(text: str, expected: tuple[list[str | int], object]) -> None:
    assert parse_override(text) == expected


# --- 11: every YAML error kind gets line:col ------------------------------------------------------

YAML_ERRORS = {
    "control_character": ("doc: a\x01b\n", "3:7: error: invalid YAML: unacceptable character U+0001: special "
                                          "characters are not allowed"),
    # U+0085 is a line break for YAML 1.1 only: refused where it is, before the control character after it
    "control_after_nel": ("doc: a\x85 b\x02\n", "3:7: error: the character U+0085 (NEXT LINE (NEL)) is a line break"),
    "scanner": ("doc: 'open\n", "4:1: error: the quote \"'\" opened at 3:6 is never closed, so the value runs on to "
                "the end of the file: close it with \"'\""),
    "parser": ("doc: [a, b\n", "4:1: error: the '[' opened at 3:6 is never closed: the file ends first; add ']' where "
               "it ends"),
    "composer_alias": ("doc: *nope\n", "3:6: error: the alias '*nope' names no anchor; an alias repeats a value marked "
                       "'&nope' earlier in the file: mark that value with '&nope', or write the value here"),
    "composer_documents": ("doc: a\n---\nb: 1\n", "4:1: error: invalid YAML: a second document starts here ('---'); "
                           "a spec is one YAML document"),
    "constructor_int": ("doc: !!int abc\n", "3:6: error: doc: received !!int abc, expected an integer after !!int"),
    "constructor_binary": ("doc: !!binary YQ=\n", "3:6: error: invalid YAML: failed to decode base64 data"),
    "constructor_timestamp": ("doc: !!timestamp 2020-99-99\n", "3:6: error: invalid YAML value: month must be in 1..12"),
}


@pytest.mark.parametrize("case", sorted(YAML_ERRORS))
def test_every_yaml_error_has_a_line_and_column(case: str) -> None:
    text, expected = YAML_ERRORS[case]
    with pytest.raises(SpecError) as caught:
        load_spec_text("specgen: 1\nname: x\n" + text, "t.yaml")
    (line,) = str(caught.value).splitlines()
    assert line.startswith("t.yaml:" + expected), line


@FUZZ
@given(st.lists(st.sampled_from(["a", " ", "\n", "\r", "\r\n", "\x85", "\u2028", "\u2029", "é", "\t"]), max_size=40),
       st.data())
def test_offsets_become_the_line_and_column_pyyaml_marks_give(chars: list[str], data: st.DataObject) -> None:
    text = "".join(chars)
    offset = data.draw(st.integers(0, len(text)))
    reader = yaml.reader.Reader(text)
    reader.forward(offset)
    mark = reader.get_mark()
    assert offset_position(text, offset) == yaml_source.Position(mark.line + 1, mark.column + 1)


def test_a_huge_integer_is_echoed_bounded() -> None:
    """0x followed by 20,000 digits is an int of ~24,000 decimal digits: past Python's int-to-str limit."""
    text = ("specgen: 1\nname: hx\ninputs: {x: {shape: [4]}}\noutputs: {y: d}\n"
            "layers:\n  - {name: d, op: dense, units: 0x" + "f" * 20000 + "}\n")
    with pytest.raises(SpecError) as caught:
        load_spec_text(text, "hx.yaml")
    (line,) = [str(d) for d in caught.value.diagnostics]
    assert line == ("hx.yaml:6:33: error: units: received <an integer of about 24083 digits>, expected a value "
                    "<= 2147483647 (in layer 'd')")
