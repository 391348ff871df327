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
