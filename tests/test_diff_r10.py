"""`specgen diff` against what really happens (rt10 findings F1-F3):

- F1: the checkpoint section plans over every key a checkpoint of OLD holds (ir/restore_targets.saved_keys: EMA
  shadows, optimizer slots, masks, the step), so a map that reads OLD's EMA shadows restores where `specgen
  restore-plan` restores, and a conflict is reported with restore-plan's own reason;
- F2: `--map`'s header says that mismatched variables are refused (no run starts), not left to an initializer;
- F3: a spec diffed with itself is empty unless its own restore is refused: a checkpoint row that OLD's own restore
  plan has alike (left to an initializer, unused, a `missing` key OLD's checkpoints never held) is the spec's choice,
  not a change; a conflict, a mismatch or a plan error it has alike stays a break, marked "(as in OLD's own plan)"
  (rt10 finding 3: `--fail-on checkpoint` passed a restore that restore-plan refuses).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_helpers import run_cli as run

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"
PREFIX = "checkpoint: a checkpoint of OLD restored into NEW: "

OLD = """\
specgen: 1
name: cnn
inputs: {image: {shape: [8, 8, 1]}}
outputs: {logits: head/out}
layers:
  - {name: conv1, op: conv2d, filters: 4, kernel: 3, padding: same}
  - {name: bn1, op: batch_norm}
  - {name: flat, op: flatten}
  - {name: head/fc, op: dense, units: 8, activation: relu}
  - {name: head/out, op: dense, units: 10}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers: {all: {kind: adam, learning_rate: 0.001}}
train: {batch_size: 32, epochs: 1, seed: 0, ema: {decay: 0.99}}
data:
  train: {npz: DIGITS, features: {image: x_train}, labels: {label: y_train}}
checkpoint: {dir: run_old}
""".replace("DIGITS", str(DIGITS))
NO_EMA = OLD.replace(", ema: {decay: 0.99}", "")
RENAMED = NO_EMA.replace("head/fc", "head/hidden")


def restoring(spec: str, entry: str) -> str:
    """`spec` restoring from OLD's run folder by one entry (flow style)."""
    return spec.replace("checkpoint: {dir: run_old}", f"checkpoint:\n  dir: run_new\n  restore:\n  - {entry}\n")


def mapping(*pairs: str, extra: str = "") -> str:
    """A restore entry reading run_old with map entries `from>to` (a pattern where `from` starts with ^)."""
    rows = [f"{{pattern: '{a}', to: '{b}'}}" if a.startswith("^") else f"{{from: {a}, to: {b}}}"
            for a, b in (p.split(">") for p in pairs)]
    return f"{{from: run_old, {extra}map: [{', '.join(rows)}]}}"


# NEW spec text -> restore-plan's verdict on a real checkpoint of OLD; diff must say the same
NEWS = {
    "ema shadows into a renamed layer": restoring(RENAMED, mapping("ema/head/fc/kernel>head/hidden/kernel",
                                                                   "ema/head/fc/bias>head/hidden/bias")),
    "an ema shadow and its raw key into one variable": restoring(NO_EMA, mapping("ema/head/fc/kernel>head/fc/kernel")),
    "every shadow by a pattern, raw keys too": restoring(NO_EMA, mapping("^ema/(.*)$>\\1")),
    "an optimizer slot into a renamed layer": restoring(RENAMED, mapping(
        "optimizers/all/m/head/fc/kernel>head/hidden/kernel", "head/fc/bias>head/hidden/bias")),
    "a shadow OLD lacks": restoring(RENAMED, mapping("ema/head/hidden/kernel>head/hidden/kernel",
                                                     "head/fc/bias>head/hidden/bias")),
    "ema_to_model": restoring(OLD, "{from: run_old, ema_to_model: true}"),
    "ema_to_model into a renamed layer": restoring(RENAMED, mapping(
        "head/fc/kernel>head/hidden/kernel", "head/fc/bias>head/hidden/bias", extra="ema_to_model: true, ")),
}


def write(folder: Path, **files: str) -> None:
    for name, content in files.items():
        (folder / name).write_text(content)


def diff_json(folder: Path, capsys: pytest.CaptureFixture[str], old: str, new: str) -> tuple[int, dict]:
    code, out, _ = run(["diff", old, new, "--format", "json", "--fail-on", "checkpoint"], capsys, folder)
    return code, json.loads(out)


# --- F1: the keys of OLD's checkpoint a map can read ------------------------------------------------------------

def test_a_map_reading_old_ema_shadows_restores_and_passes_the_gate(tmp_path: Path, capsys) -> None:
    write(tmp_path, **{"old.yaml": OLD, "new.yaml": NEWS["ema shadows into a renamed layer"]})
    code, out, err = run(["diff", "old.yaml", "new.yaml", "--map", "--fail-on", "checkpoint"], capsys, tmp_path)
    assert (code, err) == (0, "")
    summary = next(line for line in out.splitlines() if line.startswith(PREFIX))
    assert summary == PREFIX + "restored 10, initialized 0, unused weights 2, mismatched 0"
    # NEW's own map fills head/hidden: `--map` adds no second key for it (that would be a conflict)
    assert out.rstrip().endswith("\n# no map entries needed: OLD's checkpoints restore into NEW by name and NEW's "
                                 "own restore maps")


def test_a_shadow_and_its_raw_key_into_one_variable_is_a_conflict_with_the_plans_reason(tmp_path: Path,
                                                                                       capsys) -> None:
    write(tmp_path, **{"old.yaml": OLD, "new.yaml": NEWS["an ema shadow and its raw key into one variable"]})
    code, _, err = run(["diff", "old.yaml", "new.yaml", "--fail-on", "checkpoint"], capsys, tmp_path)
    assert code == 1
    assert err == ("specgen diff: breaks checkpoint: 'head/fc/kernel' is 'conflict' in NEW's restore plan (keys "
                   "'ema/head/fc/kernel', 'head/fc/kernel' all map here): `specgen restore-plan` refuses it and "
                   "`specgen train` restores nothing\n")


def _real_plan(folder: Path, spec: str) -> tuple[bool, str, list[tuple[str, str, str]]]:
    """restore-plan on OLD's real checkpoint: (ok, summary less `unused`, refused rows (path, status, note))."""
    from specgen.ir.resolve import build_ir
    from specgen.ir.restore_targets import restore_targets
    from specgen.runtime.commands.restore import plan_restore, summary_line
    from specgen.spec.load import load_spec

    loaded = load_spec(folder / spec)
    found = plan_restore(loaded, restore_targets(build_ir(loaded)))
    rows = [(r.path, r.status, r.note) for r in found.rows if r.status in ("conflict", "missing")]
    rows += [(r.path, r.status, "") for r in found.rows if r.status == "mismatched"]
    return found.ok, _less_unused(summary_line(found)), sorted(rows)


def _less_unused(summary: str) -> str:
    return ", ".join(part for part in summary.split(", ") if not part.startswith("unused "))


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with OLD trained 1 step (run_old: EMA shadows, adam's slots, the step) and every NEW of NEWS."""
    pytest.importorskip("tensorflow")
    from specgen.cli import main

    folder = tmp_path_factory.mktemp("r10")
    write(folder, **{"old.yaml": OLD}, **{f"new{n}.yaml": text for n, text in enumerate(NEWS.values())})
    cwd = Path.cwd()
    try:
        os.chdir(folder)
        assert main(["train", "old.yaml", "--steps", "1"]) == 0
    finally:
        os.chdir(cwd)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("case", list(NEWS))
def test_the_checkpoint_verdict_is_restore_plans_on_a_real_checkpoint(trained: Path, capsys, case: str) -> None:
    new = f"new{list(NEWS).index(case)}.yaml"
    ok, summary, refused = _real_plan(trained, new)
    capsys.readouterr()
    code, document = diff_json(trained, capsys, "old.yaml", new)
    section = document["sections"]["checkpoint"]
    rows = sorted((c["what"], c["change"], c["new"] if c["change"] != "mismatched" else "") for c in section["changes"]
                  if c["change"] in ("conflict", "missing", "mismatched"))
    assert (code == 0, _less_unused(section["summary"].removeprefix(PREFIX[12:])), rows) == (ok, summary, refused)


@pytest.mark.slow
def test_the_modelled_checkpoint_holds_every_key_of_a_real_one(trained: Path) -> None:
    from specgen.ir.resolve import build_ir
    from specgen.review.checkpoint import old_checkpoint
    from specgen.runtime.commands.restore_sources import read_source
    from specgen.spec.load import load_spec

    _, entries = read_source(trained / "run_old")
    modelled = old_checkpoint(build_ir(load_spec(trained / "old.yaml")))
    assert {k: (e.shape, e.dtype) for k, e in modelled.items()} == {k: (e.shape, e.dtype) for k, e in entries.items()}
    assert list(modelled) == list(entries)  # in the real plan's order: a conflict names its keys alike


# --- F2: the --map header's words for refused rows ---------------------------------------------------------------

def test_the_map_header_says_mismatched_variables_are_refused(tmp_path: Path, capsys) -> None:
    wide = NO_EMA.replace("units: 8, activation: relu", "units: 16, activation: relu")
    write(tmp_path, **{"old.yaml": NO_EMA, "wide.yaml": wide})
    code, out, _ = run(["diff", "old.yaml", "wide.yaml", "--map"], capsys, tmp_path)
    assert code == 0
    assert out.rstrip().splitlines()[-1] == (
        "# no map entries needed for renamed weights; the restore refuses head/fc/bias, head/fc/kernel, "
        "head/out/kernel (mismatched: another shape or dtype in OLD's checkpoints) and no run starts (`specgen "
        "restore-plan` exits 1): the checkpoint section's breaks say what each needs")


def test_the_map_header_names_refused_and_lost_rows_apart(tmp_path: Path, capsys) -> None:
    """A renamed layer the map restores, a reshaped one refused and a layer whose key NEW's map sends elsewhere."""
    new = restoring(NO_EMA.replace("units: 10}", "units: 12}").replace("conv1", "stem"),
                    "{from: run_old, map: [{from: bn1/gamma, to: bn1/beta}]}")
    write(tmp_path, **{"old.yaml": NO_EMA, "new.yaml": new})
    code, out, _ = run(["diff", "old.yaml", "new.yaml", "--map"], capsys, tmp_path)
    assert code == 0
    head = next(line for line in out.splitlines() if line.startswith("# checkpoint map"))
    assert head == (
        "# checkpoint map: the entries for OLD's renamed weights; with it, the restore refuses head/out/bias, "
        "head/out/kernel (mismatched: another shape or dtype in OLD's checkpoints); bn1/beta (conflict: several "
        "keys map there) and no run starts (`specgen restore-plan` exits 1); bn1/gamma would also start from their "
        "initializer, though OLD had them: the checkpoint section's breaks say what each needs")


# --- F3: a spec diffed with itself --------------------------------------------------------------------------------

def _examples() -> list[Path]:
    return sorted(p for p in (ROOT / "examples").rglob("*.yaml") if "abstract: true" not in p.read_text())


@pytest.mark.parametrize("spec", _examples(), ids=lambda p: str(p.relative_to(ROOT / "examples")))
def test_every_example_diffed_with_itself_is_empty(spec: Path, capsys) -> None:
    gates = ["--fail-on", "interface,checkpoint,layers"]
    code, out, err = run(["diff", spec.name, spec.name, "--format", "json", *gates], capsys, spec.parent)
    sections = json.loads(out)["sections"]
    assert (code, err) == (0, "")
    assert {name: (s["changed"], s["changes"], s["breaks"]) for name, s in sections.items()} == {
        name: (False, [], []) for name in sections}
    code, out, err = run(["diff", spec.name, spec.name, *gates], capsys, spec.parent)
    assert (code, err) == (0, "")
    lines = [line for line in out.splitlines()[1:] if line]
    assert [line for line in lines if not line.endswith(": unchanged") and not line.startswith(PREFIX)] == []


SELF = {
    "exclude": "{from: run_old, exclude: ['head/*']}",
    "map of keys OLD lacks": mapping("conv/weights>conv1/kernel", "^backbone/(.*)$>\\1").replace("run_old", "pre.ckpt"),
    "strict with exclude": "{from: run_old, strict: true, exclude: ['bn1/*']}",
    "ema_to_model": "{from: run_old, ema_to_model: true}",
}


@pytest.mark.parametrize("entry", list(SELF))
def test_a_spec_with_restore_entries_diffed_with_itself_is_empty(tmp_path: Path, capsys, entry: str) -> None:
    write(tmp_path, **{"a.yaml": restoring(OLD, SELF[entry])})
    code, document = diff_json(tmp_path, capsys, "a.yaml", "a.yaml")
    assert code == 0
    assert [name for name, s in document["sections"].items() if s["changed"] or s["breaks"]] == []


def test_rows_old_shares_are_hidden_and_what_the_change_did_is_not(tmp_path: Path, capsys) -> None:
    """OLD and NEW keep one restore entry that excludes the head; NEW widens head/fc: only that layer's rows."""
    entry = "{from: run_old, exclude: ['head/out/*']}"
    wide = OLD.replace("units: 8, activation: relu", "units: 16, activation: relu")
    write(tmp_path, **{"a.yaml": restoring(OLD, entry), "b.yaml": restoring(wide, entry)})
    code, document = diff_json(tmp_path, capsys, "a.yaml", "b.yaml")
    section = document["sections"]["checkpoint"]
    assert code == 1
    assert [(c["change"], c["what"]) for c in section["changes"]] == [("mismatched", "head/fc/bias"),
                                                                       ("mismatched", "head/fc/kernel")]
    assert section["summary"] == PREFIX[12:] + "restored 6, initialized 2, unused weights 2, mismatched 2"


def test_a_conflict_old_shares_stays_a_break_marked_as_old_s_own(tmp_path: Path, capsys) -> None:
    """OLD holds EMA shadows and its entry sends a shadow and its raw key to one variable: restore-plan refuses any
    checkpoint of OLD by it, so the spec diffed with itself, or with a learning rate changed, fails the gate."""
    conflict = restoring(OLD, mapping("ema/head/fc/kernel>head/fc/kernel"))
    write(tmp_path, **{"a.yaml": conflict, "b.yaml": conflict.replace("learning_rate: 0.001", "learning_rate: 0.01")})
    for new in ("a.yaml", "b.yaml"):
        code, document = diff_json(tmp_path, capsys, "a.yaml", new)
        section = document["sections"]["checkpoint"]
        assert code == 1
        assert section["breaks"] == [
            "'head/fc/kernel' is 'conflict' in NEW's restore plan (keys 'ema/head/fc/kernel', 'head/fc/kernel' all map "
            "here): `specgen restore-plan` refuses it and `specgen train` restores nothing (as in OLD's own plan)"]
        assert section["summary"] == PREFIX[12:] + "restored 9, initialized 0, unused weights 0, mismatched 0, conflicts 1"


def test_a_mismatch_of_other_shapes_is_not_old_s_own(tmp_path: Path, capsys) -> None:
    """OLD's entry swaps two biases (each mismatched in OLD's own plan); NEW widens head/out: head/fc/bias's mismatch is
    OLD's own, head/out/bias's is of another shape (new), as is head/out/kernel's."""
    entry = mapping("head/fc/bias>head/out/bias", "head/out/bias>head/fc/bias")
    write(tmp_path, **{"a.yaml": restoring(NO_EMA, entry),
                       "b.yaml": restoring(NO_EMA.replace("units: 10}", "units: 12}"), entry)})
    code, document = diff_json(tmp_path, capsys, "a.yaml", "b.yaml")
    assert code == 1
    assert document["sections"]["checkpoint"]["breaks"] == [
        "'head/fc/bias' is [10] in OLD's checkpoints and [8] here: it cannot be restored (as in OLD's own plan)",
        "'head/out/bias' is [8] in OLD's checkpoints and [12] here: it cannot be restored",
        "'head/out/kernel' is [8, 10] in OLD's checkpoints and [8, 12] here: it cannot be restored"]
