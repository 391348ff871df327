"""Round 4's `explain` and `diff` findings: every place `explain` lists shows what it wrote, a value written
through a YAML alias is where the alias is, and each refusal of `diff` (REV:PATH, an empty argument, an abstract
spec, a file that is not UTF-8 or not a spec) and of `extends` outside the repository says what was wrong."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from cli_helpers import run_cli

from specgen.diagnostics import SpecError
from specgen.spec.yaml_source import parse_yaml

run = run_cli

BASE = """\
specgen: 1
abstract: true
inputs:
  image: {shape: [8, 8, 1]}
outputs:
  logits: out
layers:
  - {name: flat, op: flatten}
  - {name: h1, op: dense, units: 32, activation: relu}
  - {name: out, op: dense, units: 10}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers:
  all: {variables: ["*"], kind: adam, learning_rate: 0.01}
train: {batch_size: 32, epochs: 1, seed: 1}
data:
  train: {npz: digits.npz, features: {image: x_train}, labels: {label: y_train}}
checkpoint: {dir: runs/x, keep: 2}
"""
PLAIN = BASE.replace("abstract: true\n", "name: plain\n")


def write(folder: Path, files: dict[str, str], git_marker: bool = True) -> None:
    if git_marker:
        (folder / ".git").mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


# --- explain ------------------------------------------------------------------------------------------------


def test_a_scalar_a_later_file_replaced_with_a_mapping_keeps_its_value(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"b0.yaml": BASE,
                     "top.yaml": "extends: b0.yaml\nname: top\noptimizers:\n  all:\n    learning_rate: "
                                 "{schedule: cosine_decay, initial: 0.1, decay_steps: 100}\n"})
    code, out, err = run(["explain", "top.yaml", "optimizers.all.learning_rate"], capsys, tmp_path)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "optimizers.all.learning_rate = {alpha: 0.0, decay_steps: 100, initial: 0.1, schedule: cosine_decay, "
        "warmup_steps: 0}",
        "  1. b0.yaml:13:54  0.01",
        "  2. top.yaml:5:20  {schedule: cosine_decay, initial: 0.1, decay_steps: 100}  <- wins",
    ]


def test_a_value_written_through_an_alias_is_where_the_alias_is(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"b0.yaml": BASE, "al.yaml": "extends: b0.yaml\nname: al\ntrain:\n  seed: &s 42\n"
                                                 "layers:\n  - name: h1\n    units: *s\n"})
    code, out, err = run(["explain", "al.yaml", "layers[h1].units"], capsys, tmp_path)
    assert (code, err) == (0, "")
    assert out.splitlines() == ["layers[h1].units = 42", "  1. b0.yaml:9:34  32", "  2. al.yaml:7:12  42  <- wins"]
    code, out, _ = run(["explain", "al.yaml", "train.seed"], capsys, tmp_path)  # the anchor stays where it is
    assert out.splitlines()[-1] == "  2. al.yaml:4:9  42  <- wins"


def test_each_use_of_an_alias_has_its_own_position() -> None:
    text = "a: &x {b: 1, c: &y [1, 2]}\nd: *x\ne: [*y, *y]\nf: {<<: *x, g: 2}\nh: [&z 5, *z, {k: *z}]\n"
    data, source = parse_yaml(text, "t.yaml")
    assert data["d"] == {"b": 1, "c": [1, 2]} and data["e"] == [[1, 2], [1, 2]] and data["h"] == [5, 5, {"k": 5}]
    at = {path: (p.line, p.col) for path in [("d",), ("e", 0), ("e", 1), ("h", 1), ("h", 2, "k"), ("d", "b"),
                                               ("f", "b"), ("f", "g")] if (p := source.position(path))}
    assert at == {("d",): (2, 4), ("e", 0): (3, 5), ("e", 1): (3, 9), ("h", 1): (5, 11), ("h", 2, "k"): (5, 19),
                  ("d", "b"): (1, 11), ("f", "b"): (1, 11), ("f", "g"): (4, 16)}  # inside an alias: the anchor's


def test_how_a_value_is_written_is_still_judged_at_its_anchor() -> None:
    with pytest.raises(SpecError) as caught:  # `010` reads differently in YAML 1.1 and 1.2: said once per use
        parse_yaml("a: &n 010\nb: *n\n", "t.yaml")
    assert [str(d).split(": received")[0] for d in caught.value.diagnostics] == ["t.yaml:1:4: error: a",
                                                                                  "t.yaml:1:4: error: b"]
    data, _ = parse_yaml("a: &n !!str 010\nb: *n\n", "t.yaml")  # an explicit tag asks for that reading, via *n too
    assert data == {"a": "010", "b": "010"}  # (`!!bool no` is refused: YAML 1.2 has no such boolean)


def test_a_type_error_through_an_alias_points_at_the_alias(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"v.yaml": PLAIN.replace("name: plain\n", "name: plain\ndoc: &d text\n")
                     .replace("units: 32,", "units: *d,")})
    code, _, err = run(["validate", "v.yaml"], capsys, tmp_path)
    assert code == 1
    assert err.splitlines()[0] == "v.yaml:10:34: error: units: expected an integer, received 'text' (str) (in layer 'h1')"


# --- diff: refusals -----------------------------------------------------------------------------------------


def test_an_empty_argument_is_a_usage_error_naming_it(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"a.yaml": PLAIN})
    with pytest.raises(SystemExit) as exited:
        run(["diff", "a.yaml", ""], capsys, tmp_path)
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.splitlines()[-1] == ("specgen diff: error: argument new: received ''; expected a spec file, REV:PATH "
                                    "(read through git) or a run folder")


def test_an_abstract_spec_is_positioned_at_its_flag(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"b0.yaml": BASE, "a.yaml": PLAIN})
    code, out, err = run(["diff", "b0.yaml", "a.yaml"], capsys, tmp_path)
    assert (code, out) == (1, "")
    assert err.splitlines() == ["b0.yaml:2:1: error: abstract: true: the spec exists only to be extended by other "
                                "specs; diff a spec that extends it", "1 error found"]


def test_a_file_not_utf8_names_the_line_and_column_of_its_first_bad_byte(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"a.yaml": PLAIN})
    (tmp_path / "latin1.yaml").write_bytes(b'specgen: 1\r\nname: "caf\xe9"\n')
    code, _, err = run(["diff", "a.yaml", "latin1.yaml"], capsys, tmp_path)
    assert code == 1
    assert err.splitlines() == ["latin1.yaml:2:11: error: the file is not UTF-8 text: invalid continuation byte "
                                "(byte 0xe9); save it as UTF-8", "1 error found"]


def test_a_file_that_is_not_a_spec_is_described_not_echoed(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"a.yaml": PLAIN, "notes.yaml": "secret-token " * 100 + "\n", "list.yaml": "- 1\n- 2\n"})
    code, _, err = run(["diff", "a.yaml", "notes.yaml"], capsys, tmp_path)
    assert code == 1 and "secret" not in err
    assert err.splitlines()[0] == ("notes.yaml:1:1: error: a spec is a mapping of sections; received a string of "
                                   "1299 characters (plain text, not YAML keys and values)")
    code, _, err = run(["validate", "list.yaml"], capsys, tmp_path)
    assert err.splitlines()[0] == "list.yaml:1:1: error: a spec is a mapping of sections; received a list of 2 items"


# --- REV:PATH -----------------------------------------------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("needs git")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    top = tmp_path / "repo"
    write(top, {"specs/base.yaml": BASE, "specs/v.yaml": "extends: base.yaml\nname: v\n",
                "specs/gone.yaml": "extends: nothere.yaml\nname: g\n",
                "specs/vlink.yaml": "extends: link.yaml\nname: lk\n",
                "specs/vin.yaml": "extends: inlink.yaml\nname: vin\n"}, git_marker=False)
    (tmp_path / "outside.yaml").write_text("password: hunter2\n")
    (top / "specs" / "link.yaml").symlink_to(tmp_path / "outside.yaml")  # absolute: outside the repository
    (top / "specs" / "inlink.yaml").symlink_to("base.yaml")  # relative, inside: read as in the work tree
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "one"]):
        subprocess.run(["git", *args], cwd=top, check=True, capture_output=True, env=env)
    return top


def test_an_unknown_revision_is_named(repo: Path, capsys) -> None:
    code, _, err = run(["diff", "specs/v.yaml", "nosuch:specs/v.yaml"], capsys, repo)
    assert code == 1
    assert err.splitlines() == ["nosuch:specs/v.yaml: error: unknown revision 'nosuch'; expected a commit, branch or "
                                "tag of this repository", "1 error found"]
    code, _, err = run(["diff", "specs/v.yaml", "HEAD~5:specs/v.yaml"], capsys, repo)
    assert err.splitlines()[0] == ("HEAD~5:specs/v.yaml: error: unknown revision 'HEAD~5'; expected a commit, branch "
                                   "or tag of this repository")


def test_a_revision_names_its_files_as_rev_path_never_a_temporary_folder(repo: Path, capsys) -> None:
    code, _, err = run(["diff", "specs/v.yaml", "HEAD:specs/vlink.yaml"], capsys, repo)
    assert code == 1 and "hunter2" not in err and "specgen-diff-" not in err
    assert err.splitlines()[0] == ("HEAD:specs/vlink.yaml:1:10: error: extends: 'link.yaml' is a link to a file outside "
                                   "the repository (at HEAD); a spec extends only files of its own repository")
    code, _, err = run(["diff", "specs/v.yaml", "specs/vlink.yaml"], capsys, repo)  # the work tree says the same
    assert err.splitlines()[0] == ("specs/vlink.yaml:1:10: error: extends: 'link.yaml' is a link to a file outside "
                                   "the repository (.); a spec extends only files of its own repository")
    code, _, err = run(["diff", "specs/v.yaml", "HEAD:specs/gone.yaml"], capsys, repo)
    assert err.splitlines()[0] == ("HEAD:specs/gone.yaml:1:10: error: extends: 'nothere.yaml' does not exist (looked "
                                   "for HEAD:specs/nothere.yaml)")
    code, out, err = run(["diff", "specs/v.yaml", "HEAD:specs/vin.yaml"], capsys, repo)  # a link inside is read
    assert (code, err) == (0, "") and "NEW HEAD:specs/vin.yaml (vin)" in out


def test_an_error_in_a_revisions_base_is_named_rev_path(repo: Path, capsys) -> None:
    (repo / "specs" / "base.yaml").write_text(BASE.replace("batch_size: 32", "batch_size: -1"))
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "two"], cwd=repo, check=True)
    (repo / "specs" / "base.yaml").write_text(BASE)
    code, _, err = run(["diff", "specs/v.yaml", "HEAD:specs/v.yaml"], capsys, repo)
    assert code == 1
    assert err.splitlines()[0] == ("HEAD:specs/base.yaml:14:21: error: batch_size: received -1, expected a value > 0 "
                                   "(via HEAD:specs/v.yaml:1:10)")


# --- extends without .git -----------------------------------------------------------------------------------


def test_outside_the_spec_folder_without_git_says_why_and_what_to_do(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"specs/base.yaml": BASE, "sweep/v.yaml": "extends: ../specs/base.yaml\nname: v\n"},
          git_marker=False)
    code, _, err = run(["validate", "sweep/v.yaml"], capsys, tmp_path)
    assert code == 1
    assert err.splitlines() == [
        "sweep/v.yaml:1:10: error: extends: '../specs/base.yaml' is outside the repository (sweep: no .git above the "
        "spec, so its own folder); a spec extends only files of its own repository: run it from a git checkout, or "
        "flatten it there with `specgen validate sweep/v.yaml --resolved > flat.yaml` and use flat.yaml beside it",
        "1 error found"]
    (tmp_path / ".git").mkdir()  # the advice works: in a checkout it validates, and its flat copy needs no base
    code, out, _ = run(["validate", "sweep/v.yaml", "--resolved"], capsys, tmp_path)
    assert code == 0
    shutil.rmtree(tmp_path / ".git")
    (tmp_path / "sweep" / "flat.yaml").write_text(out)
    code, out, err = run(["validate", "sweep/flat.yaml"], capsys, tmp_path)
    assert (code, err) == (0, "") and out.startswith("ok: sweep/flat.yaml (v: 3 layers")


# --- name rules ---------------------------------------------------------------------------------------------


def test_a_block_layer_name_rule_says_ascii() -> None:
    from test_blocks import STACK, errors, pos

    text = STACK.replace("{name: bn, op: batch_norm}", "{name: λ_名, op: batch_norm}", 1)
    assert f"{pos(text, 'λ_名')}: error: block 'unit': layer name 'λ_名' is not a layer name (parts of an ASCII letter, " \
           "then ASCII letters and digits with single '_', joined by '/'); names cannot be parameters" in errors(text)


# --- REV:PATH: a crafted tree writes nothing outside the temporary copy ---------------------------------------
# `git mktree` writes trees no checkout holds: a link and a folder of one name, a name twice, a `..` part. Copying
# such a tree must refuse it in one line naming REV:PATH, leave the folder a link points at empty, and remove the
# temporary copy (tempfile's folder is pointed at `tmp`, so anything left behind, or written beside it, shows).

Entry = tuple[str, str, "str | list[Entry]"]  # mode, name, a blob's text or a folder's entries


def _tree(top: Path, entries: list[Entry]) -> str:
    lines = []
    for mode, name, value in entries:
        if isinstance(value, list):
            lines.append(f"040000 tree {_tree(top, value)}\t{name}\n")
        else:
            oid = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=top, input=value.encode(), check=True,
                                 capture_output=True).stdout.decode().strip()
            lines.append(f"{mode} blob {oid}\t{name}\n")
    return subprocess.run(["git", "mktree"], cwd=top, input="".join(lines).encode(), check=True,
                          capture_output=True).stdout.decode().strip()


@pytest.fixture
def crafted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """(repository, branch maker): each branch one commit whose tree holds the given entries and `main.yaml`."""
    if shutil.which("git") is None:
        pytest.skip("needs git")
    top = tmp_path / "repo"
    write(top, {"main.yaml": PLAIN}, git_marker=False)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "one"]):
        subprocess.run(["git", *args], cwd=top, check=True, capture_output=True, env=env)
    (tmp_path / "outside").mkdir()
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))

    def branch(name: str, entries: list[Entry]) -> str:
        tree = _tree(top, [("100644", "main.yaml", PLAIN), *entries])
        commit = subprocess.run(["git", "commit-tree", tree, "-m", "x"], cwd=top, check=True, capture_output=True,
                                env=env).stdout.decode().strip()
        subprocess.run(["git", "branch", name, commit], cwd=top, check=True)
        return f"{name} ({commit[:12]})"

    return top, branch


def _refused_alone(repo: Path, side: str, capsys, tmp_path: Path) -> list[str]:
    code, out, err = run(["diff", "HEAD:main.yaml", side], capsys, repo)
    assert (code, out) == (1, "") and "specgen-diff-" not in err and str(tmp_path) not in err
    assert sorted(os.listdir(tmp_path / "outside")) == [] and sorted(os.listdir(tmp_path / "tmp")) == []
    return err.splitlines()


@pytest.mark.parametrize(("link", "folder"), [("d.yaml", "d.yaml"), ("D.yaml", "d.yaml")])
def test_a_link_and_a_folder_of_one_name_write_nothing_through_the_link(crafted, tmp_path: Path, capsys,
                                                                        link: str, folder: str) -> None:
    repo, branch = crafted  # before: `outside/e.yaml -> /etc/hostname` was created and the diff succeeded
    at = branch("evil", [("120000", link, str(tmp_path / "outside")),
                         ("040000", folder, [("120000", "e.yaml", "/etc/hostname")])])
    both = ("both a link and a folder named 'd.yaml'" if link == folder else
            "a link 'D.yaml' and a folder 'd.yaml' (one name where case is ignored)")
    assert _refused_alone(repo, "evil:main.yaml", capsys, tmp_path) == [
        f"evil:main.yaml: error: {at} holds {both}, the folder holding 'd.yaml/e.yaml'; such a tree comes only from a "
        "crafted commit, and specgen writes nothing through a link", "1 error found"]


def test_a_spec_below_a_link_of_its_folders_name_names_the_tree_not_a_path(crafted, tmp_path: Path, capsys) -> None:
    repo, branch = crafted  # before: "specgen: error: /…/outside: a part of its path is a file, not a folder"
    at = branch("evil2", [("120000", "d.yaml", str(tmp_path / "outside")),
                          ("040000", "d.yaml", [("100644", "main.yaml", PLAIN)])])
    assert _refused_alone(repo, "evil2:d.yaml/main.yaml", capsys, tmp_path) == [
        f"evil2:d.yaml/main.yaml: error: {at} holds both a link and a folder named 'd.yaml', the folder holding "
        "'d.yaml/main.yaml'; such a tree comes only from a crafted commit, and specgen writes nothing through a link",
        "1 error found"]


@pytest.mark.parametrize(("entries", "problem"), [
    ([("100644", "main.yaml", "name: other\n")], "holds 'main.yaml' twice; such a tree comes only from a crafted "
                                                  "commit, and is not read"),
    ([("120000", "main.yaml", "/etc/hostname")], "holds 'main.yaml' twice; such a tree comes only from a crafted "
                                                  "commit, and is not read"),
    ([("040000", "..", [("100644", "x.yaml", PLAIN)])], "holds '../x.yaml', which has a part '..'; a revision's "
                                                         "files are read only under plain names"),
    ([("040000", ".GIT", [("100644", "x.yaml", PLAIN)])], "holds '.GIT/x.yaml', which has a part '.GIT'; a "
                                                           "revision's files are read only under plain names"),
    ([("100644", "a" * 251 + ".yaml", PLAIN)], f"holds '{'a' * 80}…' (256 characters), a part of which is longer "
                                                "than 255 bytes; no file system takes such a name"),
    ([("040000", "b" * 255, [("040000", "c" * 255, [("040000", "d" * 255, [("100644", "x.yaml", PLAIN)])])])],
     f"holds '{'b' * 80}…' (774 characters), a name longer than 768 bytes, the most read for one name"),
], ids=["twice", "a-file-and-a-link", "dot-dot", "dot-git", "long-part", "long-name"])
def test_a_tree_no_checkout_holds_is_refused_in_one_line(crafted, tmp_path: Path, capsys, entries: list[Entry],
                                                         problem: str) -> None:
    repo, branch = crafted  # before: `..` wrote beside the copy, `.GIT` broke its `.git` marker, long names gave
    at = branch("odd", entries)  # an OSError naming the temporary folder, a name twice read whichever came last
    assert _refused_alone(repo, "odd:main.yaml", capsys, tmp_path) == [f"odd:main.yaml: error: {at} {problem}",
                                                                        "1 error found"]


def test_a_copy_never_writes_below_a_link_its_names_did_not_foresee(tmp_path: Path) -> None:
    from specgen.review.tree_copy import Copy  # the second check, where each write lands: a name check missed (a
    (tmp_path / "copy").mkdir()  # file system that folds names its own way) is refused, never followed
    (tmp_path / "outside").mkdir()
    (tmp_path / "copy" / "d.yaml").symlink_to(tmp_path / "outside")
    copy = Copy(tmp_path / "copy", "evil (0123456789ab)", "evil:main.yaml")
    copy.file("a/b.yaml", b"x: 1\n")
    for write_it in (lambda: copy.file("d.yaml/e.yaml", b"x: 1\n"), lambda: copy.link("d.yaml/e.yaml", "/etc")):
        with pytest.raises(SpecError) as caught:
            write_it()
        assert str(caught.value) == ("evil:main.yaml: error: evil (0123456789ab) holds 'd.yaml/e.yaml', but 'd.yaml' "
                                     "on its path is a link in the copy; such a tree comes only from a crafted commit, "
                                     "and specgen writes nothing through a link")
    with pytest.raises(SpecError) as caught:  # the same name again (two spellings of one name, where case folds)
        copy.file("a/b.yaml", b"x: 2\n")
    assert str(caught.value) == ("evil:main.yaml: error: cannot copy 'a/b.yaml' of evil (0123456789ab): another entry "
                                 "of evil (0123456789ab) has that name where this file system ignores case or Unicode "
                                 "form; such a tree is not read")
    assert os.listdir(tmp_path / "outside") == [] and (tmp_path / "copy" / "a" / "b.yaml").read_bytes() == b"x: 1\n"
