"""`extends` and `explain` against hostile or mistaken input: bounded work, one positioned line per refusal."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_helpers import run_cli
from test_compose import BASE, write

from specgen.spec.compose import MAX_BASES, MAX_DEPTH, ComposedSourceMap, load_composed

run = run_cli
ROOT = Path(__file__).resolve().parents[1]


def refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], files: dict[str, str], spec: str = "v.yaml") -> list[str]:
    """stderr lines of `validate` on a spec that must be refused, checking that nothing was printed or written."""
    write(tmp_path, files)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    code, out, err = run(["validate", spec], capsys, tmp_path)
    assert (code, out) == (1, "")
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    return err.splitlines()


# --- bounded work -------------------------------------------------------------------------------------------------


def fan_out(width: int, levels: int) -> dict[str, str]:
    """`levels` rows of `width` distinct files, each extending every file of the row below: width**levels paths
    from the top to BASE, which is merged once per file (and was merged once per path)."""
    files = {"base.yaml": BASE}
    for level in range(levels):
        below = [f"f{level + 1}_{i}.yaml" for i in range(width)] if level + 1 < levels else ["base.yaml"]
        for i in range(width):
            files[f"f{level}_{i}.yaml"] = f"abstract: true\nextends: [{', '.join(below)}]\n"
    files["v.yaml"] = f"extends: [{', '.join(f'f0_{i}.yaml' for i in range(width))}]\nname: v\n"
    return files


@pytest.mark.parametrize(("width", "levels"), [(3, 5), (4, 8)])  # 243 paths (slow before), 65536 (never finished)
def test_a_fan_out_of_bases_merges_each_file_once(tmp_path: Path, capsys, width: int, levels: int) -> None:
    write(tmp_path, fan_out(width, levels))
    code, out, _ = run(["explain", "v.yaml", "layers[fc1].units"], capsys, tmp_path)
    assert (code, out.splitlines()) == (0, ["layers[fc1].units = 8", "  1. base.yaml:8:45  8  <- wins"])
    data, source = load_composed(tmp_path / "v.yaml")
    assert isinstance(source, ComposedSourceMap) and data["layers"][0]["units"] == 8
    # Each place that wrote a value is in its history once: the 38 values and mappings under base.yaml's top (its
    # `abstract` is its own), v.yaml's `name`, and the top-level mapping of each file. A history kept per path held
    # width**levels settings for each value of base.yaml.
    files = width * levels + 2
    assert sum(len(settings) for _, settings in source.tree.flat()) == 38 + 1 + files
    assert len(source.tree.settings) == files


def test_a_base_listed_twice_in_one_list_is_refused_at_the_second(tmp_path: Path, capsys) -> None:
    lines = refused(tmp_path, capsys, {"base.yaml": BASE, "v.yaml": "extends: [base.yaml, ./base.yaml]\nname: v\n"})
    assert lines == ["v.yaml:1:22: error: extends: './base.yaml' is already listed (at v.yaml:1:11); each base "
                     "applies once: list it once", "1 error found"]


def test_an_extends_list_longer_than_the_bound_is_refused(tmp_path: Path, capsys) -> None:
    files = {f"m{i}.yaml": "abstract: true\n" for i in range(MAX_BASES + 1)}
    files["v.yaml"] = f"name: v\nextends: [{', '.join(files)}]\n"
    assert refused(tmp_path, capsys, files) == [f"v.yaml:2:10: error: extends: {MAX_BASES + 1} bases in one list; at "
                                                f"most {MAX_BASES}", "1 error found"]


@pytest.mark.parametrize("order", ["deep first", "long path first"])
def test_a_cached_base_still_counts_its_depth(tmp_path: Path, capsys, order: str) -> None:
    """d0..d10 is a chain of 11 files; reached from the top (12 files) it is fine, reached through c0..c5 (18) it is
    too deep, whichever way the loader met it first (the second meeting reuses the first's merged tree)."""
    files = {f"d{i}.yaml": f"abstract: true\nextends: d{i + 1}.yaml\n" for i in range(10)}
    files |= {"d10.yaml": BASE, "c5.yaml": "abstract: true\nextends: d0.yaml\n"}
    files |= {f"c{i}.yaml": f"abstract: true\nextends: c{i + 1}.yaml\n" for i in range(5)}
    bases = "d0.yaml, c0.yaml" if order == "deep first" else "c0.yaml, d0.yaml"
    lines = refused(tmp_path, capsys, {**files, "v.yaml": f"extends: [{bases}]\nname: v\n"})
    assert len(lines) == 2 and lines[1] == "1 error found"
    assert f"error: extends: the chain of bases is deeper than {MAX_DEPTH} files (via " in lines[0]
    if order == "deep first":  # refused where the cached d0 would make the chain too deep
        assert lines[0].startswith("c5.yaml:2:10: error:")


# --- what a base must be ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "problem"), [
    ("- 1\n- 2\n", "is not a spec mapping (the file holds a list)"),
    ("hello\n", "is not a spec mapping (the file holds a single value)"),
    ("# only a comment\n", "is empty"),
])
def test_a_base_that_is_not_a_mapping_is_refused_at_its_entry(tmp_path: Path, capsys, text: str,
                                                              problem: str) -> None:
    files = {"base.yaml": BASE, "b.yaml": text, "v.yaml": "extends: [base.yaml, b.yaml]\nname: v\n"}
    assert refused(tmp_path, capsys, files) == [f"v.yaml:1:22: error: extends: 'b.yaml' {problem}; expected a "
                                                "mapping of spec sections", "1 error found"]


def test_a_base_that_cannot_be_read_is_refused_at_its_entry(tmp_path: Path, capsys) -> None:
    (tmp_path / "dir.yaml").mkdir()
    os.mkfifo(tmp_path / "fifo.yaml")  # read naively, it would block forever
    (tmp_path / "huge.yaml").write_text("a: " + "x" * (1 << 20) + "\n")
    long = "a" * 5000 + ".yaml"
    expected = {
        "dir.yaml": "'dir.yaml' is refused: the spec path is a folder, not a regular file",
        "fifo.yaml": "'fifo.yaml' is refused: the spec path is a FIFO (named pipe), not a regular file",
        "huge.yaml": "'huge.yaml' is refused: the file is 1048580 bytes; specs are limited to 1048576 bytes (is "
                     "this really a spec?)",
        long: f"'{'a' * 80}…' (5005 characters) is refused: File name too long",
    }
    for base, problem in expected.items():
        lines = refused(tmp_path, capsys, {"mid.yaml": f"abstract: true\nextends: {base}\n",
                                           "v.yaml": "name: v\nextends: mid.yaml\n"})
        assert lines == [f"mid.yaml:2:10: error: extends: {problem} (via v.yaml:2:10)", "1 error found"]


def test_a_problem_inside_a_base_stays_at_its_line_and_names_the_chain(tmp_path: Path, capsys) -> None:
    lines = refused(tmp_path, capsys, {"b.yaml": "abstract: true\ntrain: {seed: 1, seed: 2}\n",
                                       "v.yaml": "name: v\nextends: b.yaml\n"})
    assert lines == ["b.yaml:2:18: error: duplicate key 'seed'; YAML keeps only one of them, so write it once "
                     "(via v.yaml:2:10)", "1 error found"]


@pytest.mark.parametrize(("extends", "message"), [
    ("[]", "extends: the list is empty; expected at least one spec file (leave `extends` out for a spec with no "
           "base)"),
    ("null", "extends: expected a spec file (a path relative to this file) or a list of them; received null"),
])
def test_an_empty_or_null_extends_is_refused(tmp_path: Path, capsys, extends: str, message: str) -> None:
    files = {"v.yaml": f"extends: {extends}\n" + BASE.replace("abstract: true\n", "name: v\n")}
    assert refused(tmp_path, capsys, files) == [f"v.yaml:1:10: error: {message}", "1 error found"]


# --- named lists: duplicates, `remove` --------------------------------------------------------------------------


def test_a_variant_listing_a_layer_twice_is_refused(tmp_path: Path, capsys) -> None:
    files = {"base.yaml": BASE, "v.yaml": "extends: base.yaml\nname: v\nlayers:\n  - {name: fc2, units: 3}\n"
                                          "  - {name: fc2, units: 5}\n"}
    assert refused(tmp_path, capsys, files) == [
        "v.yaml:5:12: error: name: 'fc2' is listed twice in this list (first at v.yaml:4:12); an item is changed "
        "in one place: merge the two into one", "1 error found"]


@pytest.mark.parametrize(("item", "line"), [
    ("{name: fc2, remove: null}", "v.yaml:3:30: error: remove: expected true; received null"),
    ("{name: fc2, remove: true, after: fc1}",
     "v.yaml:3:43: error: after: an item with `remove: true` takes only `name`; drop 'after' or `remove`"),
    ("{name: fc2, remove: true, units: 3}",
     "v.yaml:3:43: error: units: an item with `remove: true` takes only `name`; drop 'units' or `remove`"),
])
def test_remove_takes_true_and_nothing_else(tmp_path: Path, capsys, item: str, line: str) -> None:
    files = {"base.yaml": BASE, "v.yaml": f"extends: base.yaml\nname: v\nlayers: [{item}]\n"}
    assert refused(tmp_path, capsys, files) == [line, "1 error found"]


def test_removing_a_layer_that_the_next_one_reads_implicitly_is_an_error_at_the_reader(tmp_path: Path,
                                                                                      capsys) -> None:
    files = {"base.yaml": BASE, "v.yaml": "extends: base.yaml\nname: v\nlayers: [{name: fc2, remove: true}]\n"}
    assert refused(tmp_path, capsys, files) == [
        "base.yaml:10:12: error: layer 'out' reads 'fc2' implicitly (as the layer before it), and v.yaml:3:30 "
        "removes 'fc2'; give 'out' an explicit `input:` (the layer before it is now 'fc1') (via v.yaml:1:10)",
        "1 error found"]
    files["v.yaml"] = "extends: base.yaml\nname: v\nlayers: [{name: fc1, remove: true}, {name: fc2, remove: true}]\n"
    assert refused(tmp_path, capsys, files)[0] == (  # the reader of the last one removed
        "base.yaml:10:12: error: layer 'out' reads 'fc2' implicitly (as the layer before it), and v.yaml:3:57 "
        "removes 'fc2'; give 'out' an explicit `input:` (it is now the first layer) (via v.yaml:1:10)")


@pytest.mark.parametrize("layers", [
    "[{name: fc2, remove: true}, {name: out, input: fc1}]",  # the fix the error names
    "[{name: fc2, remove: true}, {name: fc3, op: dense, units: 4, after: fc1}]",  # a layer put in its place
    "[{name: out, remove: true}]",  # the last layer: nothing reads it implicitly
])
def test_a_removal_that_rewires_nothing_silently_is_accepted(tmp_path: Path, capsys, layers: str) -> None:
    outputs = "outputs: {y: fc2}\n" if "out, remove" in layers else ""
    write(tmp_path, {"base.yaml": BASE, "v.yaml": f"extends: base.yaml\nname: v\n{outputs}layers: {layers}\n"})
    code, out, err = run(["validate", "v.yaml"], capsys, tmp_path)
    assert (code, err) == (0, "") and out.startswith("ok: v.yaml (v: ")


@pytest.mark.parametrize("top", [
    "layers: [{name: out, input: fc1}]",  # the fix the error names, given by the file that extends the remover
    "layers: [{name: fc3, op: dense, units: 4, after: fc1}]",  # a layer of its own put in the removed one's place
])
def test_a_removal_in_a_mixin_is_judged_on_the_whole_spec(tmp_path: Path, capsys, top: str) -> None:
    """The remover is one base of several; the file that extends them mends the wiring: no error (it was one, raised
    while the mixin was merged, before the file's own keys applied). Without the mend the error stands."""
    files = {"base.yaml": BASE, "noflat.yaml": "abstract: true\nlayers: [{name: fc2, remove: true}]\n",
             "v.yaml": f"extends: [base.yaml, noflat.yaml]\nname: v\n{top}\n"}
    write(tmp_path, files)
    code, out, err = run(["validate", "v.yaml"], capsys, tmp_path)
    assert (code, err) == (0, "") and out.startswith("ok: v.yaml (v: ")
    files["v.yaml"] = "extends: [base.yaml, noflat.yaml]\nname: v\n"
    assert refused(tmp_path, capsys, files)[0] == (
        "base.yaml:10:12: error: layer 'out' reads 'fc2' implicitly (as the layer before it), and noflat.yaml:2:30 "
        "removes 'fc2'; give 'out' an explicit `input:` (the layer before it is now 'fc1') (via v.yaml:1:11)")


def test_a_base_reached_through_a_link_and_directly_is_one_file_applied_once(tmp_path: Path, capsys) -> None:
    """A base is the real file (docs/spec.md): a link to it is the same base, whose `extends` counts from its own
    folder, so both routes read common/inner.yaml and it applies once (each route once merged its own copy, and
    the link's read v/inner.yaml beside the link). b.yaml lists mid.yaml, which extends common/base.yaml, before
    common/base.yaml itself: no order keeps both, refused as any such list."""
    seed = BASE.split("seed: ")[1].split("}")[0]
    write(tmp_path, {"common/inner.yaml": BASE.replace(f"seed: {seed}}}", "seed: 111}"),
                     "v/inner.yaml": BASE.replace(f"seed: {seed}}}", "seed: 222}"),
                     "common/base.yaml": "abstract: true\nextends: inner.yaml\n",
                     "mid.yaml": "abstract: true\nextends: v/base.yaml\n",
                     "a.yaml": "extends: [common/base.yaml, mid.yaml]\nname: a\n",
                     "b.yaml": "extends: [mid.yaml, common/base.yaml]\nname: b\n"})
    (tmp_path / "v" / "base.yaml").symlink_to(tmp_path / "common" / "base.yaml")
    code, out, _ = run(["explain", "a.yaml", "train.seed"], capsys, tmp_path)
    assert (code, out.splitlines()[:2]) == (0, ["train.seed = 111", "  1. common/inner.yaml:14:62  111  <- wins"])
    code, _, err = run(["validate", "b.yaml"], capsys, tmp_path)
    assert (code, err.splitlines()[0].split(": error: ")[1].startswith(
        "extends: 'common/base.yaml' is a base of 'mid.yaml' and must come first")) == (1, True)


# --- explain ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["", "layers[", "layers[fc1", "layers[]", "train..seed", ".train", "train."])
def test_explain_refuses_a_malformed_key_as_a_usage_error(tmp_path: Path, capsys, key: str) -> None:
    write(tmp_path, {"base.yaml": BASE, "v.yaml": "extends: base.yaml\nname: v\n"})
    code, out, err = run(["explain", "v.yaml", key], capsys, tmp_path)
    assert (code, out) == (2, "")
    assert err == (f"specgen explain: error: KEY '{key}' is not a key path; expected keys joined by '.', with [NAME] "
                   "selecting a named list item: train.batch_size, layers[conv1].filters, layers.0.units\n")


def test_explain_lists_the_value_a_null_removed_and_the_null(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"base.yaml": BASE + "checkpoint: {dir: r, keep: 5}\n",
                     "v.yaml": "extends: base.yaml\nname: v\ncheckpoint: {keep: null}\n"})
    code, out, _ = run(["explain", "v.yaml", "checkpoint.keep"], capsys, tmp_path)
    assert (code, out.splitlines()) == (0, ["checkpoint.keep = 3", "  1. base.yaml:15:28  5",
                                            "  2. v.yaml:3:20  null (removes the bases' value)",
                                            "  3. default  3  <- wins"])
    code, out, _ = run(["validate", "v.yaml", "--resolved"], capsys, tmp_path)
    assert "  keep: 3  # default" in out.splitlines()
    code, out, _ = run(["explain", "v.yaml", "checkpoint.keep", "--set", "checkpoint.keep=4"], capsys, tmp_path)
    assert out.splitlines()[2:] == ["  2. v.yaml:3:20  null (removes the bases' value)",
                                    "  3. --set checkpoint.keep  4  <- wins"]  # the default never applied


def test_explain_of_a_removed_key_without_default(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"base.yaml": BASE.replace("seed: 0}", "seed: 0, ema: {decay: 0.9}}"),
                     "v.yaml": "extends: base.yaml\nname: v\ntrain: {ema: null}\n"})
    code, out, _ = run(["explain", "v.yaml", "train.ema"], capsys, tmp_path)
    assert (code, out.splitlines()) == (0, ["train.ema = (unset: removed, and it has no default)",
                                            "  1. base.yaml:14:70  {decay: 0.9}",
                                            "  2. v.yaml:3:14  null (removes the bases' value)"])
    code, out, _ = run(["validate", "v.yaml", "--resolved"], capsys, tmp_path)
    assert code == 0 and "ema" not in out


def test_a_key_a_later_base_removes_is_removed_whoever_set_it(tmp_path: Path, capsys) -> None:
    """`extends: [base, a, b]` applies the files in one order, each once: base, a, then b's own base d, then b.
    b's `keep: null` comes after a's 7 and removes it, as `keep: 9` there would replace it (b once applied as its
    own merged tree, which had no keep, and a's 7 stayed)."""
    write(tmp_path, {"base.yaml": BASE, "d.yaml": "abstract: true\ncheckpoint: {dir: r, keep: 2}\n",
                     "b.yaml": "abstract: true\nextends: d.yaml\ncheckpoint: {keep: null}\n",
                     "a.yaml": "abstract: true\ncheckpoint: {keep: 7}\n",
                     "v.yaml": "extends: [base.yaml, a.yaml, b.yaml]\nname: v\n"})
    code, out, _ = run(["explain", "v.yaml", "checkpoint.keep"], capsys, tmp_path)
    assert (code, out.splitlines()) == (0, ["checkpoint.keep = 3", "  1. a.yaml:2:20  7", "  2. d.yaml:2:28  2",
                                            "  3. b.yaml:3:20  null (removes the bases' value)",
                                            "  4. default  3  <- wins"])


def test_a_removed_key_written_again_comes_last_as_before_removals_were_kept(tmp_path: Path, capsys) -> None:
    """The data's key order (which orders dict sections such as `optimizers` in the generated code) is that of a key
    deleted then added: keeping the removed key's history must not move it back to its first place."""
    write(tmp_path, {"base.yaml": BASE, "m.yaml": "abstract: true\ntrain: {batch_size: null}\n",
                     "v.yaml": "extends: [base.yaml, m.yaml]\nname: v\ntrain: {batch_size: 8}\n"})
    data, _ = load_composed(tmp_path / "v.yaml")
    assert list(data["train"]) == ["epochs", "metrics", "seed", "batch_size"]
    code, out, _ = run(["explain", "v.yaml", "train.batch_size"], capsys, tmp_path)
    assert code == 0 and out.splitlines() == ["train.batch_size = 8", "  1. base.yaml:14:21  4",
                                "  2. m.yaml:2:21  null (removes the bases' value)", "  3. v.yaml:3:21  8  <- wins"]
    lines = run(["validate", "examples/specs/family/folder.yaml", "--resolved"], capsys, ROOT)[1].splitlines()
    train = lines.index("  train:  # examples/specs/family/folder.yaml:10:10")  # `npz: null` and the like removed
    assert lines[train + 1] == "    images: ../../data/digits_folder/train  # examples/specs/family/folder.yaml:10:19"


@pytest.mark.parametrize("key", ["layers[", "", "layers..units", "layers[]", "a]b", ".train"])
def test_set_refuses_a_malformed_key_instead_of_setting_its_readable_part(tmp_path: Path, capsys, key: str) -> None:
    """`--set 'layers[=3'` read the readable part of its key, `layers`, and replaced every layer with 3."""
    write(tmp_path, {"base.yaml": BASE})
    code, out, err = run(["validate", "base.yaml", "--set", f"{key}=3"], capsys, tmp_path)
    assert (code, out) == (1, "")
    expected = ("expected KEY.PATH=VALUE, e.g. train.batch_size=32" if not key else
                f"KEY '{key}' is not a key path; expected keys joined by '.', with [NAME] selecting a named list item: "
                "train.batch_size, layers[conv1].filters, layers.0.units")
    assert err.splitlines() == [f"--set {key}=3: error: {expected}", "1 error found"]


def test_set_refuses_a_named_item_selector_on_a_mapping(tmp_path: Path, capsys) -> None:
    """`optimizers[all]` made a key named '[all]' in the optimizers mapping (then two unrelated schema errors)."""
    write(tmp_path, {"base.yaml": BASE})
    code, out, err = run(["validate", "base.yaml", "--set", "optimizers[all].learning_rate=0.1"], capsys, tmp_path)
    assert (code, out) == (1, "")
    assert err.splitlines() == ["--set optimizers[all].learning_rate=0.1: error: 'optimizers' is a mapping, not a list "
                                "of named items: write optimizers.all, not optimizers[all]", "1 error found"]
    code, _, err = run(["validate", "base.yaml", "--set", "train[seed]=1"], capsys, tmp_path)
    assert (code, err.splitlines()[0]) == (1, "--set train[seed]=1: error: 'train' is a mapping, not a list of named "
                                              "items: write train.seed, not train[seed]")
