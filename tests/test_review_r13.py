"""rt13 compose F4, F5, F6 and its two minor notes:

- F4: a `--set` that changes a layer's `op` (an optimizer's `kind`, a schedule's `schedule`) is reported as a variant
  file's change is: where the now-foreign key was written and the `--set KEY=null` that drops it (was: "unknown key");
- F5: a variable of an ambiguous rename existed in OLD: starting it from its initializer breaks `checkpoint` as an
  unambiguous rename does (was: `new`, exit 0), and `--map` no longer says "no map entries needed";
- F6: diff's checkpoint section ends with a `resume:` line, by the rule `specgen train --resume` applies, never a break;
- explain names the layer an implicit `input` reads; an `extends` list naming a base after a file built on it says so.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_cli as run
from test_compose_r12 import BASE as R12_BASE

ROOT = Path(__file__).resolve().parents[1]

PLAIN = """\
specgen: 1
name: m
inputs:
  x: {shape: [6], dtype: float32}
outputs:
  logits: out
layers:
  - {name: h2, op: dense, input: x, units: 12, activation: relu}
  - {name: out, op: dense, units: 2}
"""

TRAINED = """\
specgen: 1
abstract: true
inputs:
  x: {shape: [6], dtype: float32}
outputs:
  logits: out
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers:
  all: {variables: "*", kind: adam, learning_rate: 0.01}
train: {batch_size: 32, epochs: 1, seed: 0}
data:
  train: {npz: d.npz, features: {x: x_train}, labels: {label: y_train}}
  eval: {npz: d.npz, features: {x: x_test}, labels: {label: y_test}}
checkpoint: {dir: amrun, every_steps: 100, keep: 2}
"""
OLD = """\
extends: base.yaml
name: am
layers:
  - {name: a, op: dense, input: x, units: 4}
  - {name: b, op: dense, input: x, units: 4}
  - {name: c, op: add, inputs: [a, b]}
  - {name: out, op: dense, units: 2}
"""
BOTH = OLD.replace("name: a,", "name: p,").replace("name: b,", "name: q,").replace("[a, b]", "[p, q]")
HAND_MAP = ("extends: both.yaml\ncheckpoint:\n  dir: amrun2\n  restore:\n    - from: amrun\n      map: [{from: a/kernel, "
            "to: p/kernel}, {from: a/bias, to: p/bias}, {from: b/kernel, to: q/kernel}, {from: b/bias, to: q/bias}]\n")
SGD = "extends: old.yaml\noptimizers:\n  all: {kind: sgd}\n"
RATE = "extends: old.yaml\noptimizers:\n  all: {learning_rate: 0.02}\n"


def write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def lines(result: tuple[int, str, str]) -> tuple[int, list[str]]:
    return result[0], result[2].splitlines()


# --- F4: --set changes a tag --------------------------------------------------------------------------------------


def test_a_set_that_changes_an_op_names_the_keys_place_and_the_set_that_drops_it(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"base.yaml": PLAIN, "e.yaml": "extends: base.yaml\n"})
    fix = " (layer_norm takes 'epsilon', 'input', 'name', 'op' or 'share') (in layer 'h2')"
    assert lines(run(["validate", "base.yaml", "--set", "layers[h2].op=layer_norm", "--set", "layers[h2].units=null"],
                     capsys, tmp_path)) == (1, [
        "--set layers[h2].op=layer_norm: error: op: layer_norm takes no 'activation', which base.yaml:8:60 gives for "
        "op dense; remove it with `--set 'layers[h2].activation=null'`, or keep op dense" + fix,
        "1 error found"])
    assert lines(run(["validate", "e.yaml", "--set", "layers.0.op=layer_norm"], capsys, tmp_path)) == (1, [
        "--set layers.0.op=layer_norm: error: op: layer_norm takes no 'activation', which base.yaml:8:60 gives for op "
        "dense; remove it with `--set layers.0.activation=null`, or keep op dense" + fix,
        "--set layers.0.op=layer_norm: error: op: layer_norm takes no 'units', which base.yaml:8:44 gives for op dense; "
        "remove it with `--set layers.0.units=null`, or keep op dense" + fix,
        "2 errors found"])
    assert run(["validate", "e.yaml", "--set", "layers[h2].op=layer_norm", "--set", "layers[h2].units=null",
                "--set", "layers[h2].activation=null"], capsys, tmp_path)[0] == 0  # the fix it names works


def test_a_set_that_changes_a_kind_or_a_schedule_is_the_same_change(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"base.yaml": R12_BASE})
    assert lines(run(["validate", "base.yaml", "--set", "optimizers.a.kind=adam"], capsys, tmp_path)) == (1, [
        "--set optimizers.a.kind=adam: error: kind: adam takes no 'momentum', which base.yaml:16:122 gives for kind "
        "sgd; remove it with `--set optimizers.a.momentum=null`, or keep kind sgd (adam takes 'beta_1', 'beta_2', "
        "'clip', 'epsilon', 'kind', 'learning_rate', 'variables' or 'weight_decay')",
        "1 error found"])
    assert lines(run(["validate", "base.yaml", "--set", "optimizers.a.learning_rate.schedule=cosine_decay"], capsys,
                     tmp_path)) == (1, [
        "--set optimizers.a.learning_rate.schedule=cosine_decay: error: schedule: cosine_decay takes no 'decay_rate', "
        "which base.yaml:16:106 gives for schedule exponential_decay; remove it with "
        "`--set optimizers.a.learning_rate.decay_rate=null`, or keep schedule exponential_decay (cosine_decay takes "
        "'alpha', 'decay_steps', 'initial', 'schedule' or 'warmup_steps')",
        "1 error found"])


def test_another_problem_at_a_key_under_a_set_tag_names_its_place_and_the_change(tmp_path: Path, capsys) -> None:
    conv = PLAIN.replace("[6]", "[6, 6, 1]").replace(
        "{name: h2, op: dense, input: x, units: 12, activation: relu}",
        "{name: c, op: conv2d, input: x, filters: 2, kernel: [3, 3]}\n  - {name: f, op: flatten}")
    write(tmp_path, {"conv.yaml": conv})
    assert lines(run(["validate", "conv.yaml", "--set", "layers[c].op=conv1d"], capsys, tmp_path)) == (1, [
        "--set layers[c].op=conv1d: error: kernel: expected an integer, received [3, 3] (a list) (conv.yaml:8:57 "
        "writes it for op conv2d; this --set changes op to conv1d) (in layer 'c')",
        "1 error found"])


def test_the_line_docs_spec_md_shows_for_a_set_is_real(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"base.yaml": R12_BASE})
    shown = ("--set layers[h1].op=layer_norm: error: op: layer_norm takes no 'units', which base.yaml:8:44 gives for op "
             "dense; remove it with `--set 'layers[h1].units=null'`, or keep op dense (layer_norm takes 'epsilon', "
             "'input', 'name', 'op' or 'share') (in layer 'h1')")
    assert shown in (ROOT / "docs" / "spec.md").read_text().splitlines()
    assert shown in run(["validate", "base.yaml", "--set", "layers[h1].op=layer_norm"], capsys, tmp_path)[2].splitlines()


# --- F5: ambiguous renames lose OLD's weights ---------------------------------------------------------------------


def ambiguous_break(path: str) -> str:
    var = path.split("/")[1]
    return (f"'{path}' existed in OLD under another name ('a' or 'b': ambiguous) and would start from its initializer; "
            f"`specgen diff --map` does not guess which: write the map by hand (`{{from: a/{var}, to: {path}}}` or "
            f"`{{from: b/{var}, to: {path}}}`)")


def test_variables_of_an_ambiguous_rename_break_checkpoint(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"base.yaml": TRAINED, "old.yaml": OLD, "both.yaml": BOTH})
    code, out, err = run(["diff", "old.yaml", "both.yaml", "--map", "--fail-on", "checkpoint"], capsys, tmp_path)
    assert (code, err.splitlines()) == (1, [f"specgen diff: breaks checkpoint: {ambiguous_break(p)}"
                                            for p in ("p/bias", "p/kernel", "q/bias", "q/kernel")])
    assert "  initialized  p/kernel          from OLD's 'a' or 'b' (ambiguous): needs a map entry" in out.splitlines()
    assert out.splitlines()[-1] == (
        "# no map entries printed: ambiguous renames are not mapped (none is guessed); p/bias, p/kernel, q/bias, "
        "q/kernel still start from their initializer, though OLD had them: the checkpoint section's breaks say what "
        "each needs")
    write(tmp_path, {"mapped.yaml": HAND_MAP})  # the map written by hand, as the break says
    assert run(["diff", "old.yaml", "mapped.yaml", "--fail-on", "checkpoint"], capsys, tmp_path)[0] == 0


# --- F6: the resume line ------------------------------------------------------------------------------------------

REFUSED = ("  resume: refused: `specgen train NEW` cannot --resume a run of OLD (optimizer 'all' adam -> sgd; OLD's "
           "checkpoints hold 'optimizers/all/m/a/bias', which NEW does not save; 11 more)")
ACCEPTED = "  resume: accepted: `specgen train NEW` can --resume a run of OLD (the same saved state)"


def test_the_checkpoint_section_ends_with_the_resume_verdict_which_breaks_nothing(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"base.yaml": TRAINED, "old.yaml": OLD, "sgd.yaml": SGD, "rate.yaml": RATE})
    code, out, err = run(["diff", "old.yaml", "sgd.yaml", "--fail-on", "interface,checkpoint"], capsys, tmp_path)
    checkpoint = next(block for block in out.split("\n\n") if block.startswith("checkpoint:"))
    assert (code, err, checkpoint.splitlines()[-1]) == (0, "", REFUSED)
    assert ACCEPTED in run(["diff", "old.yaml", "rate.yaml"], capsys, tmp_path)[1].splitlines()
    assert "resume:" not in run(["diff", "old.yaml", "old.yaml"], capsys, tmp_path)[1]  # itself: still empty
    document = json.loads(run(["diff", "old.yaml", "sgd.yaml", "--format", "json"], capsys, tmp_path)[1])
    assert (document["resume"]["accepted"], len(document["resume"]["reasons"]), document["resume"]["reasons"][0]) == (
        False, 13, "optimizer 'all' adam -> sgd")


def test_diff_with_its_resume_line_imports_no_tensorflow(tmp_path: Path) -> None:
    write(tmp_path, {"base.yaml": TRAINED, "old.yaml": OLD, "sgd.yaml": SGD})
    code = ("import sys\nfrom specgen.cli import main\nstatus = main(['diff', 'old.yaml', 'sgd.yaml'])\n"
            "print(status, 'tensorflow' in sys.modules, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert (REFUSED in done.stdout.splitlines(), done.stderr.splitlines()[-1]) == (True, "0 False")


@pytest.mark.slow
def test_the_verdicts_match_real_train_resume_and_restore_plan(tmp_path: Path, capsys) -> None:
    """What the checker ran: OLD trained, then `train VARIANT --resume` and `restore-plan` on the real run."""
    pytest.importorskip("tensorflow")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 6)).astype("float32")
    np.savez(tmp_path / "d.npz", x_train=x, y_train=(x[:, 0] > 0).astype("int64"), x_test=x[:32],
             y_test=(x[:32, 0] > 0).astype("int64"))
    write(tmp_path, {"base.yaml": TRAINED, "old.yaml": OLD, "sgd.yaml": SGD, "rate.yaml": RATE, "both.yaml": BOTH,
                     "both_r.yaml": "extends: both.yaml\ncheckpoint:\n  dir: amrun2\n  restore: [{from: amrun}]\n",
                     "mapped.yaml": HAND_MAP})
    assert run(["train", "old.yaml", "--quiet"], capsys, tmp_path)[0] == 0
    code, _, err = run(["train", "sgd.yaml", "--resume", "--steps", "1", "--quiet"], capsys, tmp_path)
    assert (code, "optimizer 'all' is sgd in this spec but was adam" in err, "(12 more differences)" in err) == (
        1, True, True)  # 13 reasons, as the diff's line counts them
    assert run(["train", "rate.yaml", "--resume", "--steps", "1", "--quiet"], capsys, tmp_path)[0] == 0
    _, out, _ = run(["restore-plan", "both_r.yaml"], capsys, tmp_path)
    assert "restored 2, initialized 4" in out  # what the diff's 4 breaks say is lost
    _, out, _ = run(["restore-plan", "mapped.yaml"], capsys, tmp_path)
    assert "restored 6, initialized 0" in out


# --- minor notes --------------------------------------------------------------------------------------------------


def test_explain_names_the_layer_an_implicit_input_reads(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"m.yaml": PLAIN.replace("input: x, ", "")})
    assert run(["explain", "m.yaml", "layers[out].input"], capsys, tmp_path)[1].splitlines() == [
        "layers[out].input = h2 (the layer before it)", "  1. default  null: h2 (the layer before it)  <- wins"]
    assert run(["explain", "m.yaml", "layers[h2].input"], capsys, tmp_path)[1].splitlines() == [
        "layers[h2].input = x (the model's input: the first layer reads it)",
        "  1. default  null: x (the model's input: the first layer reads it)  <- wins"]


def test_a_base_listed_after_a_file_built_on_it_is_named(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"base.yaml": PLAIN, "mid.yaml": "extends: base.yaml\nlayers: [{name: h2, units: 8}]\n",
                     "c.yaml": "extends: mid.yaml\nlayers: [{name: h2, units: 9}]\n",
                     "a.yaml": "extends: [c.yaml, mid.yaml]\n", "ok.yaml": "extends: [mid.yaml, c.yaml]\n"})
    assert lines(run(["validate", "a.yaml"], capsys, tmp_path)) == (1, [
        "a.yaml:1:10: error: extends: 'mid.yaml' is a base of 'c.yaml' and must come first (the files listed apply in "
        "order, each after its own bases); list 'mid.yaml' before 'c.yaml', or leave it out: 'c.yaml' brings it in",
        "1 error found"])
    assert run(["validate", "ok.yaml"], capsys, tmp_path)[0] == 0
