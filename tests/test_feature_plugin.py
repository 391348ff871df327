"""Adding a training feature touches its module and its template partial, nothing else (issue 31, item 1).

A copy of specgen/ and templates/ gets two new files, `kinds/features/update_count.py` and its partial, and no
other change; then the real command line, run on the copy, shows the feature everywhere a feature shows: its
`train.count_updates` key in the JSON schema and in `validate --resolved` (after the key it names), a bad value
refused at its position, its row in the compatibility table, its code in the generated train.py, its variable
in the collections and in every checkpoint, counting the updates the run made. The original tree is
untouched: the copy runs from its own folder (`-m specgen` with the copy first on sys.path).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"

MODULE = '''\
"""`train.count_updates: true`: a checkpointed count of the optimizer updates (a test's feature)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field

from specgen.kinds.features.base import FeatureDef, StateRow, TrainKey

ROOT = "updates"
KEY = f"{ROOT}/count"
TRAIN_KEY = TrainKey("count_updates", bool, Field(False, description="Count the optimizer updates."),
                     after="seed", ir_type=bool, ir_default=lambda: False)


def variables(training: Any, trainable: list[str], shapes: dict[str, tuple[int, ...]]) -> list[StateRow]:
    if training.train is None or not training.train.count_updates:
        return []
    return [(KEY, (), "int64", ("optimizer",))]


@dataclass(frozen=True)
class CountPlan:
    key: str


FEATURE = FeatureDef(
    name="update_count",
    doc="a checkpointed count of the optimizer updates",
    spec_keys=("train.count_updates",),
    enabled=lambda ir: ir.training.train.count_updates,
    train_key=TRAIN_KEY,
    table=(("update_count", "`train.count_updates: true`"),),
    partial="tf/features/update_count.py.j2",
    hooks=("init", "after_update", "state"),
    after=("ema",),
    plan=lambda ir: CountPlan(KEY),
    variables=variables,
    roots=(ROOT,),
)
'''
PARTIAL = '''\
{#- train.count_updates (kinds/features/update_count.py). #}
{% macro init(f, joined) %}
        self.update_count = tf.Variable(0, dtype=tf.int64, trainable=False, name={{ f.key | py }})
{% endmacro %}
{% macro after_update(f, joined) %}
        self.update_count.assign_add(1)
{% endmacro %}
{% macro state(f, joined) %}
        state[{{ f.key | py }}] = self.update_count
{% endmacro %}
'''
SPEC = f"""\
specgen: 1
name: counted
inputs: {{image: {{shape: [8, 8, 1]}}}}
outputs: {{logits: out}}
layers:
  - {{name: flat, op: flatten}}
  - {{name: out, op: dense, units: 10}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers:
  all: {{kind: sgd, learning_rate: 0.05}}
train:
  batch_size: 16
  count_updates: true
data:
  train: {{npz: {DIGITS}, features: {{image: x_train}}, labels: {{label: y_train}}}}
checkpoint: {{dir: run, every_steps: 5, keep: 2}}
"""


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """specgen/ and templates/ copied, plus the feature's two files: nothing else differs."""
    root = tmp_path_factory.mktemp("plugin")
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "specgen", root / "specgen", ignore=ignore)
    shutil.copytree(ROOT / "templates", root / "templates", ignore=ignore)
    (root / "specgen" / "kinds" / "features" / "update_count.py").write_text(MODULE, encoding="utf-8")
    (root / "templates" / "tf" / "features" / "update_count.py.j2").write_text(PARTIAL, encoding="utf-8")
    (root / "spec.yaml").write_text(SPEC, encoding="utf-8")
    _only_the_two_files_differ(root)
    return root


def _only_the_two_files_differ(tree: Path) -> None:
    """The copy is the checkout plus the feature's module and partial: nothing else is edited for it."""
    def listing(folder: Path) -> set[str]:
        return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts}

    added = {f"specgen/{p}" for p in listing(tree / "specgen") - listing(ROOT / "specgen")}
    added |= {f"templates/{p}" for p in listing(tree / "templates") - listing(ROOT / "templates")}
    assert added == {"specgen/kinds/features/update_count.py", "templates/tf/features/update_count.py.j2"}
    assert all((tree / "specgen" / p).read_bytes() == (ROOT / "specgen" / p).read_bytes()
               for p in listing(ROOT / "specgen"))


def specgen(tree: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(tree)}
    return subprocess.run([sys.executable, "-m", "specgen", *args], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def test_its_key_is_in_the_schema_and_the_resolved_spec(tree: Path) -> None:
    done = specgen(tree, "schema", "-o", "schema.json")
    assert done.returncode == 0, done.stderr
    train = json.loads((tree / "schema.json").read_text(encoding="utf-8"))["$defs"]["Train"]["properties"]
    assert train["count_updates"] == {"default": False, "description": "Count the optimizer updates.",
                                      "title": "Count Updates", "type": "boolean"}
    line = SPEC.splitlines().index("  count_updates: true") + 1
    done = specgen(tree, "validate", "--resolved", "spec.yaml")
    assert done.returncode == 0, done.stderr
    assert f"  count_updates: true  # spec.yaml:{line}:18\n" in done.stdout
    (tree / "plain.yaml").write_text(SPEC.replace("  count_updates: true\n", ""), encoding="utf-8")
    done = specgen(tree, "validate", "--resolved", "plain.yaml")
    assert done.returncode == 0, done.stderr
    # A default is printed in the model's key order: right after the key TrainKey.after names.
    assert "  seed: 0  # default\n  count_updates: false  # default\n  shuffle_buffer:" in done.stdout


def test_a_bad_value_is_refused_at_its_position(tree: Path) -> None:
    (tree / "bad.yaml").write_text(SPEC.replace("count_updates: true", "count_updates: sometimes"), encoding="utf-8")
    done = specgen(tree, "validate", "bad.yaml")
    line = SPEC.splitlines().index("  count_updates: true") + 1
    assert done.returncode == 1
    assert done.stderr == (f"bad.yaml:{line}:18: error: count_updates: expected true or false, received 'sometimes' "
                           "(text: write true or false, unquoted)\n1 error found\n")


def test_it_joins_the_compatibility_table(tree: Path) -> None:
    code = ("from specgen.kinds import compat\nfrom specgen.kinds.features import PIPELINE\n"
            "print(PIPELINE.index('update_count') > PIPELINE.index('ema'), compat.UNIVERSE['update_count'], "
            "compat.allowed('update_count', 'levenberg_marquardt'))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.stdout == "True `train.count_updates: true` True\n", done.stderr


def test_training_checkpoints_its_count_of_updates(tree: Path) -> None:
    done = specgen(tree, "build", "spec.yaml", "--out", "gen")
    assert done.returncode == 0, done.stderr
    code = (tree / "gen" / "counted" / "train.py").read_text(encoding="utf-8")
    assert code.count("self.update_count.assign_add(1)") == 1 and '"updates/count"' in code
    done = specgen(tree, "train", "spec.yaml", "--steps", "7", "--quiet", timeout=600)
    assert done.returncode == 0, done.stderr
    import tensorflow as tf

    for step in (5, 7):
        reader = tf.train.load_checkpoint(str(tree / "run" / f"ckpt-{step:08d}" / "variables"))
        assert reader.get_tensor("updates/count") == np.int64(step) == reader.get_tensor("global_step")
