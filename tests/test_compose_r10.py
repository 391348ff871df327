"""Composition (`extends`, merge by name, `--set`, explain) against the round-10 findings: a base is the real file,
malformed entries and items are reported as themselves, messages name the file and the place that caused them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_helpers import run_cli

from specgen.spec.compose import cut_path

run = run_cli

BASE = """specgen: 1
name: base_model
inputs:
  x: {shape: [4], dtype: float32}
outputs:
  y: out
layers:
  - {name: h1, op: dense, units: 8, activation: relu}
  - {name: h2, op: dense, units: 8}
  - {name: h3, op: dense, units: 8}
  - {name: out, op: dense, units: 2}
train:
  batch_size: 16
  epochs: 1
  seed: 3
"""


def repo(tmp_path: Path, files: dict[str, str]) -> Path:
    """`files` written in a fresh repository (a spec extends only files of its own repository)."""
    (tmp_path / ".git").mkdir(exist_ok=True)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str]) -> list[str]:
    code, out, err = run(args, capsys, tmp_path)
    assert (code, out) == (1, "")
    return err.splitlines()[:-1]  # without the "N errors found" count


def explained(tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: str, key: str) -> list[str]:
    code, out, err = run(["explain", spec, key], capsys, tmp_path)
    assert (code, err) == (0, "")
    return out.splitlines()


# --- F1/F2: a base is the real file ---------------------------------------------------------------------------


SIBLINGS = {"base.yaml": BASE, "a.yaml": "extends: base.yaml\ntrain: {seed: 11}\n",
            "top.yaml": "extends: [a.yaml, b.yaml]\nname: top_model\n"}
SEED_11 = ["train.seed = 11", "  1. base.yaml:15:9  3", "  2. a.yaml:2:15  11  <- wins"]


def test_a_base_reached_through_a_linked_file_applies_once(tmp_path: Path, capsys) -> None:
    repo(tmp_path, {**SIBLINGS, "b.yaml": "extends: link.yaml\ntrain: {epochs: 5}\n"})
    (tmp_path / "link.yaml").symlink_to("base.yaml")
    assert explained(tmp_path, capsys, "top.yaml", "train.seed") == SEED_11  # the link's copy wrote 3 back


def test_a_base_reached_through_a_linked_folder_applies_once(tmp_path: Path, capsys) -> None:
    repo(tmp_path, {**SIBLINGS, "b.yaml": "extends: here/base.yaml\ntrain: {epochs: 5}\n"})
    (tmp_path / "here").symlink_to(".")
    assert explained(tmp_path, capsys, "top.yaml", "train.seed") == SEED_11


def test_dot_dot_after_a_link_is_resolved_as_the_os_opens_the_path(tmp_path: Path, capsys) -> None:
    repo(tmp_path, {"base.yaml": BASE.replace("seed: 3", "seed: 100"), "deep/inner/.keep": "",
                    "deep/base.yaml": BASE.replace("seed: 3", "seed: 200"), "v.yaml": "extends: lnk/../base.yaml\n"})
    (tmp_path / "lnk").symlink_to("deep/inner")
    assert (tmp_path / "lnk/../base.yaml").read_text().count("seed: 200") == 1  # what open() reads
    assert explained(tmp_path, capsys, "v.yaml", "train.seed") == ["train.seed = 200",
                                                                   "  1. deep/base.yaml:15:9  200  <- wins"]


def test_a_linked_base_reads_its_own_extends_beside_the_real_file(tmp_path: Path, capsys) -> None:
    repo(tmp_path, {"common/inner.yaml": BASE, "common/base.yaml": "abstract: true\nextends: inner.yaml\n",
                    "v/inner.yaml": BASE.replace("seed: 3", "seed: 9"), "v.yaml": "extends: v/base.yaml\n"})
    (tmp_path / "v" / "base.yaml").symlink_to(tmp_path / "common" / "base.yaml")
    assert explained(tmp_path, capsys, "v.yaml", "train.seed") == ["train.seed = 3",
                                                                   "  1. common/inner.yaml:15:9  3  <- wins"]


def test_a_missing_base_after_a_link_is_looked_for_where_the_os_looks(tmp_path: Path, capsys) -> None:
    repo(tmp_path, {"deep/inner/.keep": "", "v.yaml": "extends: lnk/../nope.yaml\n"})
    (tmp_path / "lnk").symlink_to("deep/inner")
    assert errors(tmp_path, capsys, ["validate", "v.yaml"]) == [
        "v.yaml:1:10: error: extends: 'lnk/../nope.yaml' does not exist (looked for deep/nope.yaml)"]


# --- F3: a --set rename onto a later layer's name ---------------------------------------------------------------


@pytest.mark.parametrize(("spec", "files"), [("base.yaml", {}), ("v.yaml", {"v.yaml": "extends: base.yaml\n"})])
@pytest.mark.parametrize(("renamed", "onto"), [("h1", "h3"), ("h3", "h1")])
def test_a_set_that_renames_a_layer_onto_another_names_the_override(tmp_path: Path, capsys, spec: str,
                                                                     files: dict[str, str], renamed: str,
                                                                     onto: str) -> None:
    repo(tmp_path, {"base.yaml": BASE, **files})
    override = f"layers[{renamed}].name={onto}"
    assert errors(tmp_path, capsys, ["validate", spec, "--set", override]) == [
        f"--set {override}: error: layer name '{onto}' is already used by another layer"]


# --- F4: an abstract spec requires nothing, a layer's op included ----------------------------------------------


def test_an_abstract_spec_leaves_a_layers_op_and_an_optimizers_kind_to_its_variants(tmp_path: Path, capsys) -> None:
    repo(tmp_path, {"ab.yaml": "specgen: 1\nabstract: true\nlayers:\n  - {name: h1, units: 8}\n"
                               "  - {name: out, op: dense, units: 2}\noptimizers: {o: {learning_rate: 0.1}}\n",
                    "bad.yaml": "specgen: 1\nabstract: true\nlayers:\n  - {name: h1, units: 8}\n"
                                "  - {name: out, op: dense, units: -2}\n"})
    code, out, err = run(["validate", "ab.yaml"], capsys, tmp_path)
    assert (code, out, err) == (0, "ok: ab.yaml (abstract: 3 section(s) checked; build generates nothing for it)\n", "")
    assert errors(tmp_path, capsys, ["validate", "bad.yaml"]) == [  # what it has is still checked
        "bad.yaml:5:35: error: units: received -2, expected a value > 0 (in layer 'out')"]


# --- F5: a steering key's value is reported as received -------------------------------------------------------


@pytest.mark.parametrize(("value", "shown"), [("[h1]", "[h1] (a list)"), ("{x: h1}", "{x: h1} (a mapping)"),
                                              ("null", "null"), ("true", "true (a boolean)"), ("5", "5 (int)")])
def test_after_that_is_not_a_name_says_what_it_received(tmp_path: Path, capsys, value: str, shown: str) -> None:
    repo(tmp_path, {"base.yaml": BASE,
                    "v.yaml": f"extends: base.yaml\nlayers:\n  - {{name: h9, op: dense, units: 3, after: {value}}}\n"})
    assert errors(tmp_path, capsys, ["validate", "v.yaml"]) == [
        f"v.yaml:3:44: error: after: expected the name of another item (text); received {shown}"]


def test_before_and_remove_that_are_lists_say_so(tmp_path: Path, capsys) -> None:
    repo(tmp_path, {"base.yaml": BASE, "b.yaml": "extends: base.yaml\nlayers:\n  - {name: h2, before: [h1]}\n",
                    "r.yaml": "extends: base.yaml\nlayers:\n  - {name: h2, remove: [1]}\n"})
    assert errors(tmp_path, capsys, ["validate", "b.yaml"]) == [
        "b.yaml:3:24: error: before: expected the name of another item (text); received [h1] (a list)"]
    assert errors(tmp_path, capsys, ["validate", "r.yaml"]) == [
        "r.yaml:3:24: error: remove: expected true; received [1] (a list)"]


# --- F6: a malformed item of a list merged by name is reported as itself --------------------------------------

WHY = "this list merges by name with its bases' list: each item names the item it adds or changes"


def test_an_item_without_a_name_is_reported_alone_not_as_a_list_replaced_whole(tmp_path: Path, capsys) -> None:
    repo(tmp_path, {"base.yaml": BASE, "v.yaml": "extends: base.yaml\nlayers:\n  - {name: h2, units: 16}\n"
                                                 "  - {name: 5, op: dense, units: 1}\n  - h3\n  - {op: relu}\n"})
    assert errors(tmp_path, capsys, ["validate", "v.yaml"]) == [
        f"v.yaml:4:12: error: name: expected a string ({WHY}); received 5 (int)",
        f"v.yaml:5:5: error: layers[2]: expected a mapping with a `name` ({WHY}); received 'h3' (str)",
        f"v.yaml:6:5: error: layers[3]: missing required key 'name' ({WHY})"]


# --- F7: an entry of an extends list at itself ----------------------------------------------------------------


@pytest.mark.parametrize(("text", "where"), [("extends:\n  - base.yaml\n  - 3\n", "3:5"),
                                             ("extends: [base.yaml, 3]\n", "1:22")])
def test_an_extends_entry_that_is_not_a_name_is_reported_at_itself(tmp_path: Path, capsys, text: str,
                                                                   where: str) -> None:
    repo(tmp_path, {"base.yaml": BASE, "v.yaml": text})
    assert errors(tmp_path, capsys, ["validate", "v.yaml"]) == [
        f"v.yaml:{where}: error: extends[1]: expected a spec file (a path relative to this file); received 3 (int)"]


# --- F8: a long path keeps its file name ----------------------------------------------------------------------


def test_a_long_base_path_is_cut_in_its_middle_keeping_the_file_name(tmp_path: Path, capsys) -> None:
    folder = "/".join(["d" * 200] * 6)
    repo(tmp_path, {f"{folder}/b.yaml": BASE.replace("units: 8, activation", "units: -8, activation"),
                    "v.yaml": f"extends: {folder}/b.yaml\n"})
    shown = f"{folder[:1024 - len('/b.yaml')]}…/b.yaml"
    assert errors(tmp_path, capsys, ["validate", "v.yaml"]) == [
        f"{shown}:8:34: error: units: received -8, expected a value > 0 (in layer 'h1') (via v.yaml:1:10)"]


def test_cut_path_keeps_short_paths_whole_and_the_name_of_long_ones() -> None:
    assert cut_path("a/b.yaml") == "a/b.yaml"
    assert cut_path("x" * 30 + "/name.yaml", 20) == "x" * 10 + "…/name.yaml"
    assert cut_path("y" * 30, 20) == "y" * 15 + "…" + "y" * 5  # no folder: start and end


# --- F9: explain of the composition keys ----------------------------------------------------------------------


def test_explain_answers_abstract_and_extends(tmp_path: Path, capsys) -> None:
    repo(tmp_path, {"base.yaml": "abstract: true\n" + BASE, "a.yaml": "extends: base.yaml\n",
                    "v.yaml": "extends: [base.yaml, a.yaml]\nname: v\n", "plain.yaml": BASE})
    assert explained(tmp_path, capsys, "v.yaml", "abstract") == [
        "abstract = false",
        "  1. default  false (each file's own: a base's `abstract: true` is not inherited)  <- wins"]
    assert explained(tmp_path, capsys, "v.yaml", "extends") == [
        "extends = [base.yaml, a.yaml] (the files this spec is built on, applied before its own keys: not a key of "
        "the merged spec)", "  1. v.yaml:1:10  [base.yaml, a.yaml]  <- wins"]
    assert explained(tmp_path, capsys, "plain.yaml", "extends") == [
        "extends = null (unset: the spec extends no file)", "  1. default  null  <- wins"]


# --- F10: a required key removed with a null ------------------------------------------------------------------

REMOVED = "this null removes the bases' value; give the key a value, or drop the null to keep the bases' one"


def test_a_required_key_removed_with_null_is_reported_at_the_null(tmp_path: Path, capsys) -> None:
    repo(tmp_path, {"base.yaml": BASE, "s.yaml": "extends: base.yaml\nname: e3\noutputs: null\n",
                    "l.yaml": "extends: base.yaml\nlayers:\n  - {name: h2, units: null}\n",
                    "mid.yaml": "extends: base.yaml\noutputs: null\n", "v.yaml": "extends: mid.yaml\n"})
    assert errors(tmp_path, capsys, ["validate", "s.yaml"]) == [
        f"s.yaml:3:10: error: missing required key 'outputs': {REMOVED}"]
    assert errors(tmp_path, capsys, ["validate", "l.yaml"]) == [
        f"l.yaml:3:23: error: missing required key 'units': {REMOVED} (in layer 'h2')"]
    assert errors(tmp_path, capsys, ["validate", "v.yaml"]) == [
        f"mid.yaml:2:10: error: missing required key 'outputs': {REMOVED} (via v.yaml:1:10)"]


# --- F11: --set of a mapping replaces it whole (docs/spec.md says so) -----------------------------------------


def test_a_set_of_a_mapping_replaces_it_whole(tmp_path: Path, capsys) -> None:
    repo(tmp_path, {"base.yaml": BASE, "v.yaml": "extends: base.yaml\ntrain: {seed: 7}\n"})
    code, out, _ = run(["validate", "v.yaml", "--resolved", "--set", "train={batch_size: 4}"], capsys, tmp_path)
    lines = out.splitlines()
    assert code == 0 and "  seed: 0  # default" in lines and "  epochs: 1  # default" in lines
    docs = (Path(__file__).resolve().parents[1] / "docs" / "spec.md").read_text()
    assert "`--set 'train={batch_size: 4}'` replaces the merged `train`" in docs
    assert os.path.exists(tmp_path / "v.yaml")
