"""Name length outside pydantic (rt8 F6): every check of a name against IDENT or LAYER also checks its length.

fields/base.py moved the length out of the patterns (name_length_problem, MAX_NAME_CHARS per part), and the
checks that used the patterns directly kept passing over-long names: a 200-character layer name in a block passed
spec/block_checks.py, then every instance and every layer reading it failed pydantic again, one 300-character
line each; the Keras importer kept its own 63-character limit and renamed names the spec accepts.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from keras_configs import dense, functional, input_layer, write_keras

from specgen.cli import main
from specgen.fields.base import ECHO_CHARS, MAX_NAME_CHARS, MAX_NAME_PARTS, is_layer_name
from specgen.importers.keras.names import Namer

LONG = "h" * 200  # a block's local layer name, used by two instances and read by the next layer

SPEC = f"""\
specgen: 1
name: twice
inputs:
  state: {{shape: [6]}}
  next_state: {{shape: [6]}}
outputs:
  q: qnet
  t: target
blocks:
  qnet:
    params: {{units: 4}}
    inputs: [s]
    outputs: {{q: out}}
    layers:
      - {{name: {LONG}, op: dense, units: $units}}
      - {{name: out, op: dense, units: 2, input: {LONG}}}
layers:
  - {{name: qnet, block: qnet, input: state}}
  - {{name: target, block: qnet, input: next_state}}
"""


def validate(text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
             monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[str]]:
    """`specgen validate s.yaml` in tmp_path: exit status and stderr lines."""
    monkeypatch.chdir(tmp_path)
    Path("s.yaml").write_text(text)
    code = main(["validate", "s.yaml"])
    return code, capsys.readouterr().err.splitlines()


def at(text: str, needle: str) -> str:
    """`line:col` of the first `needle` in text."""
    start = text.index(needle)
    return f"{text.count(chr(10), 0, start) + 1}:{start - text.rfind(chr(10), 0, start)}"


def test_an_over_long_layer_name_in_a_block_is_one_error_at_the_block(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert validate(SPEC, tmp_path, capsys, monkeypatch) == (1, [
        f"s.yaml:{at(SPEC, LONG)}: error: block 'qnet': layer name '{'h' * ECHO_CHARS}…' is too long: received 200 "
        f"characters, expected at most {MAX_NAME_CHARS}; shorten it",
        "1 error found"])


def test_an_over_long_part_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    text = SPEC.replace(LONG, f"a/{LONG}")
    assert validate(text, tmp_path, capsys, monkeypatch) == (1, [
        f"s.yaml:{at(text, 'a/h')}: error: block 'qnet': layer name 'a/{'h' * (ECHO_CHARS - 2)}…' is too long: "
        f"received 200 characters in its part '{'h' * ECHO_CHARS}…', expected at most {MAX_NAME_CHARS} per part; "
        "shorten it",
        "1 error found"])


def test_the_longest_local_name_is_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    code, lines = validate(SPEC.replace(LONG, "h" * MAX_NAME_CHARS), tmp_path, capsys, monkeypatch)
    assert (code, lines) == (0, []), lines


def test_an_over_long_parameter_reference_is_one_bounded_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    text = SPEC.replace(LONG, "hidden").replace("$units", f"${'u' * 200}")
    assert validate(text, tmp_path, capsys, monkeypatch) == (1, [
        f"s.yaml:{at(text, '$uu')}: error: block 'qnet': '${'u' * ECHO_CHARS}…' names no parameter: received 200 "
        f"characters, expected at most {MAX_NAME_CHARS}; shorten it",
        "1 error found"])


def test_a_local_name_ending_in_a_newline_is_one_error_at_the_block(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The block check used re.match, whose `$` also matches before a final newline; pydantic's does not."""
    text = SPEC.replace(f"name: {LONG},", '"name": "hidden\\n",').replace(f", input: {LONG}", "")
    quoted = '"hidden'
    assert validate(text, tmp_path, capsys, monkeypatch) == (1, [
        f"s.yaml:{at(text, quoted)}: error: block 'qnet': layer name 'hidden\\n' is not a layer name (parts of an "
        "ASCII letter, then ASCII letters and digits with single '_', joined by '/'); names cannot be parameters",
        "1 error found"])


@pytest.mark.parametrize(("name", "valid"), [
    ("a", True), ("a/1/b_c", True), ("/".join(["p"] * MAX_NAME_PARTS), True),
    ("/".join(["p"] * (MAX_NAME_PARTS + 1)), False), ("h" * MAX_NAME_CHARS, True), ("h" * (MAX_NAME_CHARS + 1), False),
    ("a/" + "h" * (MAX_NAME_CHARS + 1), False), ("/".join(["h" * MAX_NAME_CHARS] * MAX_NAME_PARTS), True),
    ("a\n", False), ("1a", False), ("a__b", False), ("a/", False), ("", False),
])
def test_is_layer_name(name: str, valid: bool) -> None:
    assert is_layer_name(name) is valid


def test_is_layer_name_refuses_long_text_at_once() -> None:
    """By its length, before the pattern runs over text that can be as long as the spec file (~1 s here)."""
    text = "a" * 10**7
    started = time.perf_counter()
    assert not is_layer_name(text)
    assert time.perf_counter() - started < 0.05


def test_keras_names_up_to_the_spec_limit_are_kept(tmp_path: Path) -> None:
    kept, cut = "a" * 100, "b" * (MAX_NAME_CHARS + 1)
    layers = [input_layer("x", [4]), dense(kept, 2, "x"), dense(cut, 2, kept)]
    source = write_keras(tmp_path / "m.keras", functional("m", layers, ["x"], [cut]))
    assert main(["import", "keras", str(source), "-o", str(tmp_path / "m.yaml")]) == 0
    lines = (tmp_path / "m.yaml").read_text().splitlines()
    renamed = "b" * (MAX_NAME_CHARS - 9) + "_" + Namer().layer(cut)[-8:]  # the cut part and a hash of the original
    assert [line for line in lines if "op: dense" in line] == [
        f"  - {{name: {kept}, op: dense, units: 2}}", f"  - {{name: {renamed}, op: dense, units: 2}}"]
    assert f"#   layer '{cut}' -> '{renamed}'" in lines and not any(f"'{kept}'" in line for line in lines)
    assert main(["validate", str(tmp_path / "m.yaml")]) == 0
