"""`specgen diff`'s checkpoint section applies NEW's `checkpoint.restore` as `specgen restore-plan` does: each
entry's map, exclude and strict, later entries overriding earlier ones, conflicts; and breaks where the plan would
refuse. Checked against restore-plan on a real checkpoint of OLD's model variables (written here, no training)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_cli as run

from specgen.ir.resolve import build_ir
from specgen.spec.load import load_spec

BASE = """\
specgen: 1
name: tiny
inputs: {x: {shape: [4], dtype: float32}}
outputs: {logits: out}
layers:
  - {name: h1, op: dense, input: x, units: 8, activation: relu}
  - {name: h2, op: dense, units: 8, activation: relu}
  - {name: out, op: dense, units: 2}
checkpoint: {dir: runs/tiny}
"""
H3 = "extends: base.yaml\nlayers:\n  - {name: h3, op: dense, units: 8, activation: relu, after: h2}\n"


def restoring(entries: str, base: str = "base.yaml") -> str:
    return f"extends: {base}\ncheckpoint:\n  dir: runs/new\n  restore: {entries}\n"


# (OLD, NEW, the checkpoint NEW's restore reads, the plan's counts, restore-plan's exit status): the report's cases
CASES = {
    "conflict": ("h3.yaml", restoring("[{from: runs/old, map: [{from: h3/bias, to: h2/bias}]}]"), "runs/old",
                 "restored 5, initialized 0, unused 1, mismatched 0, conflicts 1", 1),
    "strict": ("base.yaml", restoring("[{from: runs/old, strict: true}]", "h3.yaml"), "runs/old",
               "restored 6, initialized 2, unused 0, mismatched 0, errors 1", 1),
    "exclude": ("base.yaml", restoring("[{from: runs/old, exclude: ['h1/*']}]"), "runs/old",
                "restored 4, initialized 2, unused 2, mismatched 0", 0),
    "two sources": ("base.yaml", restoring("[{from: runs/old}, {from: runs/old, map: [{from: h1/bias, to: h2/bias}]}]"),
                    # unused: h2/bias only (its row is the conflict); the keys the second entry restores again
                    # are restored, not unused (checker round 11, rt11/state finding 3)
                    "runs/old", "restored 5, initialized 0, unused 1, mismatched 0, conflicts 1", 1),
    "pattern onto a wrong shape": ("base.yaml", restoring("[{from: runs/old, map: [{pattern: 'h2/(.*)', to: 'out/\\1'}]}]"),
                                   "runs/old", "restored 2, initialized 2, unused 0, mismatched 0, conflicts 2", 1),
}
PREFIX = "checkpoint: a checkpoint of OLD restored into NEW: "


def write_specs(folder: Path, new: str) -> None:
    for name, text in (("base.yaml", BASE), ("h3.yaml", H3), ("new.yaml", new)):
        (folder / name).write_text(text)


@pytest.mark.parametrize("case", CASES)
def test_the_checkpoint_section_counts_what_restore_plan_counts(tmp_path: Path, capsys, case: str) -> None:
    old, new, source, counts, status = CASES[case]
    write_specs(tmp_path, new)
    code, out, err = run(["diff", old, "new.yaml", "--fail-on", "checkpoint"], capsys, tmp_path)
    summary = next(line for line in out.splitlines() if line.startswith(PREFIX))
    # the same counts; diff labels its `unused` (OLD's weights only, never the training state a real one holds)
    assert (summary.removeprefix(PREFIX), code) == (counts.replace(", unused ", ", unused weights ", 1), status)
    assert len(err.splitlines()) == {"conflict": 1, "strict": 1, "exclude": 0, "two sources": 1,
                                     "pattern onto a wrong shape": 4}[case]  # pattern: 2 conflicts, h2's 2 left
    assert all("`specgen restore-plan` refuses it" in line for line in err.splitlines()[:1 if case != "exclude" else 0])

    # restore-plan on a real checkpoint holding OLD's model variables gives the same counts and the same verdict
    tf = pytest.importorskip("tensorflow")
    from specgen.runtime.checkpoint import CheckpointFolder
    from specgen.runtime.commands.restore import run_restore_plan

    variables = {v.path: tf.Variable(np.zeros(v.shape, v.dtype)) for v in build_ir(load_spec(tmp_path / old)).model_variables}
    CheckpointFolder(tmp_path / source, keep=1).save(1, variables, None, {"spec": "tiny"})
    assert run_restore_plan(tmp_path / "new.yaml", None) == status
    assert capsys.readouterr().out.rstrip().splitlines()[-1] == counts


def test_a_conflict_in_the_map_is_a_row_and_a_break(tmp_path: Path, capsys) -> None:
    write_specs(tmp_path, CASES["conflict"][1])
    code, out, err = run(["diff", "h3.yaml", "new.yaml", "--fail-on", "checkpoint"], capsys, tmp_path)
    assert "  conflict  h2/bias            keys 'h2/bias', 'h3/bias' all map here" in out
    assert err == ("specgen diff: breaks checkpoint: 'h2/bias' is 'conflict' in NEW's restore plan (keys 'h2/bias', "
                   "'h3/bias' all map here): `specgen restore-plan` refuses it and `specgen train` restores nothing\n")
    write_specs(tmp_path, CASES["exclude"][1])  # excluded on purpose: listed with why, no break
    code, out, err = run(["diff", "base.yaml", "new.yaml", "--fail-on", "checkpoint"], capsys, tmp_path)
    assert (code, err) == (0, "")
    assert "  initialized  h1/bias            excluded by 'h1/*' in runs/old" in out
