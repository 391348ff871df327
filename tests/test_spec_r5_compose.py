"""Round 5 fixes: `after:` keeps written order, reserved dimension names, spec folders with broken entries, spec
names that differ only in case, REV:PATH refusals by what PATH is, and what an interrupted or failed build left."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
from cli_helpers import run_cli
from test_compose import BASE, layers, write

from specgen.atomic import write_atomic
from specgen.cli import main
from specgen.kinds.dims import BATCH, RESERVED
from specgen.render import build as build_module

run = run_cli
ROOT = Path(__file__).resolve().parents[1]
DIGITS_MLP = ROOT / "examples" / "specs" / "digits_mlp.yaml"
MLP = """\
specgen: 1
name: mlp
inputs: {x: {shape: [4]}}
outputs: {y: out}
layers:
  - {name: h1, op: dense, units: 8}
  - {name: out, op: dense, units: 2}
"""


def variant(tmp_path: Path, lines: str) -> Path:
    write(tmp_path, {"base.yaml": BASE, "v.yaml": f"extends: base.yaml\nname: v\nlayers:\n{lines}"})
    return tmp_path / "v.yaml"


def refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: str = "v.yaml") -> list[str]:
    code, out, err = run(["validate", spec], capsys, tmp_path)
    assert (code, out) == (1, "")
    return err.splitlines()


# --- 1. after: / before: ------------------------------------------------------------------------------------------


def test_items_placed_after_one_item_keep_their_written_order(tmp_path: Path) -> None:
    """Old: each went right after fc1, so the second came first (fc1, act, wide: another model than written)."""
    path = variant(tmp_path, "  - {name: wide, op: dense, units: 16, after: fc1}\n  - {name: act, op: tanh, after: fc1}\n"
                             "  - {name: act2, op: relu, after: fc1}\n")
    assert [n for n, _ in layers(path)] == ["fc1", "wide", "act", "act2", "fc2", "out"]


def test_after_an_item_placed_after_goes_behind_what_was_placed_after_it(tmp_path: Path) -> None:
    """Each item placed after fc1 goes after the ones this list already placed there, and after what was placed
    behind those: the file's order (a, b after a, c after fc1: fc1, a, b, c), as `before:` keeps it by itself."""
    path = variant(tmp_path, "  - {name: a, op: relu, after: fc1}\n  - {name: b, op: relu, after: a}\n"
                             "  - {name: c, op: relu, after: fc1}\n  - {name: p, op: relu, before: out}\n"
                             "  - {name: q, op: relu, before: out}\n  - {name: fc2, after: fc1}\n")
    assert [n for n, _ in layers(path)] == ["fc1", "a", "b", "c", "fc2", "p", "q", "out"]


@pytest.mark.parametrize(("items", "order"), [
    # fc1 moved after a was placed behind it: b goes right after fc1, where fc1 is now (old record: after a)
    ("  - {name: a, op: relu, after: fc1}\n  - {name: fc1, after: fc2}\n  - {name: b, op: relu, after: fc1}\n",
     ["a", "fc2", "fc1", "b", "out"]),
    # fc2 moved before fc1 after a was placed behind fc1: c goes after a (fc1's run moved with nothing)
    ("  - {name: a, op: relu, after: fc1}\n  - {name: fc2, before: fc1}\n  - {name: c, op: relu, after: fc1}\n",
     ["fc2", "fc1", "a", "c", "out"]),
])
def test_a_moved_item_takes_no_record_of_where_it_was(tmp_path: Path, items: str, order: list[str]) -> None:
    """Found by review: the record of what was placed behind an item outlived a move of either."""
    assert [n for n, _ in layers(variant(tmp_path, items))] == order


def test_many_items_after_one_item_stay_in_order(tmp_path: Path) -> None:
    """The walk behind an item is short (it points at the newest): 3,000 items in order, not reversed."""
    names = [f"z{i}" for i in range(3000)]
    path = variant(tmp_path, "".join(f"  - {{name: {n}, op: relu, after: fc1}}\n" for n in names))
    assert [n for n, _ in layers(path)] == ["fc1", *names, "fc2", "out"]


@pytest.mark.parametrize(("item", "line"), [
    ("{name: wide, op: dense, units: 16, after: fc1, before: fc1}",
     "v.yaml:4:60: error: before: an item is placed `after:` one item or `before:` one, not both; drop one"),
    ("{name: fc2, before: out, after: fc1}",  # an existing item moved: the same
     "v.yaml:4:25: error: before: an item is placed `after:` one item or `before:` one, not both; drop one"),
    ("{name: fc1, after: fc1}",
     "v.yaml:4:24: error: after: an item cannot be placed after itself ('fc1'); expected one of fc2, out"),
    ("{name: new, op: relu, before: new}",
     "v.yaml:4:35: error: before: an item cannot be placed before itself ('new'); expected one of fc1, fc2, out"),
])
def test_a_placement_that_cannot_be_followed_is_one_line(tmp_path: Path, capsys, item: str, line: str) -> None:
    """Old: after + before silently took `after`; `{name: fc1, after: fc1}` said no item 'fc1' existed."""
    variant(tmp_path, f"  - {item}\n")
    assert refused(tmp_path, capsys) == [line, "1 error found"]


# --- 2. reserved dimension names ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(RESERVED))
def test_a_reserved_dimension_name_is_refused_at_it(tmp_path: Path, capsys, name: str) -> None:
    """Old: `shape: [batch, 8]` validated, and model.onnx declared float[batch, batch, 8]: the length tied to the
    batch size, where TensorFlow left both free."""
    (tmp_path / "v.yaml").write_text(MLP.replace("shape: [4]", f"shape: [{name}, 4]"))
    assert refused(tmp_path, capsys) == [
        f"v.yaml:3:22: error: shape[0]: '{name}' is a reserved name: {RESERVED[name]}; give this dimension another "
        "name (seq, length)", "1 error found"]


def test_the_batch_name_reserved_is_the_one_the_graph_declares(tmp_path: Path, capsys) -> None:
    (tmp_path / "v.yaml").write_text(MLP)
    assert main(["build", str(tmp_path / "v.yaml"), "--out", str(tmp_path / "out")]) == 0
    graph = (tmp_path / "out" / "mlp" / "model.onnx.txt").read_text()
    assert f"float[{BATCH}, 4] x" in graph and BATCH in RESERVED


# --- 3. folder walks: entries named like specs that are no regular file -------------------------------------------


def broken_folder(folder: Path, good: bool = True) -> Path:
    folder.mkdir()
    if good:
        (folder / "good.yaml").write_text(MLP)
    (folder / "broken.yaml").symlink_to("nowhere")
    os.mkfifo(folder / "pipe.yaml")
    (folder.parent / "other.yaml").write_text(MLP.replace("name: mlp", "name: other"))
    (folder / "linked.yaml").symlink_to("../other.yaml" if good else "nowhere.yml")
    (folder / ".#good.yaml").symlink_to("me@host.1234:1700000000")  # Emacs's lock while good.yaml is edited: skipped
    return folder


@pytest.mark.parametrize("command", [["validate"], ["build", "--check", "--out", "out"], ["build", "--out", "out"],
                                     ["report"]])
def test_a_dangling_link_or_fifo_in_a_folder_is_an_error(tmp_path: Path, capsys, command: list[str]) -> None:
    """Old: `path.is_file()` skipped both silently, so CI passed with a broken spec (and a folder of only such
    entries said `no spec files`). Now each is read as a spec: one line saying what it is."""
    broken_folder(tmp_path / "specs")
    code, out, err = run([*command, "specs"], capsys, tmp_path)
    assert code == 1
    assert err.splitlines() == [
        "specs/broken.yaml: error: the spec path is a dangling symbolic link (to nowhere, which does not exist); "
        "fix its target or remove it",
        "specs/pipe.yaml: error: the spec path is a FIFO (named pipe), not a regular file",
        "2 errors found"]
    if command == ["validate"]:  # a link to a spec file is read as that file
        assert out.splitlines() == ["ok: specs/good.yaml (mlp: 2 layers, 4 variables)",
                                    "ok: specs/linked.yaml (other: 2 layers, 4 variables)"]
    assert not (tmp_path / "out").exists()


def test_a_folder_of_only_broken_entries_names_each(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """Old: `no spec files (*.yaml, *.yml) in specs`. A socket does not even open (ENXIO): named as what it is."""
    broken_folder(tmp_path / "specs", good=False)
    monkeypatch.chdir(tmp_path / "specs")  # a short relative path for bind()
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind("sock.yaml")
        code, out, err = run(["validate", "specs"], capsys, tmp_path)
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "specs/broken.yaml: error: the spec path is a dangling symbolic link (to nowhere, which does not exist); "
        "fix its target or remove it",
        "specs/linked.yaml: error: the spec path is a dangling symbolic link (to nowhere.yml, which does not exist); "
        "fix its target or remove it",
        "specs/pipe.yaml: error: the spec path is a FIFO (named pipe), not a regular file",
        "specs/sock.yaml: error: the spec path is a socket, not a regular file",
        "4 errors found"]


# --- 4. spec names that differ only in case -----------------------------------------------------------------------


def test_spec_names_that_differ_only_in_case_are_refused(tmp_path: Path, capsys) -> None:
    """Old: out/Mlp and out/mlp were built, one folder on macOS and Windows: the second overwrote the first."""
    (tmp_path / "a.yaml").write_text(MLP.replace("name: mlp", "name: Mlp"))
    (tmp_path / "b.yaml").write_text(MLP)
    (tmp_path / "c.yaml").write_text(MLP.replace("name: mlp", "name: Mlp"))
    for command in (["build", "--out", "out"], ["build", "--check", "--out", "out"]):
        code, out, err = run([*command, "a.yaml", "b.yaml", "c.yaml"], capsys, tmp_path)
        assert (code, out) == (1, "")
        assert err.splitlines() == [
            "b.yaml: error: spec name 'mlp' differs only in case from 'Mlp' of a.yaml: on a case-insensitive file "
            "system (macOS, Windows) the two output folders are one; give the specs names that differ in more than "
            "case",
            "c.yaml: error: spec name 'Mlp' is also used by a.yaml; each spec needs its own name (its output folder)",
            "2 errors found"]
        assert not (tmp_path / "out").exists()


# --- 5. REV:PATH that names no spec file --------------------------------------------------------------------------


def git(folder: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


@pytest.mark.parametrize(("path", "why"), [
    ("nope.yaml", "'nope.yaml' does not exist in HEAD (@)"),
    ("lnk.yaml", "'lnk.yaml' is a symbolic link in HEAD (@, to m.yaml); REV:PATH reads a regular spec file of the "
                 "revision: name the file it links to, HEAD:m.yaml"),
    ("sub/up.yaml", "'sub/up.yaml' is a symbolic link in HEAD (@, to ../m.yaml); REV:PATH reads a regular spec file "
                    "of the revision: name the file it links to, HEAD:m.yaml"),
    ("out.yaml", "'out.yaml' is a symbolic link in HEAD (@, to /etc/passwd, outside the repository); REV:PATH reads "
                 "a regular spec file of the revision"),
    ("sub", "'sub' is a folder in HEAD (@), not a spec file (.yaml, .yml)"),
    ("notes.txt", "'notes.txt' is not a spec file (.yaml, .yml) in HEAD (@)"),
])
def test_rev_path_says_what_path_is_in_the_revision(tmp_path: Path, capsys, path: str, why: str) -> None:
    """Old: every one of them was "is not a spec file (.yaml, .yml) in HEAD", a missing path and a link too."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "m.yaml").write_text(MLP)
    (tmp_path / "notes.txt").write_text("notes\n")
    (tmp_path / "lnk.yaml").symlink_to("m.yaml")
    (tmp_path / "sub" / "up.yaml").symlink_to("../m.yaml")
    (tmp_path / "out.yaml").symlink_to("/etc/passwd")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "one")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True,
                            check=True).stdout[:12]
    code, out, err = run(["diff", f"HEAD:{path}", "m.yaml"], capsys, tmp_path)
    assert (code, out) == (1, "")
    assert err.splitlines() == [f"HEAD:{path}: error: {why.replace('@', commit)}", "1 error found"]


# --- 6. what an interrupted or a failed build leaves --------------------------------------------------------------


def _dead_pid() -> int:
    """A pid no process has: above the system's largest."""
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    except OSError:
        return (1 << 22) + 1


def test_a_temporary_file_of_an_interrupted_build_is_named_as_one(tmp_path: Path, capsys) -> None:
    """Old: `stale: .../.model.py.16429.83f40adb.tmp is no longer generated` (and build removed it as such)."""
    assert main(["build", str(DIGITS_MLP), "--out", str(tmp_path)]) == 0
    folder = tmp_path / "digits_mlp"
    dead = folder / f".model.py.{_dead_pid()}.83f40adb.tmp"  # its writer was killed between write and rename
    old = folder / f".train.py.{os.getpid()}.0123abcd.tmp"  # a live pid, but older than any write takes: reused
    live = folder / f".model.onnx.{os.getpid()}.89abcdef.tmp"  # a write in progress: not ours to judge
    for path in (dead, old, live):
        path.write_text("half")
    os.utime(old, (time.time() - 3600,) * 2)
    capsys.readouterr()
    assert main(["build", str(DIGITS_MLP), "--out", str(tmp_path), "--check"]) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [
        f"leftover: {path} is a temporary file an interrupted build left (the next `specgen build` removes it)"
        for path in (dead, old)]
    assert captured.err == "specgen build --check: 2 file(s) out of date; run `specgen build`\n"
    assert main(["build", str(DIGITS_MLP), "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        *(f"removed {path} (a temporary file an interrupted build left)" for path in (dead, old)),
        f"built 1 spec(s) into {tmp_path}: 2 file(s) changed (2 removed)"]
    assert live.exists() and not dead.exists() and not old.exists()


def test_a_build_that_fails_half_way_prints_what_it_wrote(tmp_path: Path, capsys,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Old: the files before an unwritable one were replaced, and no `wrote` line said so (an immutable file: the
    rename onto it fails with EPERM, which a test run as root cannot get from chattr everywhere)."""
    assert main(["build", str(DIGITS_MLP), "--out", str(tmp_path)]) == 0
    folder = tmp_path / "digits_mlp"
    edited = {}
    for name in ("model.py", "train.py", "collections.yaml"):  # hand-edited below build's header: still build's own
        edited[name] = (folder / name).read_text().splitlines()[0] + "\nedited\n"
        (folder / name).write_text(edited[name])
    (folder / "notes.txt").write_text("mine\n")
    def refuse_train(target: Path, content: bytes | str, **kwargs: object) -> None:
        if target.name == "train.py":
            raise PermissionError(errno.EPERM, "Operation not permitted", str(target))
        write_atomic(target, content, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(build_module, "write_atomic", refuse_train)
    capsys.readouterr()
    assert main(["build", str(DIGITS_MLP), "--out", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == f"wrote {folder / 'model.py'}\n"
    assert captured.err.startswith(f"specgen: error: cannot write {folder / 'train.py'}: operation not permitted")
    assert captured.err.count("\n") == 1
    assert (folder / "model.py").read_text() != edited["model.py"]
    assert (folder / "train.py").read_text() == edited["train.py"]
