"""`specgen validate --resolved` runs every check plain `validate` runs (red-team rt6, finding F3): the graph
(build_ir), the sections read together (optimizers without a loss) and the data sizes the spec declares, and exits
1 with the same error lines. The merged tree is still printed above them (what the errors are about); a field error
leaves none. `specgen explain` checks the fields only: it is a provenance tool (docs/cli.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import run_cli as run

BASE = """\
specgen: 1
abstract: true
inputs: {x: {shape: [4]}}
outputs: {y: out}
layers:
  - {name: h1, op: dense, units: 8}
  - {name: out, op: dense, units: 2}
"""
SIZES = """\
specgen: 1
name: sized
inputs: {image: {shape: [h, w, 1]}}
outputs: {logits: out}
layers:
  - {name: c, op: conv2d, input: image, filters: 2, kernel: 5, dilation: 2}
  - {name: gp, op: global_avg_pool}
  - {name: out, op: dense, units: 2}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers: {all: {variables: trainable, kind: sgd, learning_rate: 0.05}}
train: {batch_size: 4, seed: 0}
data:
  train: {images: a, image_size: [4, 4]}
"""
SPECS = {
    "base.yaml": BASE,
    "nope.yaml": "extends: base.yaml\nname: z\noutputs: {y: nope}\n",
    "no_loss.yaml": "extends: base.yaml\nname: z\noptimizers: {a: {kind: adam, learning_rate: 0.01}}\n",
    "fields.yaml": "extends: base.yaml\nname: z\nlayers:\n  - {name: h1, units: 0}\n",
    "good.yaml": "extends: base.yaml\nname: good\n",
    "sized.yaml": SIZES,
}
HEADER = "# {}, resolved: each value's origin is the comment after it"


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    for name, text in SPECS.items():
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize("spec, errors", [
    ("nope.yaml", ["nope.yaml:3:14: error: output 'y' names layer 'nope', which does not exist"]),
    ("no_loss.yaml", ["no_loss.yaml:3:1: error: optimizers need a 'loss' section to minimize"]),
    ("sized.yaml", ["sized.yaml:13:34: error: data.train (a): 'image' is 4 along 'h', expected at least 9: layer 'c' "
                    "(conv2d) needs at least 9 (image_size [4, 4] feeds [4, 4, 1]); the model cannot run these: set a "
                    "larger image_size"]),
])
def test_resolved_refuses_what_validate_refuses_with_the_same_lines(folder: Path, capsys, spec: str,
                                                                    errors: list[str]) -> None:
    plain = run(["validate", spec], capsys, folder)
    code, out, err = run(["validate", spec, "--resolved"], capsys, folder)
    assert plain[0] == code == 1
    assert err == plain[2] == "\n".join([*errors, "1 error found"]) + "\n"
    assert out.splitlines()[0] == HEADER.format(spec) and "ok:" not in out  # the tree the errors are about


def test_a_field_error_prints_no_tree(folder: Path, capsys) -> None:
    code, out, err = run(["validate", "fields.yaml", "--resolved"], capsys, folder)
    assert (code, out) == (1, "")
    assert err.splitlines()[-1] == "1 error found" and "units" in err


def test_a_valid_spec_prints_its_tree_alone_and_exits_0(folder: Path, capsys) -> None:
    code, out, err = run(["validate", "good.yaml", "--resolved"], capsys, folder)
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == HEADER.format("good.yaml") and "ok:" not in out
    assert "  - name: h1  # base.yaml:6:12" in out.splitlines()


def test_several_specs_each_tree_separated_and_every_problem_reported(folder: Path, capsys) -> None:
    code, out, err = run(["validate", "fields.yaml", "good.yaml", "nope.yaml", "--resolved"], capsys, folder)
    assert code == 1
    assert [line for line in out.splitlines() if line.startswith(("#", "---"))] == [
        HEADER.format("good.yaml"), "---", HEADER.format("nope.yaml")]
    assert err.splitlines()[-1] == "2 errors found"
    assert "nope.yaml:3:14: error: output 'y' names layer 'nope', which does not exist" in err.splitlines()


def test_strict_makes_lint_warnings_errors_with_resolved_too(folder: Path, capsys) -> None:
    (folder / "small.yaml").write_text("extends: base.yaml\nname: small\nlayers:\n"
                                       "  - {name: h1, kernel_init: {kind: random_normal, stddev: 0.01}}\n")
    plain = run(["validate", "small.yaml", "--strict"], capsys, folder)
    code, out, err = run(["validate", "small.yaml", "--strict", "--resolved"], capsys, folder)
    assert plain[0] == code == 1 and err == plain[2]
    assert err.startswith("small.yaml:4:29: error: layer 'h1' (dense): at initialization the activation std shrinks")
    assert err.endswith("\n1 error found\n") and out.startswith(HEADER.format("small.yaml"))
    code, out, err = run(["validate", "small.yaml", "--resolved"], capsys, folder)  # a warning: the exit stays 0
    assert code == 0 and err.endswith("1 warning (--strict makes them errors)\n")


def test_explain_checks_the_fields_only(folder: Path, capsys) -> None:
    """explain prints where a value came from, also in a spec whose graph is wrong (a provenance tool)."""
    code, out, err = run(["explain", "nope.yaml", "outputs.y"], capsys, folder)
    assert (code, err) == (0, "")
    assert out.splitlines() == ["outputs.y = nope", "  1. base.yaml:4:14  out", "  2. nope.yaml:3:14  nope  <- wins"]
