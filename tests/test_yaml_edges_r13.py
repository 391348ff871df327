"""YAML edges, round 13 (checker report /tmp/rt13/hostile.md F3-F6): tagged scalars, float32's largest value, the
node limit's cause, and --set values read as a file's.

Each test failed on the code before it: `!!int 010` built 8 units (YAML 1.2: 10) and `!!null relu` was null, with no
word; `!!int relu` said Python's `invalid literal for int() with base 10`; `!!float 1e400` echoed `inf`;
`3.4028235e+38`, float32's largest value as numpy prints it, was refused by a message naming that very number as
the bound; a file of 110000 written values was "a YAML alias bomb?"; `--set units=1e1` lost the file's
`(a float: write 10)`; `specgen: true` echoed Python's `True`; `extends: sub/../b.yaml` named a file that exists;
a run folder whose spec.resolved.yaml is a FIFO "has no spec.resolved.yaml"; `--set train.class_weight={0: 2}`
named the key `0` instead of the unknown `class_weight`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from specgen.cli import main
from specgen.diagnostics import SpecError
from specgen.fields.base import FLOAT32_BOUND, FLOAT32_MAX, as_float32
from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.spec.load import load_spec_text
from specgen.sweep.spec import Choice

ROOT = Path(__file__).resolve().parents[1]
MLP = (ROOT / "examples/specs/digits_mlp.yaml").read_text()
UNITS = "units: 128"  # at 13:38 of digits_mlp.yaml


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def edited(old: str, new: str, base: str = MLP) -> str:
    assert base.count(old) == 1
    return base.replace(old, new)


def validate(capsys: pytest.CaptureFixture[str], text: str, *args: str) -> tuple[int, list[str]]:
    Path("t.yaml").write_text(text)
    code = main(["validate", "t.yaml", *args])
    out, err = capsys.readouterr()
    return code, out.splitlines() + err.splitlines()


# --- F3: a tag asks for a kind of value, which YAML 1.2 reads by its own rules -----------------------------------

def _units(rest: str) -> str:
    return f"t.yaml:13:38: error: units: received {rest}"


@pytest.mark.parametrize(("written", "line"), [
    ("!!int 010", _units("!!int 010: YAML 1.1 reads 8 (octal) and YAML 1.2 reads 10; write 10, or 8 for the octal "
                         "value")),
    ('!!int "010"', _units("!!int 010: YAML 1.1 reads 8 (octal) and YAML 1.2 reads 10; write 10, or 8 for the octal "
                           "value")),
    ("&n !!int 010", _units("!!int 010: YAML 1.1 reads 8 (octal) and YAML 1.2 reads 10; write 10, or 8 for the "
                            "octal value")),
    ("!!int &n 010", _units("!!int 010: YAML 1.1 reads 8 (octal) and YAML 1.2 reads 10; write 10, or 8 for the "
                            "octal value")),
    ("!!int 1_000", _units("!!int 1_000: YAML 1.1 reads 1000 and YAML 1.2 refuses it (not an integer there); write "
                           "1000")),
    ("!!int 1:30", _units("!!int 1:30: YAML 1.1 reads 90 and YAML 1.2 refuses it (not an integer there); write 90")),
    ("!!int 0b11", _units("!!int 0b11: YAML 1.1 reads 3 and YAML 1.2 refuses it (not an integer there); write 3")),
    ("!!int -0x1F", _units("!!int -0x1F: YAML 1.1 reads -31 and YAML 1.2 refuses it (not an integer there); write "
                           "-31")),
    ("!!int 08", _units("!!int 08: YAML 1.2 reads 8 and YAML 1.1 (specgen's reader) refuses it; write 8")),
    ("!!float 1_0.5", _units("!!float 1_0.5: YAML 1.1 reads 10.5 and YAML 1.2 refuses it (not a number there); "
                             "write 10.5")),
    ("!!float inf", _units("!!float inf: YAML 1.1 reads .inf and YAML 1.2 refuses it (not a number there); write "
                           ".inf")),
    ("!!bool yes", _units("!!bool yes: YAML 1.1 reads true and YAML 1.2 refuses it (not true or false there); write "
                          "true")),
    ("!!int relu", _units("!!int relu, expected an integer after !!int; write an integer there, or the value "
                          "without the tag")),
    ("!!float abc", _units("!!float abc, expected a number after !!float; write a number there, or the value without "
                           "the tag")),
    ("!!int ''", _units("!!int '', expected an integer after !!int; write an integer there, or the value without the "
                        "tag")),
])
def test_a_tagged_scalar_yaml_12_reads_otherwise_is_refused(capsys: pytest.CaptureFixture[str], written: str,
                                                            line: str) -> None:
    assert validate(capsys, edited(UNITS, f"units: {written}")) == (1, [line, "1 error found"])


def test_untagged_and_tagged_octal_get_the_same_words(capsys: pytest.CaptureFixture[str]) -> None:
    plain = validate(capsys, edited(UNITS, "units: 010"))[1][0]
    tagged = validate(capsys, edited(UNITS, "units: !!int 010"))[1][0]
    assert tagged == plain.replace("received 010", "received !!int 010")


def test_a_tagged_boolean_and_null_the_checker_found(capsys: pytest.CaptureFixture[str]) -> None:
    text = edited("units: 128, activation: relu", "units: 128, use_bias: !!bool off, activation: !!null relu")
    assert validate(capsys, text) == (1, [
        "t.yaml:13:53: error: use_bias: received !!bool off: YAML 1.1 reads false and YAML 1.2 refuses it (not true or "
        "false there); write false",
        "t.yaml:13:77: error: activation: received !!null relu: YAML 1.1 reads null and YAML 1.2 refuses it (not null "
        "there); write null, or relu without the tag",
        "2 errors found"])


def test_a_tag_after_an_anchor_on_the_line_before_is_still_judged(capsys: pytest.CaptureFixture[str]) -> None:
    text = edited("seed: 1\n", "seed: &s\n    !!null relu\n")
    assert validate(capsys, text) == (1, [
        "t.yaml:29:9: error: seed: received !!null relu: YAML 1.1 reads null and YAML 1.2 refuses it (not null there); "
        "write null, or relu without the tag", "1 error found"])


def test_a_tagged_key_is_judged_as_a_value() -> None:
    with pytest.raises(SpecError) as caught:
        load_spec_text(edited("collections:", "collections:\n  !!bool on: [x]", MLP + "collections:\n"), "t.yaml")
    assert str(caught.value).splitlines()[0] == (
        "t.yaml:35:3: error: a mapping key: received !!bool on: YAML 1.1 reads true and YAML 1.2 refuses it (not true "
        "or false there); write true")


@pytest.mark.parametrize("written", ["!!int 0x1F", "!!int 0o17", "!!int 12", "!!int 07", "!!int +12"])
def test_a_tagged_integer_both_read_alike_is_taken(capsys: pytest.CaptureFixture[str], written: str) -> None:
    assert validate(capsys, edited(UNITS, f"units: {written}"))[0] == 0


@pytest.mark.parametrize(("written", "line"), [
    ("!!float 1e400", "t.yaml:13:38: error: units: expected a finite number, received 1e400 (in layer 'hidden')"),
    ("!!float 1e3", "t.yaml:13:38: error: units: expected an integer, received 1e3 (a float: write 1000) (in layer "
                    "'hidden')"),
])
def test_a_tagged_number_is_echoed_as_written(capsys: pytest.CaptureFixture[str], written: str, line: str) -> None:
    assert validate(capsys, edited(UNITS, f"units: {written}")) == (1, [line, "1 error found"])


def test_a_tagged_set_value_is_judged_as_in_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert validate(capsys, MLP, "--set", "layers[hidden].units=!!int 010") == (1, [
        "--set layers[hidden].units=!!int 010: error: received !!int 010: YAML 1.1 reads 8 (octal) and YAML 1.2 reads "
        "10; write 10, or 8 for the octal value (column 1 of the value)", "1 error found"])


# --- F4: every value that rounds to a finite float32 is accepted -------------------------------------------------

HEAD = "specgen: 1\nname: edge\ninputs:\n  x: {shape: [4]}\noutputs:\n  y: out\nlayers:\n"


def _layers(value: str) -> str:
    return HEAD + (f"  - {{name: bn, op: batch_norm, epsilon: {value.lstrip('-')}}}\n"
                   f"  - {{name: r, op: rescale, scale: {value}, offset: {value}}}\n"
                   f"  - {{name: out, op: dense, units: 1, kernel_init: {{kind: constant, value: {value}}}}}\n")


@pytest.mark.parametrize("value", ["3.4028235e+38", "-3.4028235e+38", "3.40282356e+38", "3.4028235677973362e+38"])
def test_a_value_that_rounds_to_float32s_largest_validates_and_builds(value: str) -> None:
    loaded = load_spec_text(_layers(value), "edge.yaml")
    files = render_files(build_ir(loaded))  # the ONNX parser reads the constants back
    assert files and as_float32(float(value)) == math.copysign(FLOAT32_MAX, float(value))


def test_a_value_past_it_names_a_bound_that_is_accepted() -> None:
    with pytest.raises(SpecError) as caught:
        load_spec_text(_layers("3.4028235677973366e+38"), "edge.yaml")
    lines = str(caught.value).splitlines()
    assert lines == [
        "edge.yaml:8:41: error: epsilon: received 3.4028235677973366e+38, expected a float32 value (magnitude at most "
        "3.4028235e+38) (in layer 'bn')",
        "edge.yaml:9:35: error: scale: received 3.4028235677973366e+38, expected a float32 value (magnitude at most "
        "3.4028235e+38) (in layer 'r')",
        "edge.yaml:9:67: error: offset: received 3.4028235677973366e+38, expected a float32 value (magnitude at most "
        "3.4028235e+38) (in layer 'r')",
        "edge.yaml:10:75: error: value: received 3.4028235677973366e+38, expected a float32 value (magnitude at most "
        "3.4028235e+38) (in layer 'out')"]
    named = lines[0].split("magnitude at most ")[1].split(")")[0]
    load_spec_text(_layers(named), "edge.yaml")  # the bound the message names is itself accepted


def test_the_bound_is_the_last_float64_before_float32_overflows() -> None:
    assert as_float32(FLOAT32_BOUND) == FLOAT32_MAX
    with pytest.raises(OverflowError):
        as_float32(math.nextafter(FLOAT32_BOUND, math.inf))


def test_the_schema_and_a_sweep_choice_take_the_same_bound() -> None:
    schema = (ROOT / "schemas/specgen.schema.json").read_text()
    assert json.loads(schema)  # and every float's maximum is the bound, none the old 3.4028234663852886e+38
    assert f'"maximum": {json.dumps(FLOAT32_BOUND)}' in schema and "3.4028234663852886e+38" not in schema
    assert TypeAdapter(Choice).validate_python(3.4028235e38) == 3.4028235e38
    with pytest.raises(ValidationError):
        TypeAdapter(Choice).validate_python(3.4028235677973366e38)


# --- F5: the node limit names its cause ------------------------------------------------------------------------

def test_many_written_values_are_not_an_alias_bomb(capsys: pytest.CaptureFixture[str]) -> None:
    text = MLP + "\ncollections: {c: [" + ",".join(["a"] * 110_000) + "]}\n"
    assert validate(capsys, text) == (1, [
        "t.yaml:35:14: error: the document holds more than 100000 values; specs are limited to 100000 (is this really "
        "a spec?)", "1 error found"])


def test_a_few_aliases_among_many_written_values_are_not_a_bomb(capsys: pytest.CaptureFixture[str]) -> None:
    text = MLP + "\nx: &a [" + ",".join(["b"] * 20) + "]\ncollections: {c: [" + ",".join(["a"] * 99_990) + ", *a]}\n"
    assert validate(capsys, text)[1][0] == (
        "t.yaml:36:14: error: the document holds more than 100000 values; specs are limited to 100000 (is this really "
        "a spec?)")


def test_an_alias_bomb_keeps_its_words(capsys: pytest.CaptureFixture[str]) -> None:
    levels = "".join(f"{name}: &{name} [{', '.join([f'*{prev}'] * 10)}]\n" for prev, name in zip("abcd", "bcde", strict=True))
    text = MLP + "\na: &a [x, x, x, x, x, x, x, x, x, x]\n" + levels + "f: [*e, *e]\n"
    assert validate(capsys, text) == (1, [
        "t.yaml:39:4: error: the document expands to more than 100000 values through aliases (a YAML alias bomb?); "
        "write the values out or use fewer aliases", "1 error found"])


# --- F6 and the left-over: --set values read as a file's; echoes; extends; diff ----------------------------------

@pytest.mark.parametrize(("override", "line"), [
    ("layers[hidden].units=1e1", "units: expected an integer, received 1e1 (a float: write 10) (in layer 'hidden')"),
    ("train.epochs=1e400", "epochs: expected an integer, received 1e400 (a float past float's range; an integer in a "
                           "spec is at most 2147483647)"),
    ("train.epochs=0o17", "epochs: expected an integer, received 0o17 (YAML 1.2's octal 15, which YAML 1.1 reads as "
                          "text: write 15)"),
    ("train={batch_size: 3.2e1, epochs: 1}", "batch_size: expected a positive integer or 'full', received 3.2e1 (a "
                                             "float: write 32)"),
    ("layers[hidden].kernel_init={kind: constant, value: 1.0e+400}",
     "value: expected a finite number, received 1.0e+400 (in layer 'hidden')"),
    ("train.class_weight={0: 2}", "unknown key 'class_weight'; expected one of 'accumulate', 'batch_size', 'clip', "
                                  "'distribute', 'ema', 'epochs', 'jit_compile', 'metrics', 'precision', 'seed', "
                                  "'shuffle_buffer' or 'tracking'"),
    ("train.class_weight={true: 2}", "unknown key 'class_weight'; expected one of 'accumulate', 'batch_size', 'clip', "
                                     "'distribute', 'ema', 'epochs', 'jit_compile', 'metrics', 'precision', 'seed', "
                                     "'shuffle_buffer' or 'tracking'"),
    ("train.seed={0: 2}", "a mapping key: received 0 (a number), expected a name (quote it ('0') if you mean the "
                          "text) (column 2 of the value)"),
])
def test_a_set_value_gets_the_files_words(capsys: pytest.CaptureFixture[str], override: str, line: str) -> None:
    assert validate(capsys, MLP, "--set", override) == (1, [f"--set {override}: error: {line}", "1 error found"])


def test_the_file_gives_class_weight_the_same_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = validate(capsys, edited("  seed: 1\n", "  seed: 1\n  class_weight: {0: 2}\n"))
    assert (code, lines[0].split(": error: ")[1]) == (1, "unknown key 'class_weight'; expected one of 'accumulate', "
                                                      "'batch_size', 'clip', 'distribute', 'ema', 'epochs', "
                                                      "'jit_compile', 'metrics', 'precision', 'seed', 'shuffle_buffer' "
                                                      "or 'tracking'")


@pytest.mark.parametrize(("version", "shown"), [("true", "true"), ("null", "null"), ("[1]", "[1]")])
def test_the_format_version_is_echoed_as_yaml(capsys: pytest.CaptureFixture[str], version: str, shown: str) -> None:
    assert validate(capsys, edited("specgen: 1\n", f"specgen: {version}\n")) == (1, [
        f"t.yaml:2:10: error: unsupported spec format version {shown}; this specgen reads version 1",
        "1 error found"])


@pytest.mark.parametrize(("ref", "line"), [
    ("sub/../b.yaml", "extends: 'sub/../b.yaml' does not exist (looked for sub/sub/../b.yaml: no folder sub/sub)"),
    ("b.yaml/../b.yaml", "extends: 'b.yaml/../b.yaml' does not exist (looked for sub/b.yaml/../b.yaml: sub/b.yaml is "
                         "not a folder)"),
    ("gone.yaml", "extends: 'gone.yaml' does not exist (looked for sub/gone.yaml)"),
])
def test_extends_names_the_path_looked_for(capsys: pytest.CaptureFixture[str], ref: str, line: str) -> None:
    Path("sub").mkdir()
    Path("sub/b.yaml").write_text(MLP)
    Path("sub/v.yaml").write_text(f'extends: "{ref}"\nname: v\n')
    assert main(["validate", "sub/v.yaml"]) == 1
    assert capsys.readouterr().err.splitlines() == [f"sub/v.yaml:1:10: error: {line}", "1 error found"]


@pytest.mark.parametrize(("make", "what"), [(os.mkfifo, "a FIFO (named pipe)"), (os.mkdir, "a folder")])
def test_diff_of_a_run_whose_record_is_no_file_says_what_it_is(capsys: pytest.CaptureFixture[str],
                                                               make: Callable[[Path], object], what: str) -> None:
    Path("run").mkdir()
    make(Path("run/spec.resolved.yaml"))
    Path("base.yaml").write_text(MLP)
    assert main(["diff", "run", "base.yaml"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"run/spec.resolved.yaml: error: the spec path is {what}, not a regular file", "1 error found"]
