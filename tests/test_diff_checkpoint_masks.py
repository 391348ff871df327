"""`specgen diff`'s checkpoint section plans over what `specgen restore-plan` plans over (ir/restore_targets.py):
a pruning spec's masks too (red team round 4, diff #1); a target NEW's restore `exclude`s is its own choice, even
where no key maps to it (#2); a layer that stops sharing another's weights loses them (#6); the summary's `unused`
counts OLD's weights only and says so (#11). Specs only, no training: the one TensorFlow check writes a checkpoint
of OLD's restore targets and runs restore-plan on it with the entries diff prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_cli as run

from specgen.ir.resolve import build_ir
from specgen.ir.restore_targets import restore_targets
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
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers: {all: {variables: ["*"], kind: sgd, learning_rate: 0.1}}
train: {batch_size: 4, epochs: 1, seed: 1}
checkpoint: {dir: runs/tiny}
"""
PRUNE = "prune:\n  variables: [{w}]\n  schedule: {{kind: constant_sparsity, sparsity: 0.5, begin_step: 0}}\n"
PRUNED = "extends: base.yaml\n" + PRUNE.format(w="h2/kernel")
RENAMED = "extends: base.yaml\nlayers:\n  - {name: h2, remove: true}\n" \
          "  - {name: hidden2, op: dense, units: 8, activation: relu, after: h1}\n"


def restoring(base: str, entries: str, extra: str = "") -> str:
    return f"extends: {base}\n{extra}checkpoint:\n  dir: runs/new\n  restore: {entries}\n"


KEEP_H2 = "{from: h2/kernel, to: hidden2/kernel}, {from: h2/bias, to: hidden2/bias}"
MASK = "{from: pruning/h2/kernel, to: pruning/hidden2/kernel}"
SPECS = {
    "base.yaml": BASE, "pruned.yaml": PRUNED, "renamed.yaml": RENAMED,
    # NEW renames h2 and keeps pruning it; with the weights' map only, and with the mask's entry too
    "ren_pruned.yaml": restoring("renamed.yaml", "[{from: runs/old}]", PRUNE.format(w="hidden2/kernel")),
    "ren_weights.yaml": restoring("ren_pruned.yaml", f"[{{from: runs/old, map: [{KEEP_H2}]}}]"),
    "ren_masked.yaml": restoring("ren_pruned.yaml", f"[{{from: runs/old, map: [{KEEP_H2}, {MASK}]}}]"),
    "same_pruned.yaml": restoring("pruned.yaml", "[{from: runs/old}]"),
    # NEW renames h2 and excludes the renamed layer: a fresh layer on purpose
    "ren_excluded.yaml": restoring("renamed.yaml", "[{from: runs/old, exclude: ['hidden2/*']}]"),
    # OLD's h2 used h1's weights; NEW's h2 has its own
    "shared.yaml": "extends: base.yaml\nlayers:\n  - {name: h2, op: dense, units: 4, activation: relu, share: h1}\n"
                   "  - {name: h1, units: 4}\n  - {name: out, input: h2}\n",
    "unshared.yaml": "extends: base.yaml\nlayers:\n  - {name: h1, units: 4}\n  - {name: h2, units: 4}\n",
    # ... and h1 renamed too: the map restores hidden1, and h2 still needs its own restore entry
    "ren_unshared.yaml": "extends: unshared.yaml\nlayers:\n  - {name: h1, remove: true}\n"
                         "  - {name: hidden1, op: dense, input: x, units: 4, activation: relu, before: h2}\n",
}
PREFIX = "checkpoint: a checkpoint of OLD restored into NEW: "


@pytest.fixture
def specs(tmp_path: Path) -> Path:
    for name, text in SPECS.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def summary(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(PREFIX)).removeprefix(PREFIX)


def test_masks_are_planned_mapped_and_restored_like_weights(specs: Path, capsys) -> None:
    code, out, err = run(["diff", "pruned.yaml", "ren_pruned.yaml", "--map", "--fail-on", "checkpoint"], capsys, specs)
    assert code == 1 and summary(out) == "restored 4, initialized 3, unused weights 3, mismatched 0"
    assert out.rstrip().endswith("    map:\n    - {from: h2/kernel, to: hidden2/kernel}\n"
                                 "    - {from: h2/bias, to: hidden2/bias}\n    - " + MASK)
    assert "  with the map of `specgen diff --map`: restored 7, initialized 0, unused weights 0, mismatched 0" in out
    assert "\n# checkpoint map: OLD's checkpoints restore into NEW with nothing initialized that OLD had\n" in out
    # the weights' map alone leaves OLD's mask behind: all ones again, OLD's sparsity lost
    code, out, err = run(["diff", "pruned.yaml", "ren_weights.yaml", "--fail-on", "checkpoint"], capsys, specs)
    assert (code, summary(out)) == (1, "restored 6, initialized 1, unused weights 1, mismatched 0")
    assert "  initialized  pruning/hidden2/kernel          from OLD's weights: needs a map entry" in out
    assert err == ("specgen diff: breaks checkpoint: 'pruning/hidden2/kernel' existed in OLD under another name and "
                   "would start from its initializer; `specgen diff --map` prints the checkpoint map that restores it\n")
    # the mask's own entry is what restore-plan accepts: no plan error
    code, out, err = run(["diff", "pruned.yaml", "ren_masked.yaml", "--fail-on", "checkpoint"], capsys, specs)
    assert (code, err, summary(out)) == (0, "", "restored 7, initialized 0, unused weights 0, mismatched 0")
    code, out, err = run(["diff", "pruned.yaml", "same_pruned.yaml", "--fail-on", "checkpoint"], capsys, specs)
    assert (code, summary(out)) == (0, "restored 7, initialized 0, unused weights 0, mismatched 0")


def test_a_renamed_layer_the_restore_excludes_is_initialized_on_purpose(specs: Path, capsys) -> None:
    code, out, err = run(["diff", "base.yaml", "ren_excluded.yaml", "--map", "--fail-on", "checkpoint"], capsys, specs)
    assert (code, err) == (0, "")
    assert summary(out) == "restored 4, initialized 2, unused weights 2, mismatched 0"
    assert "  initialized  hidden2/bias            excluded by 'hidden2/*' in runs/old" in out
    assert "  initialized  hidden2/kernel          excluded by 'hidden2/*' in runs/old" in out
    assert "with the map of" not in out and "hidden2/kernel}" not in out
    assert out.rstrip().endswith("# no map entries needed: OLD's checkpoints restore into NEW by name and NEW's own "
                                 "restore maps")


UNSHARE_ENTRY = "{from: OLD_CHECKPOINT, map: [{from: h1/kernel, to: h2/kernel}, {from: h1/bias, to: h2/bias}]}"


def test_a_layer_that_stops_sharing_loses_the_weights_it_used(specs: Path, capsys) -> None:
    code, out, err = run(["diff", "shared.yaml", "unshared.yaml", "--fail-on", "checkpoint,layers"], capsys, specs)
    assert code == 1 and "  changed  h2.share  h1   -" in out and "null" not in out
    assert "  initialized  h2/kernel       OLD's 'h1/kernel' (shared): needs a restore entry" in out
    assert "specgen diff: breaks layers: layer 'h2': share changed from h1 to -\n" in err
    assert ("specgen diff: breaks checkpoint: layer 'h2' used the weights of 'h1' in OLD (share: h1) and has its own "
            "here: 'h2/kernel', 'h2/bias' would start from their initializer; the restore entry " + UNSHARE_ENTRY +
            " after a by-name entry {from: OLD_CHECKPOINT} keeps them\n") in err
    assert summary(out) == "restored 4, initialized 2, unused weights 0, mismatched 0"
    # --map prints no entry for them (a map entry restores one variable per restore entry), and says so
    still = ("h2/bias, h2/kernel still start from their initializer, though OLD had them: the checkpoint section's "
             "breaks say what each needs")
    code, out, err = run(["diff", "shared.yaml", "unshared.yaml", "--map"], capsys, specs)
    assert out.rstrip().endswith("\n# no map entries needed for renamed weights; " + still)
    code, out, err = run(["diff", "shared.yaml", "ren_unshared.yaml", "--map"], capsys, specs)
    assert "  with the map of `specgen diff --map`: restored 4, initialized 2, unused weights 0, mismatched 0" in out
    assert out.split("\n\n")[-1].splitlines() == [
        "# checkpoint map: the entries for OLD's renamed weights; with it, " + still,
        "checkpoint:", "  restore:", "  - from: OLD_CHECKPOINT", "    map:",
        "    - {from: h1/kernel, to: hidden1/kernel}", "    - {from: h1/bias, to: hidden1/bias}"]
    # NEW that declares that map and the un-share entry: nothing of OLD's is left to an initializer
    entries = (f"[{{from: runs/old, map: [{{from: h1/kernel, to: hidden1/kernel}}, {{from: h1/bias, to: hidden1/bias}}]}}, "
               f"{UNSHARE_ENTRY.replace('OLD_CHECKPOINT', 'runs/old')}]")
    (specs / "ren_kept.yaml").write_text(restoring("ren_unshared.yaml", entries))
    code, out, err = run(["diff", "shared.yaml", "ren_kept.yaml", "--map", "--fail-on", "checkpoint"], capsys, specs)
    assert (code, err) == (0, "") and summary(out).startswith("restored 6, initialized 0, ")
    assert out.rstrip().endswith("\n# no map entries needed: OLD's checkpoints restore into NEW by name and NEW's own "
                                 "restore maps")


def test_diff_of_pruning_specs_imports_no_tensorflow(specs: Path) -> None:
    script = ("import sys\nfrom specgen.cli import main\ncode = main(['diff', 'pruned.yaml', 'ren_weights.yaml'])\n"
              "assert code == 0 and 'tensorflow' not in sys.modules, sorted(m for m in sys.modules if 'tensorflow' in m)")
    done = subprocess.run([sys.executable, "-c", script], cwd=specs, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "pruning/hidden2/kernel" in done.stdout


def test_restore_plan_agrees_on_a_checkpoint_of_old(specs: Path, capsys) -> None:
    """restore-plan on a real checkpoint of OLD's restore targets: the mask entry restores the mask, the entry
    printed for the un-shared layer restores h1's weights into h2, with the counts diff gave."""
    tf = pytest.importorskip("tensorflow")
    from specgen.runtime.checkpoint import CheckpointFolder
    from specgen.runtime.commands.restore import run_restore_plan

    for old, new, counts in (("pruned.yaml", "ren_masked.yaml", "restored 7, initialized 0"),
                             ("shared.yaml", "unshared_kept.yaml", "restored 6, initialized 0")):
        if new == "unshared_kept.yaml":
            entries = f"[{{from: runs/old}}, {UNSHARE_ENTRY.replace('OLD_CHECKPOINT', 'runs/old')}]"
            (specs / new).write_text(restoring("unshared.yaml", entries))
        targets = restore_targets(build_ir(load_spec(specs / old)))
        variables = {k: tf.Variable(np.full(shape, 0.5, dtype)) for k, (shape, dtype) in targets.items()}
        CheckpointFolder(specs / "runs/old", keep=1).save(1, variables, None, {"spec": "tiny"})
        assert run_restore_plan(specs / new, None) == 0
        lines = capsys.readouterr().out.rstrip().splitlines()
        assert lines[-1].startswith(counts + ", unused ")  # the checkpoint holds OLD's restore targets only
        code, out, _ = run(["diff", old, new, "--fail-on", "checkpoint"], capsys, specs)
        assert (code, summary(out)) == (0, lines[-1].replace(", unused ", ", unused weights "))
        if new == "ren_masked.yaml":
            assert any(line.split()[:3] == ["pruning/hidden2/kernel", "restored", "runs/old:pruning/h2/kernel"]
                       for line in lines)
        else:
            assert any(line.split()[:3] == ["h2/kernel", "restored", "runs/old:h1/kernel"] for line in lines)
