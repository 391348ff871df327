"""A quoted scalar is text (YAML 1.1 and 1.2 alike; the JSON Schema says number): a number field refuses `'0.5'` with
one positioned line, while plain numbers, ints for floats, `1e-3` (YAML 1.2's number), kinds and `--set` values
read as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from specgen.diagnostics import SpecError
from specgen.spec.load import LoadedSpec, load_spec_text
from specgen.spec.overrides import load_with_overrides

SPEC = """\
specgen: 1
name: quoted
inputs: {{x: {{shape: [6]}}}}
outputs: {{y: out, yt: tout}}
layers:
  - {{name: out, op: dense, input: x, units: {units}}}
  - {{name: tout, op: dense, input: x, units: 1}}
loss: {{kind: mean_squared_error, predictions: y, labels: t}}
optimizers: {{o: {{variables: "out/*", kind: adam, learning_rate: {lr}, beta_1: {beta}}}}}
targets: {{tt: {{online: "out/*", target: "tout/*", every_steps: {every}}}}}
train: {{batch_size: 16}}
prune:
  variables: ["out/kernel"]
  schedule: {{kind: constant_sparsity, sparsity: {sparsity}}}
"""
PLAIN = {"units": "1", "lr": "0.05", "beta": "0.9", "every": "5", "sparsity": "0.5"}


def load(**values: str) -> LoadedSpec:
    return load_spec_text(SPEC.format(**{**PLAIN, **values}), "q.yaml", Path("/specs/q.yaml"))


@pytest.mark.parametrize(("key", "written", "expected"), [
    ("units", "'1'", "q.yaml:6:45: error: units: expected a number, received '1' (a quoted string: write 1) "
                     "(in layer 'out')"),
    ("lr", "'0.05'", "q.yaml:9:65: error: learning_rate: expected a number, received '0.05' (a quoted string: "
                     "write 0.05)"),
    ("beta", '"0.9"', "q.yaml:9:79: error: beta_1: expected a number, received '0.9' (a quoted string: write 0.9)"),
    ("every", "'5'", "q.yaml:10:64: error: every_steps: expected a number, received '5' (a quoted string: write 5)"),
    ("sparsity", "'0.5'", "q.yaml:14:49: error: sparsity: expected a number, received '0.5' (a quoted string: "
                          "write 0.5)"),
    ("sparsity", "!!str 0.5", "q.yaml:14:49: error: sparsity: expected a number, received '0.5' (a quoted string: "
                              "write 0.5)"),
])
def test_quoted_numbers_are_refused_where_numbers_are_expected(key: str, written: str, expected: str) -> None:
    with pytest.raises(SpecError) as caught:
        load(**{key: written})
    assert str(caught.value) == expected


def test_plain_numbers_ints_for_floats_and_yaml12_exponents_read_as_before() -> None:
    spec = load(lr="1e-3", sparsity="0")  # `1e-3` is text to PyYAML, a number to YAML 1.2 and specgen
    assert load(lr="2").spec.optimizers["o"].learning_rate == 2.0
    optimizer = spec.spec.optimizers["o"]
    assert (optimizer.learning_rate, optimizer.beta_1) == (0.001, 0.9)
    assert spec.spec.prune is not None and spec.spec.prune.schedule.sparsity == 0.0
    assert spec.spec.targets["tt"].every_steps == 5


def test_overrides_are_text_on_the_command_line_and_still_read_as_numbers(tmp_path: Path) -> None:
    path = tmp_path / "q.yaml"
    path.write_text(SPEC.format(**PLAIN))
    spec = load_with_overrides(path, ["optimizers.o.learning_rate=0.1", "prune.schedule.sparsity=0.25",
                                      "layers.0.units=3",
                                      "prune.schedule.kind=constant_sparsity"]).spec
    assert spec.optimizers["o"].learning_rate == 0.1 and spec.prune is not None
    assert spec.prune.schedule.sparsity == 0.25 and spec.layers[0].units == 3
    with pytest.raises(SpecError) as caught:  # quoted inside the value: the user asked for text
        load_with_overrides(path, ["prune.schedule.sparsity='0.25'"])
    assert "sparsity: expected a number, received '0.25' (a quoted string: write 0.25)" in str(caught.value)


@pytest.mark.parametrize(("key", "written", "expected"), [
    ("units", "1.0", "q.yaml:6:45: error: units: expected an integer, received 1.0 (a float: write 1) "
                     "(in layer 'out')"),
    ("every", "5.0", "q.yaml:10:64: error: every_steps: expected an integer, received 5.0 (a float: write 5)"),
    ("every", "1.0e+20", "q.yaml:10:64: error: every_steps: expected an integer, received 1.0e+20 (a float)"),
    ("units", "1.5", "q.yaml:6:45: error: units: expected an integer, received 1.5 (float) (in layer 'out')"),
])
def test_floats_are_refused_where_integers_are_expected_even_whole_ones(key: str, written: str,
                                                                        expected: str) -> None:
    """Lax pydantic would read `units: 1.0` as 1; the JSON Schema says integer, and so does specgen."""
    with pytest.raises(SpecError) as caught:
        load(**{key: written})
    assert str(caught.value) == expected


def test_opset_and_format_version_refuse_whole_floats(tmp_path: Path) -> None:
    """`Literal[18, ..., 23]` alone compares values, so `opset: 21.0` passed as 21."""
    text = SPEC.format(**PLAIN) + "export: {onnx: {opset: 21.0}}\n"
    with pytest.raises(SpecError) as caught:
        load_spec_text(text, "q.yaml", Path("/specs/q.yaml"))
    assert str(caught.value) == "q.yaml:15:24: error: opset: expected an integer, received 21.0 (a float: write 21)"
    with pytest.raises(SpecError) as caught:
        load_spec_text(text.replace("specgen: 1\n", "specgen: 1.0\n").replace("opset: 21.0", "opset: 21"),
                       "q.yaml", Path("/specs/q.yaml"))
    assert str(caught.value).startswith("q.yaml:1:10: error: unsupported spec format version 1.0")
