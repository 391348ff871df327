"""Training state under damage and odd folders, findings 1-6 of checker round 11 (rt11/state).

1. Every key meta.json holds is checked with the type specgen writes (resume.py's Meta): `accumulate` ("2" resumed
   the saved data position silently), `data: null`, an `optimizers` record that leaves out an optimizer whose state
   the checkpoint holds. The key list comes from a real checkpoint, so a key added later without a check fails here.
2. Under `ema_to_model` the map sees EMA shadows by their base names: an entry that matches only `ema/X` never
   applied (the weight kept its initializer, exit 0); now an error of the plan.
3. restore-plan's unused keys are counted by file: a key another entry restores is not unused; each is listed once.
4. A `checkpoint.dir` that is a file: one line at the key, not "make it writable".
5. A refused export with -o inside the run folder left the run folder's mtime moved.
6. `run/latest` (or `checkpoint`) that is a folder or a link: refused before training, not at every save after it.
Real TensorFlow on a tiny MLP, a few steps; refusals compared whole, folders by bytes and mtimes before and after.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

tf = pytest.importorskip("tensorflow")

from test_resume_end_r10 import cli, snapshot  # noqa: E402

from specgen.atomic import UnsafePathError  # noqa: E402
from specgen.cli import main  # noqa: E402
from specgen.diagnostics import SpecError  # noqa: E402
from specgen.runtime.checkpoint import write_failure  # noqa: E402
from specgen.runtime.commands.resume import Meta, verified_meta  # noqa: E402
from specgen.runtime.integrity import key_position  # noqa: E402
from specgen.spec.load import load_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"
DATA = f"data: {{train: {{npz: {DIGITS}, features: {{image: x_train}}, labels: {{label: y_train}}}}}}\n"
# Two optimizers (the `optimizers` record has two entries), accumulate and EMA (their keys and shadows).
SPEC = """\
specgen: 1
name: state_mlp
inputs: {image: {shape: [8, 8, 1]}}
outputs: {logits: out}
layers:
  - {name: flat, op: flatten}
  - {name: hidden, op: dense, units: 8, activation: relu}
  - {name: drop, op: dropout, rate: 0.1}
  - {name: out, op: dense, units: 10}
collections: {body: ["hidden/*"], head: ["out/*"]}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers:
  b: {variables: body, kind: sgd, momentum: 0.9, learning_rate: 0.01}
  h: {variables: head, kind: adam, learning_rate: 0.002}
train: {batch_size: 8, accumulate: 2, ema: {decay: 0.9}, epochs: 1, seed: 1, shuffle_buffer: 200}
""" + DATA + """\
checkpoint: {dir: run, every_steps: 3, keep: 3}
"""
# A fine-tuning spec over the same checkpoint: other layer names, restore entries appended by each test.
FINE = """\
specgen: 1
name: fine
inputs: {image: {shape: [8, 8, 1]}}
outputs: {logits: newhead}
layers:
  - {name: flat, op: flatten}
  - {name: stem/fc, op: dense, units: 8, activation: relu}
  - {name: newhead, op: dense, units: 10}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers: {o: {kind: sgd, learning_rate: 0.0}}
train: {batch_size: 8, ema: {decay: 0.9}, seed: 5}
""" + DATA + """\
checkpoint:
  dir: ftrun
  restore:
"""
RESUME = "Resume from another checkpoint (--resume-from) or start over with --fresh"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """spec.yaml and run/ after `--steps 6`: ckpt-00000003 and ckpt-00000006."""
    folder = tmp_path_factory.mktemp("base")
    (folder / "spec.yaml").write_text(SPEC)
    assert main(["train", str(folder / "spec.yaml"), "--steps", "6", "--quiet"]) == 0
    return folder


@pytest.fixture
def copy(base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the base folder, the working directory (paths print relative to it)."""
    shutil.copytree(base, tmp_path / "copy", symlinks=True)
    monkeypatch.chdir(tmp_path / "copy")
    return tmp_path / "copy"


CKPT = Path("run/ckpt-00000006")


def edit_meta(key: str, value: Any) -> tuple[str, int]:
    """Set one key of the newest checkpoint's meta.json (as json.dump writes it, one key a line); its line."""
    file = CKPT / "meta.json"
    meta = json.loads(file.read_text())
    meta[key] = value
    text = json.dumps(meta, indent=2, sort_keys=True) + "\n"
    file.write_text(text)
    position = key_position(text, key)
    assert position is not None
    return text, position.line


# --- 1: every key meta.json holds is checked -------------------------------------------------------------------

NOT_WRITTEN = [True, {"x": 1}, None]  # no key of meta.json is ever written as these (null: one exception below)


def test_every_key_a_real_checkpoint_holds_is_checked_with_the_type_specgen_writes(copy: Path) -> None:
    """The keys come from a real meta.json, so a key a later change adds without a field in Meta (whose extra keys
    are ignored) fails here: each is set to a value specgen never writes there, and each is refused at its line."""
    written = json.loads((CKPT / "meta.json").read_text())
    assert {"accumulate", "data", "optimizers", "overrides", "pass_start", "serial", "spec", "step",
            "train_files_sha256", "until_by", "until_per_epoch", "until_step"} <= set(written)
    assert set(written) <= set(Meta.model_fields), set(written) - set(Meta.model_fields)
    loaded = load_spec(Path("spec.yaml"))
    original = (CKPT / "meta.json").read_bytes()
    for key in sorted(written):
        for bad in NOT_WRITTEN:
            if bad is None and key == "train_files_sha256":  # a worker that is not the chief writes null
                continue
            _, line = edit_meta(key, bad)
            with pytest.raises(SpecError) as caught:
                verified_meta(CKPT, loaded)
            found = caught.value.diagnostics[0]
            assert (found.path, found.position and found.position.line) == (str(CKPT / "meta.json"), line), \
                (key, bad, str(caught.value))
            (CKPT / "meta.json").write_bytes(original)
    assert verified_meta(CKPT, loaded) == written


ACCUMULATE = "an integer, 1 or more (train.accumulate, which cuts each pass of the data)"


@pytest.mark.parametrize(("key", "value", "received", "expected"), [
    # was: "2" read as "not recorded" and the saved data position applied, without a note
    ("accumulate", "2", "'2' (str)", ACCUMULATE),
    ("accumulate", True, "True (bool)", ACCUMULATE),  # was: `note: ... (accumulate True -> 2)`
    ("accumulate", 0, "0 (int)", ACCUMULATE),
    ("accumulate", None, "None (NoneType)", ACCUMULATE),
    ("data", None, "None (NoneType)", "an object of batch_size, examples, seed and shuffle_buffer (integers)"),
    ("optimizers", None, "None (NoneType)", "an object of optimizer name to its kind (strings)"),
    # was: accepted, and h's kind never compared
    ("optimizers", {"b": "sgd"}, "{'b': 'sgd'} (dict)",
     "an object of each optimizer whose state the checkpoint holds (b, h) to its kind (strings)"),
    ("optimizers", {"b": "sgd", "h": "adam", "x": "adam"}, "{'b': 'sgd', 'h': 'adam', 'x': 'adam'} (dict)",
     "an object of each optimizer whose state the checkpoint holds (b, h) to its kind (strings)"),
])
def test_a_malformed_key_is_refused_at_its_line_and_nothing_changes(
        copy: Path, key: str, value: Any, received: str, expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    _, line = edit_meta(key, value)
    before = snapshot(copy)
    code, out, err = cli(["train", "spec.yaml", "--resume", "--steps", "1", "--quiet"], capsys)
    assert (code, out) == (1, "")
    assert err == (f"{CKPT}/meta.json:{line}:3: error: checkpoint ckpt-00000006 has a malformed meta.json: '{key}' is "
                   f"{received}; expected {expected}, as specgen writes it. {RESUME}\n1 error found\n")
    assert snapshot(copy) == before


def test_an_intact_record_still_resumes(copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(["train", "spec.yaml", "--resume", "--steps", "1", "--quiet"], capsys)
    assert (code, err) == (0, "") and out.startswith(f"resumed from {CKPT} at step 6\n"), out


# --- 2 and 3: restore maps ----------------------------------------------------------------------------------------

def plan(entries: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    Path("fine.yaml").write_text(FINE + entries)
    code, out, err = cli(["restore-plan", "fine.yaml"], capsys)
    assert err == ""
    return code, out


def section(out: str, title: str) -> list[str]:
    lines = out.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith(title))
    return lines[start: lines.index("", start)]


@pytest.mark.parametrize("entry", ['{from: "ema/hidden/kernel", to: "stem/fc/kernel"}',
                                   '{pattern: "^ema/hidden/(.*)$", to: "stem/fc/\\\\1"}',
                                   '{strip_prefix: "ema/hidden/", add_prefix: "stem/fc/"}'])
def test_under_ema_to_model_an_entry_for_a_shadows_own_key_is_an_error(
        copy: Path, entry: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Was: exit 0, `stem/fc/kernel  initialized ... no checkpoint key maps here`, and train left it random."""
    code, out = plan(f"    - {{from: run, ema_to_model: true, map: [{entry}]}}\n", capsys)
    shown = entry.replace('"', "").replace("\\\\", "\\")
    assert code == 1
    assert section(out, "errors:") == [
        "errors:", f"  run: map entry {shown} never applies: with ema_to_model the map sees each EMA shadow by its "
        "base name ('hidden/bias' for 'ema/hidden/bias'); write the entry for 'hidden/bias'"
        if "kernel" not in entry else
        f"  run: map entry {shown} never applies: with ema_to_model the map sees each EMA shadow by its base name "
        "('hidden/kernel' for 'ema/hidden/kernel'); write the entry for 'hidden/kernel'"]
    Path("fine.yaml").write_text(FINE + f"    - {{from: run, ema_to_model: true, map: [{entry}]}}\n")
    before = snapshot(copy / "run")
    code, out, err = cli(["train", "fine.yaml", "--steps", "1", "--quiet"], capsys)
    assert code == 1 and err.endswith("the restore plan above has problems (restored 0, initialized 4, unused 24, "
                                      "mismatched 0, errors 1); nothing was restored\n1 error found\n"), err
    assert snapshot(copy / "run") == before and not Path("ftrun").exists()


def test_the_base_name_entry_restores_the_shadow_and_without_ema_to_model_the_key_as_written(
        copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for entry in ("{from: run, ema_to_model: true, map: [{from: hidden/kernel, to: stem/fc/kernel}]}",
                  "{from: run, map: [{from: ema/hidden/kernel, to: stem/fc/kernel}]}"):
        code, out = plan(f"    - {entry}\n", capsys)
        assert code == 0
        row = next(line for line in out.splitlines() if line.startswith("stem/fc/kernel"))
        assert row.split()[:3] == ["stem/fc/kernel", "restored", "run:ema/hidden/kernel"], out


TWO_ENTRIES = """\
    - from: run
      map: [{pattern: "^hidden/(.*)$", to: "stem/fc/\\\\1"}]
      exclude: ["newhead/*"]
    - from: run
      ema_to_model: true
      map: [{from: out/kernel, to: newhead/kernel}, {from: out/bias, to: newhead/bias}]
      exclude: ["stem/*"]
"""


def test_unused_keys_are_counted_by_file_each_once(copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Was: `unused 34`-like counts (each entry's leftovers added up), keys the other entry restored listed as unused,
    keys both left listed twice. The checkpoint holds 24 keys; 4 are restored, so 20 are unused, each once."""
    code, out = plan(TWO_ENTRIES, capsys)
    assert code == 0
    unused = section(out, "unused keys")
    keys = [line.split()[0] for line in unused[1:]]
    assert len(keys) == len(set(keys)) == 20 and unused[0] == "unused keys (20):"
    assert not {"run:hidden/kernel", "run:hidden/bias", "run:ema/out/kernel", "run:ema/out/bias"} & set(keys)
    assert [line for line in unused if line.startswith(("  run:ema/hidden/kernel ", "  run:out/kernel "))] == [
        "  run:ema/hidden/kernel  float32[64, 8]  restore[0]: EMA shadow of 'stem/fc/kernel'; restored only with "
        "ema_to_model: true. restore[1]: maps to 'hidden/kernel', not a variable here",
        "  run:out/kernel  float32[8, 10]  restore[0]: no variable with this name here. restore[1]: superseded by the "
        "EMA shadow 'ema/out/kernel' (ema_to_model)"]
    assert "  run:global_step  int64[]  training state" in "\n".join(unused)
    assert out.endswith("\nrestored 4, initialized 0, unused 20, mismatched 0\n")


# --- 4: checkpoint.dir that is a file -----------------------------------------------------------------------------

def test_a_checkpoint_dir_that_is_a_file_is_said_at_the_key(copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Path("afile").write_text("x")
    Path("a.yaml").write_text(SPEC.replace("dir: run,", "dir: afile,"))
    line = next(n for n, row in enumerate(SPEC.splitlines(), 1) if row.startswith("checkpoint:"))
    before = snapshot(copy)
    for args, where, what in [
            (["a.yaml"], f"a.yaml:{line}:19", "checkpoint.dir afile is a file, not a folder; move afile away"),
            (["spec.yaml", "--set", "checkpoint.dir=afile"], "--set checkpoint.dir=afile",
             "checkpoint.dir afile is a file, not a folder; move afile away"),
            (["spec.yaml", "--set", "checkpoint.dir=afile/run"], "--set checkpoint.dir=afile/run",
             "checkpoint.dir afile/run cannot be made: afile is a file, not a folder; move afile away")]:
        code, out, err = cli(["train", *args, "--steps", "1", "--quiet"], capsys)
        assert (code, out) == (1, "")
        assert err == (f"{where}: error: {what}, or train into another folder with --set checkpoint.dir=PATH. "
                       "Nothing was changed.\n1 error found\n")
    assert snapshot(copy) == before


# --- 5: a refused export inside the run folder --------------------------------------------------------------------

def test_a_refused_export_into_the_run_folder_changes_nothing(copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Was: run/export made and removed around the refusal, so run/'s mtime moved under "Nothing was changed"."""
    index = CKPT / "variables.index"
    index.write_bytes(index.read_bytes()[:100])
    os.utime("run", ns=(1_000_000_000, 1_000_000_000))  # a time the refusal's own writes could not give
    before = snapshot(copy)
    code, out, err = cli(["export", "spec.yaml", "--checkpoint", "run", "-o", "run/export"], capsys)
    assert (code, out) == (1, "")
    assert err == (f"{index}: error: checkpoint ckpt-00000006 is unreadable: damaged (not an sstable (bad magic "
                   "number)). Nothing was changed; the intact checkpoint beside it is ckpt-00000003: pass --checkpoint "
                   "run/ckpt-00000003 (export, restore-plan) or --resume-from run/ckpt-00000003 (train)\n"
                   "1 error found\n")
    assert snapshot(copy) == before
    code, _, _ = cli(["export", "spec.yaml", "--checkpoint", "run/ckpt-00000003", "-o", "run/export"], capsys)
    assert code == 0 and sorted(p.name for p in Path("run/export").iterdir()) == ["export.json", "model.onnx"]


# --- 6: latest or checkpoint that is no file ---------------------------------------------------------------------

@pytest.mark.parametrize(("name", "make", "what", "role"), [
    ("latest", lambda p: p.mkdir(), "a folder", "the name of the newest checkpoint"),
    ("latest", lambda p: p.symlink_to("ckpt-00000006"), "a symbolic link", "the name of the newest checkpoint"),
    ("checkpoint", lambda p: p.mkdir(), "a folder", "TensorFlow's state file"),
])
def test_a_latest_that_is_no_file_is_refused_before_training(
        copy: Path, name: str, make: Any, what: str, role: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Was: a note, a checkpoint interval of training, then `unsafepatherror while writing run/latest ... Make the
    run folder writable`, at every retry."""
    (Path("run") / name).unlink()
    make(Path("run") / name)
    before = snapshot(copy)
    for flags in (["--resume"], ["--resume-from", CKPT]):
        code, out, err = cli(["train", "spec.yaml", *flags, "--steps", "3", "--quiet"], capsys)
        assert (code, out) == (1, "")
        assert err == (f"run/{name}: error: {what}, not a file: every checkpoint save replaces '{name}' ({role}), and "
                       "replaces only a file. Remove it, then run again (--resume takes the newest checkpoint without "
                       "it). Nothing was changed.\n1 error found\n")
        assert snapshot(copy) == before
    shutil.rmtree(Path("run") / name) if (Path("run") / name).is_dir() and not (Path("run") / name).is_symlink() \
        else (Path("run") / name).unlink()
    code, out, _ = cli(["train", "spec.yaml", "--resume", "--steps", "3", "--quiet"], capsys)
    assert code == 0 and (Path("run") / "latest").read_text() == "ckpt-00000009\n"


def test_a_save_that_meets_a_folder_says_what_is_in_the_way(copy: Path) -> None:
    """A folder made in `latest`'s place during the run (past the check above): said as such, never the error's
    class name with "make the run folder writable"."""
    error = UnsafePathError(Path("run/latest"), "is a folder; specgen writes a file there",
                            "give a file path and run again")
    assert str(write_failure(error, Path("run"), "run/latest after saving checkpoint ckpt-00000006 (step 6)")) == (
        "run: error: cannot write run/latest after saving checkpoint ckpt-00000006 (step 6): run/latest is a folder; "
        "specgen writes a file there; the newest checkpoint, ckpt-00000006, is intact. Remove run/latest, then "
        "continue from it with --resume")
