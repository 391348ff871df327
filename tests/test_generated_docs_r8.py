"""Generated code says what is true (gencli report F5): docs/generated.md lists every public method the templates
give the generated classes, and train.py's constants, schedules, loss terms and frozen batch norms read the way the
rest of the file does. The checks render specs in memory (no TensorFlow) or read the templates and golden files."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from specgen.render.build import render_all

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "generated"

SPEC = """\
specgen: 1
name: truth
inputs: {{image: {{shape: [8, 8, 1], dtype: float32}}}}
outputs: {{logits: head, probs: probs}}
layers:
  - {{name: conv, op: conv2d, input: image, filters: 4, kernel: 3, padding: valid, activation: relu}}
  - {{name: bn, op: batch_norm}}
  - {{name: flat, op: flatten}}
  - {{name: head, op: dense, units: 10}}
  - {{name: probs, op: softmax}}
frozen: [{frozen}]
loss:
  - {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
  - {{kind: l2, variables: ["head/kernel"], weight: 0.0001}}
optimizers: {{only: {{kind: adagrad, learning_rate: {{schedule: constant, initial: 0.05, warmup_steps: {warmup}}}}}}}
train: {{batch_size: 16, epochs: 1, ema: {{decay: 0.9, eval: false}}, metrics: [accuracy]}}
"""


def _files(tmp_path: Path, frozen: str = '"conv/*", "bn/*"', warmup: int = 5) -> dict[str, str]:
    path = tmp_path / "truth.yaml"
    path.write_text(SPEC.format(frozen=frozen, warmup=warmup))
    (output,) = render_all([path], False)
    return {name: data.decode() for name, data in output.files.items() if name.endswith(".py")}


def _methods(text: str) -> set[str]:
    """The public methods the template text defines at class level."""
    return set(re.findall(r"^    def ([a-z][a-z0-9_]*)\(", text, flags=re.MULTILINE))


def _documented() -> set[str]:
    """Methods docs/generated.md names in a table's first cell or a heading (`name(...)`)."""
    names: set[str] = set()
    for line in (ROOT / "docs" / "generated.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("| "):
            names |= set(re.findall(r"`([a-z_]+)\(", line.split("|")[1]))
        elif line.startswith("#"):
            names |= set(re.findall(r"`([a-z_]+)\(", line))
    return names


def test_every_public_method_of_the_templates_is_documented() -> None:
    templates = sorted((ROOT / "templates" / "tf").rglob("*.j2"))
    methods = set().union(*(_methods(t.read_text(encoding="utf-8")) for t in templates))
    assert {"loss_terms", "train_steps", "target_pairs"} <= methods  # the scan sees the feature partials
    assert sorted(methods - _documented()) == []


def test_every_public_method_of_the_golden_classes_is_documented() -> None:
    found = set()
    for path in sorted(GOLDEN.glob("*/*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                found |= {f.name for f in node.body if isinstance(f, ast.FunctionDef) and not f.name.startswith("_")}
    assert "loss_terms" in found
    assert sorted(found - _documented()) == []


def test_constants_and_calls_read_as_the_rest_of_train_py(tmp_path: Path) -> None:
    train = _files(tmp_path)["train.py"]
    lines = train.splitlines()
    # the comment says what the value means, so it is true for False as well
    assert "EMA_EVAL = False  # train.ema.eval: whether `specgen train` evaluates with the EMA shadows swapped in" \
        in lines
    # the data term reads the module's constants, as update_metrics does
    assert ('            "logits": losses.sparse_softmax_cross_entropy(labels[LABEL], outputs[OUTPUT]),' in lines)
    assert 'labels["label"]' not in train and 'outputs["logits"]' not in train
    # every schedule by keyword
    assert ("        self.opt_only_schedule = schedules.warmup(schedules.constant(initial=0.05), warmup_steps=5)"
            in lines)
    # the EMA comprehension zips strictly, as every other zip of the file
    assert re.findall(r"zip\([^\n]*\)", train) and all("strict=True" in z for z in re.findall(r"zip\([^\n]*", train))


@pytest.mark.parametrize(("warmup", "first"), [(5, "0.0"), (0, "0.05")])
def test_a_scheduled_rate_starts_at_the_schedules_value_at_step_0(tmp_path: Path, warmup: int, first: str) -> None:
    train = _files(tmp_path, warmup=warmup)["train.py"]
    assert f'            {first}, trainable=False, name="optimizers/only/learning_rate"' in train.splitlines()


def test_a_frozen_batch_norm_renders_no_dead_training_arguments(tmp_path: Path) -> None:
    frozen = _files(tmp_path)["model.py"].splitlines()
    assert "            training=False, axes=[0, 1, 2], epsilon=0.001," in frozen
    (tmp_path / "trained").mkdir()
    trained = _files(tmp_path / "trained", frozen='"conv/*"')["model.py"].splitlines()
    assert "            training=training, axes=[0, 1, 2], momentum=0.99, epsilon=0.001," in trained
