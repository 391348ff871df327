"""`extends`: specs built on other spec files (spec/compose.py), with the origin of every value (spec/provenance.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import run_cli

from specgen.spec.compose import MAX_DEPTH
from specgen.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[1]
FAMILY = ROOT / "examples" / "specs" / "family"

BASE = """\
specgen: 1
abstract: true
inputs:
  x: {shape: [4], dtype: float32}
outputs:
  y: out
layers:
  - {name: fc1, op: dense, input: x, units: 8, activation: relu}
  - {name: fc2, op: dense, units: 8}
  - {name: out, op: dense, units: 2}
loss: {kind: sparse_softmax_cross_entropy, logits: y, labels: label}
optimizers:
  all: {variables: trainable, kind: adam, learning_rate: 0.001}
train: {batch_size: 4, epochs: 1, metrics: [accuracy], seed: 0}
"""


def write(folder: Path, files: dict[str, str]) -> None:
    (folder / ".git").mkdir(parents=True, exist_ok=True)  # the repository the specs live in (extends stays inside it)
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


run = run_cli


def layers(path: Path) -> list[tuple[str, int | None]]:
    return [(layer.name, getattr(layer, "units", None)) for layer in load_spec(path).spec.layers]


# --- merge rules ---------------------------------------------------------------------------------------------


def test_layers_merge_by_name_change_append_place_and_remove(tmp_path: Path) -> None:
    write(tmp_path, {"base.yaml": BASE, "v.yaml": """\
extends: base.yaml
name: v
layers:
  - {name: fc2, units: 16}
  - {name: extra, op: dense, units: 3}
  - {name: first, op: dense, units: 5, input: x, before: fc1}
  - {name: mid, op: dense, units: 6, after: fc1}
  - {name: fc1, input: first}
"""})
    assert layers(tmp_path / "v.yaml") == [("first", 5), ("fc1", 8), ("mid", 6), ("fc2", 16), ("out", 2),
                                           ("extra", 3)]
    spec = load_spec(tmp_path / "v.yaml").spec
    assert spec.layers[3].activation in (None, "linear")  # fc2 kept the base's fields it did not give
    assert spec.layers[1].activation == "relu" and spec.layers[1].input == "first"


def test_an_item_moved_with_after_keeps_its_fields(tmp_path: Path) -> None:
    write(tmp_path, {"base.yaml": BASE, "v.yaml": "extends: base.yaml\nname: v\nlayers:\n"
                                                  "  - {name: out, units: 4, before: fc2}\n"
                                                  "  - {name: fc2, units: 4}\noutputs: {y: fc2}\n"})
    assert layers(tmp_path / "v.yaml") == [("fc1", 8), ("out", 4), ("fc2", 4)]


def test_mappings_merge_key_by_key_null_removes_and_other_lists_are_replaced(tmp_path: Path) -> None:
    write(tmp_path, {"base.yaml": BASE + "checkpoint: {dir: runs/b, every_steps: 5, keep: 2}\n", "v.yaml": """\
extends: base.yaml
name: v
optimizers:
  all: {learning_rate: 0.01}
train: {metrics: [mean_loss], seed: null}
checkpoint: {keep: null}
"""})
    spec = load_spec(tmp_path / "v.yaml").spec
    assert spec.optimizers["all"].kind == "adam" and spec.optimizers["all"].learning_rate == 0.01
    assert [str(m.kind) if hasattr(m, "kind") else str(m) for m in spec.train.metrics] == ["mean_loss"]
    assert spec.train.batch_size == 4  # the rest of `train` is the base's
    assert spec.checkpoint.every_steps == 5 and spec.checkpoint.keep == load_spec_default_keep()


def load_spec_default_keep() -> int:
    from specgen.spec.model import Checkpoint

    return Checkpoint.model_fields["keep"].default


def test_several_bases_apply_left_to_right_then_the_files_own_keys(tmp_path: Path) -> None:
    write(tmp_path, {
        "base.yaml": BASE,
        "a.yaml": "abstract: true\ntrain: {batch_size: 8, epochs: 2}\n",
        "b.yaml": "abstract: true\ntrain: {batch_size: 16}\n",
        "v.yaml": "extends: [base.yaml, a.yaml, b.yaml]\nname: v\ntrain: {seed: 3}\n",
    })
    train = load_spec(tmp_path / "v.yaml").spec.train
    assert (train.batch_size, train.epochs, train.seed) == (16, 2, 3)


def test_chains_resolve_paths_from_the_file_that_names_them(tmp_path: Path) -> None:
    write(tmp_path, {"bases/base.yaml": BASE, "bases/mid.yaml": "extends: base.yaml\nlayers: [{name: fc1, units: 12}]\n",
                     "variants/v.yaml": "extends: ../bases/mid.yaml\nname: v\n"})
    assert layers(tmp_path / "variants" / "v.yaml")[0] == ("fc1", 12)


def test_a_removed_layer_that_is_still_consumed_is_a_positioned_error(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"base.yaml": BASE,
                     "w.yaml": "extends: base.yaml\nname: w\noutputs: {y: fc2}\nlayers: [{name: out, remove: true}]\n"})
    assert run(["validate", "w.yaml"], capsys, tmp_path)[0] == 0
    write(tmp_path, {"u.yaml": "extends: base.yaml\nname: u\nlayers: [{name: out, remove: true}]\n"})
    code, _, err = run(["validate", "u.yaml"], capsys, tmp_path)
    assert err.splitlines()[0] == ("base.yaml:6:6: error: output 'y' names layer 'out', which does not exist; "
                                   "u.yaml:3:30 removes 'out': keep it, or name another layer in that file "
                                   "(via u.yaml:1:10)")
    assert code == 1


# --- positions and refusals ------------------------------------------------------------------------------------


def test_an_error_in_a_base_points_at_the_base_and_names_the_chain(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"base.yaml": BASE.replace("units: 8, activation", "units: -8, activation"),
                     "mid.yaml": "abstract: true\nextends: base.yaml\n",
                     "v.yaml": "# a variant\nextends: [mid.yaml]\nname: v\n"})
    code, _, err = run(["validate", "v.yaml"], capsys, tmp_path)
    assert code == 1
    assert err.splitlines()[0] == ("base.yaml:8:45: error: units: received -8, expected a value > 0 (in layer 'fc1') "
                                   "(via mid.yaml:2:10, via v.yaml:2:11)")


@pytest.mark.parametrize(("files", "line"), [
    ({"v.yaml": "extends: v.yaml\nname: v\n"}, "v.yaml:1:10: error: extends: 'v.yaml' closes a cycle (v.yaml -> v.yaml)"),
    ({"v.yaml": "extends: w.yaml\nname: v\n", "w.yaml": "extends: [v.yaml]\n"},
     "w.yaml:1:11: error: extends: 'v.yaml' closes a cycle (v.yaml -> w.yaml -> v.yaml) (via v.yaml:1:10)"),
    ({"v.yaml": "name: v\nextends: gone.yaml\n"},
     "v.yaml:2:10: error: extends: 'gone.yaml' does not exist (looked for gone.yaml)"),
    ({"v.yaml": "extends: notes.txt\n", "notes.txt": "secret: 1\n"},
     "v.yaml:1:10: error: extends: 'notes.txt' is not a spec file; expected a .yaml or .yml file"),
    ({"v.yaml": "extends: 3\n"},
     "v.yaml:1:10: error: extends: expected a spec file (a path relative to this file) or a list of them; received 3 (int)"),
    ({"v.yaml": "extends: [base.yaml, {a: 1}]\n", "base.yaml": BASE},
     "v.yaml:1:22: error: extends[1]: expected a spec file (a path relative to this file); received {a: 1} "
     "(a mapping)"),
    ({"v.yaml": "extends: base.yaml\nname: v\nlayers: [{name: nope, remove: true}]\n", "base.yaml": BASE},
     "v.yaml:3:31: error: remove: no base defines an item named 'nope'; expected one of fc1, fc2, out"),
    ({"v.yaml": "extends: base.yaml\nname: v\nlayers: [{name: n, op: relu, after: nope}]\n", "base.yaml": BASE},
     "v.yaml:3:37: error: after: no item named 'nope' to place it after; expected one of fc1, fc2, out"),
    ({"v.yaml": "extends: base.yaml\nabstract: 1\n", "base.yaml": BASE},
     "v.yaml:2:11: error: abstract: expected true or false; received 1 (int)"),
])
def test_each_refusal_is_one_positioned_line(tmp_path: Path, capsys, files: dict[str, str], line: str) -> None:
    write(tmp_path, files)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code, out, err = run(["validate", "v.yaml"], capsys, tmp_path)
    assert (code, out) == (1, "")
    assert err.splitlines() == [line, "1 error found"]
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written


def test_a_base_outside_the_repository_is_refused_without_reading_it(tmp_path: Path, capsys) -> None:
    repo = tmp_path / "repo"
    write(repo, {"v.yaml": "extends: ../outside.yaml\nname: v\n"})
    (tmp_path / "outside.yaml").write_text("password: hunter2\n")
    code, _, err = run(["validate", "v.yaml"], capsys, repo)
    assert code == 1 and "hunter2" not in err
    assert err.splitlines()[0].startswith("v.yaml:1:10: error: extends: '../outside.yaml' is outside the repository (")
    link = repo / "inside.yaml"
    link.symlink_to(tmp_path / "outside.yaml")  # a link in the repository to a file outside it: outside
    write(repo, {"w.yaml": "extends: inside.yaml\nname: w\n"})
    code, _, err = run(["validate", "w.yaml"], capsys, repo)
    assert code == 1 and "hunter2" not in err
    assert err.splitlines()[0] == ("w.yaml:1:10: error: extends: 'inside.yaml' is a link to a file outside the "
                                   "repository (.); a spec extends only files of its own repository")


def test_a_binary_base_is_refused_without_echoing_it(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"v.yaml": "extends: blob.yaml\nname: v\n"})
    (tmp_path / "blob.yaml").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe secret-bytes")
    code, _, err = run(["validate", "v.yaml"], capsys, tmp_path)
    assert code == 1 and "secret" not in err and "PNG" not in err
    assert err.splitlines() == ["blob.yaml:1:1: error: the file is not UTF-8 text: invalid start byte (byte 0x89); "
                                "save it as UTF-8 (via v.yaml:1:10)", "1 error found"]


def test_a_chain_deeper_than_the_bound_is_refused(tmp_path: Path, capsys) -> None:
    files = {f"s{i}.yaml": f"abstract: true\nextends: s{i + 1}.yaml\n" for i in range(MAX_DEPTH + 1)}
    files[f"s{MAX_DEPTH + 1}.yaml"] = BASE
    files["v.yaml"] = "extends: s0.yaml\nname: v\n"
    write(tmp_path, files)
    code, _, err = run(["validate", "v.yaml"], capsys, tmp_path)
    assert code == 1
    assert f"extends: the chain of bases is deeper than {MAX_DEPTH} files" in err.splitlines()[0]


# --- abstract, build --check, provenance --------------------------------------------------------------------------


def test_abstract_specs_are_checked_for_what_they_have_and_build_skips_them(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"base.yaml": BASE, "bad.yaml": "abstract: true\ntrain: {batch_size: 0, bogus: 1}\n"})
    code, out, _ = run(["validate", "base.yaml"], capsys, tmp_path)
    assert (code, out) == (0, "ok: base.yaml (abstract: 7 section(s) checked; build generates nothing for it)\n")
    code, _, err = run(["validate", "bad.yaml"], capsys, tmp_path)
    assert code == 1 and "bad.yaml:2:21: error:" in err and "bad.yaml:2:24: error: unknown key 'bogus'" in err
    assert "missing required" not in err
    code, out, _ = run(["build", "base.yaml", "--out", "out"], capsys, tmp_path)
    assert code == 0 and out.splitlines()[-1] == "built 0 spec(s) into out: 0 file(s) changed"
    code, _, err = run(["report", "base.yaml"], capsys, tmp_path)
    assert code == 1 and err == ("specgen: error: base.yaml is abstract (abstract: true): it exists only to be "
                                 "extended by other specs; use a spec that extends it\n")


def test_build_check_sees_a_base_edit(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"base.yaml": BASE, "a.yaml": "extends: base.yaml\nname: a\n", "b.yaml": "extends: base.yaml\nname: b\n"})
    assert run(["build", "a.yaml", "b.yaml", "--out", "out"], capsys, tmp_path)[0] == 0
    assert run(["build", "a.yaml", "b.yaml", "--out", "out", "--check"], capsys, tmp_path)[0] == 0
    (tmp_path / "base.yaml").write_text(BASE.replace("units: 8, activation", "units: 9, activation"))
    code, out, err = run(["build", "a.yaml", "b.yaml", "--out", "out", "--check"], capsys, tmp_path)
    assert code == 1 and "out of date" in err
    stale = {line.split()[1].split("/")[1] for line in out.splitlines() if line.startswith("drifted: ")}
    assert stale == {"a", "b"}


def test_resolved_prints_every_leaf_with_its_origin(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"base.yaml": BASE, "v.yaml": "extends: base.yaml\nname: v\nlayers: [{name: fc2, units: 16}]\n"})
    code, out, _ = run(["validate", "v.yaml", "--resolved", "--set", "train.seed=7"], capsys, tmp_path)
    assert code == 0
    lines = out.splitlines()
    assert lines[:7] == [
        "# v.yaml, resolved: each value's origin is the comment after it",
        "specgen: 1  # base.yaml:1:10",
        "name: v  # v.yaml:2:7",
        "doc: ''  # default",
        "inputs:  # base.yaml:4:3",
        "  x:  # base.yaml:4:6",
        "    shape: [4]  # base.yaml:4:14",
    ]
    assert "    units: 16  # v.yaml:3:29" in lines
    assert "  seed: 7  # --set train.seed" in lines
    assert "  epochs: 1  # base.yaml:14:32" in lines
    assert "  shuffle_buffer: 10000  # default" in lines
    assert not [line for line in lines[1:] if "#" not in line]  # every line says where it came from
    assert "abstract" not in out  # a base's `abstract` is its own


def test_explain_lists_every_setting_in_order_and_suggests_keys(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"base.yaml": BASE, "v.yaml": "extends: base.yaml\nname: v\nlayers: [{name: fc2, units: 16}]\n"})
    code, out, _ = run(["explain", "v.yaml", "layers[fc2].units", "--set", "layers.1.units=32"], capsys, tmp_path)
    assert (code, out.splitlines()) == (0, ["layers[fc2].units = 32", "  1. base.yaml:9:35  8", "  2. v.yaml:3:29  16",
                                            "  3. --set layers.1.units  32  <- wins"])
    code, out, _ = run(["explain", "v.yaml", "optimizers.all.beta_1"], capsys, tmp_path)
    assert out.splitlines() == ["optimizers.all.beta_1 = 0.9", "  1. default  0.9  <- wins"]
    code, _, err = run(["explain", "v.yaml", "layers[fc2].unit"], capsys, tmp_path)
    assert code == 1 and err.splitlines()[0] == ("v.yaml: error: no key 'layers[fc2].unit' in the resolved spec; "
                                                 "did you mean 'layers[fc2].units'?")


def test_the_family_example_validates_and_its_variants_differ_as_declared() -> None:
    wide, folder, bf16 = (load_spec(FAMILY / f"{n}.yaml").spec for n in ("wide", "folder", "bf16"))
    assert [layer.name for layer in wide.layers] == ["conv1", "bn1", "relu1", "pool1", "flat", "head/fc", "head/fc2",
                                                     "head/out"]
    assert [layer.name for layer in folder.layers][:2] == ["scale", "conv1"]
    assert str(bf16.train.precision) in ("mixed_bfloat16", "Precision.mixed_bfloat16")


@pytest.mark.slow
def test_a_family_variant_trains(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Through the CLI's main in this process: a child's start-up (TensorFlow's import) was most of the time."""
    spec = FAMILY / "wide.yaml"
    code, out, err = run(["train", str(spec), "--steps", "3", "--set", f"checkpoint.dir={tmp_path / 'run'}"], capsys,
                         tmp_path)
    assert code == 0, err[-3000:]
    assert "training family_wide: step 0 -> 3" in out
    assert (tmp_path / "run" / "ckpt-00000003.index").exists() or any((tmp_path / "run").glob("ckpt-00000003*"))


def test_set_selects_a_layer_by_name(tmp_path: Path, capsys) -> None:
    """`--set layers[NAME].KEY=VALUE`, the selector `explain` takes, works on the merged spec."""
    from specgen.spec.overrides import load_with_overrides

    write(tmp_path, {"base.yaml": BASE, "v.yaml": "extends: base.yaml\nname: v\n"})
    loaded = load_with_overrides(tmp_path / "v.yaml", ["layers[fc2].units=24", "layers[out].units=3"])
    assert [(layer.name, layer.units) for layer in loaded.spec.layers] == [("fc1", 8), ("fc2", 24), ("out", 3)]
    code, out, _ = run(["explain", "v.yaml", "layers[fc2].units", "--set", "layers[fc2].units=24"], capsys, tmp_path)
    assert out.splitlines()[-1] == "  2. --set layers[fc2].units  24  <- wins"
    code, _, err = run(["validate", "v.yaml", "--set", "layers[fc3].units=24"], capsys, tmp_path)
    assert code == 1 and err.splitlines()[0] == ("--set layers[fc3].units=24: error: no item named 'fc3' in 'layers'; "
                                                 "did you mean 'fc2'?")
