"""Where specgen writes, deletes and reads: never through a link, one error line for a bad disk, quiet pipes.

Every case uses real files, real symbolic links and real system refusals. The tests run as
root, where chmod stops nothing, so a "read-only folder" is /sys (sysfs refuses new files and
folders even to root), a "full disk" is a file size limit (RLIMIT_FSIZE makes write() fail with
EFBIG exactly where a full disk fails with ENOSPC), and a broken path is a folder whose parent
is a regular file.
"""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from specgen.atomic import REMEDIES, UnsafePathError, describe, writing
from specgen.cli import main
from specgen.ir.resolve import build_ir
from specgen.runtime.triton import write_repository
from specgen.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "examples" / "specs" / "digits_mlp.yaml"
LINK_NOTE = ("and specgen never writes, deletes or reads through a link; remove the link (or choose another "
             "path) and run again")
SECRET = b"CI_TOKEN=hunter2\n"


def build(out: Path, *extra: str) -> int:
    return main(["build", str(MLP), "--out", str(out), *extra])


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file below `folder` (links not followed) with its bytes: 'untouched' means equal snapshots."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A folder outside the output root with files a link could expose or destroy."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "keep.txt").write_bytes(b"precious\n")
    (folder / "secret.env").write_bytes(SECRET)
    return folder


# --- build: links inside the output folder (issue 9, item 1) ---------------------------------------------

def test_build_refuses_a_linked_spec_folder_and_deletes_nothing(tmp_path: Path, elsewhere: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Old code wrote the five files into `elsewhere` and deleted keep.txt and secret.env as 'stale'."""
    out = tmp_path / "gen"
    out.mkdir()
    (out / "digits_mlp").symlink_to(elsewhere)
    before = snapshot(elsewhere)
    assert build(out) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"specgen: error: cannot write {out}/digits_mlp: it is a symbolic link (to {elsewhere}), "
                            f"{LINK_NOTE}\n")
    assert snapshot(elsewhere) == before
    assert (out / "digits_mlp").is_symlink()


def test_check_never_prints_what_a_linked_file_holds(tmp_path: Path, elsewhere: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Old code printed the link target (here a secrets file; /proc/self/environ in the report) as a diff."""
    out = tmp_path / "gen"
    assert build(out) == 0
    target = out / "digits_mlp" / "model.onnx.txt"
    target.unlink()
    target.symlink_to(elsewhere / "secret.env")
    capsys.readouterr()
    assert build(out, "--check") == 1
    captured = capsys.readouterr()
    assert captured.out == f"unsafe: {target} is a symbolic link (to {elsewhere / 'secret.env'}), {LINK_NOTE}\n"
    assert "hunter2" not in captured.out + captured.err
    assert captured.err == ("specgen build --check: 1 unsafe path(s) in the output folder; specgen neither reads "
                            "nor replaces them: remove them, then run `specgen build`\n")


def test_check_never_reads_proc_environ_through_a_link(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECGEN_TEST_SECRET", "hunter2")
    out = tmp_path / "gen"
    assert build(out) == 0
    target = out / "digits_mlp" / "model.onnx.txt"
    target.unlink()
    target.symlink_to("/proc/self/environ")
    capsys.readouterr()
    assert build(out, "--check") == 1
    captured = capsys.readouterr()
    assert captured.out == f"unsafe: {target} is a symbolic link (to /proc/self/environ), {LINK_NOTE}\n"
    assert "hunter2" not in captured.out + captured.err


def test_build_refuses_a_linked_file_before_writing_anything(tmp_path: Path, elsewhere: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """All checks come before the first write: the drifted model.py beside the link is not rewritten either."""
    out = tmp_path / "gen"
    assert build(out) == 0
    folder = out / "digits_mlp"
    (folder / "model.py").write_text("# drifted\n")
    (folder / "train.py").unlink()
    (folder / "train.py").symlink_to(elsewhere / "keep.txt")
    before, outside = snapshot(folder), snapshot(elsewhere)
    capsys.readouterr()
    assert build(out) == 1
    assert capsys.readouterr().err == (f"specgen: error: cannot write {folder}/train.py: it is a symbolic link "
                                       f"(to {elsewhere / 'keep.txt'}), {LINK_NOTE}\n")
    assert snapshot(folder) == before and snapshot(elsewhere) == outside
    assert (folder / "train.py").is_symlink()


def test_a_stale_link_is_refused_not_deleted(tmp_path: Path, elsewhere: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "gen"
    assert build(out) == 0
    link = out / "digits_mlp" / "old_notes.txt"
    link.symlink_to(elsewhere / "keep.txt")
    capsys.readouterr()
    assert build(out) == 1
    assert capsys.readouterr().err == (f"specgen: error: cannot write {link}: it is a symbolic link "
                                       f"(to {elsewhere / 'keep.txt'}), {LINK_NOTE}\n")
    assert link.is_symlink() and (elsewhere / "keep.txt").read_bytes() == b"precious\n"


def test_check_reports_a_pipe_instead_of_reading_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "gen"
    assert build(out) == 0
    pipe = out / "digits_mlp" / "collections.yaml"
    pipe.unlink()
    os.mkfifo(pipe)
    capsys.readouterr()
    assert build(out, "--check") == 1  # would block forever if it opened the FIFO for reading
    assert capsys.readouterr().out == (f"unsafe: {pipe} is a device, pipe or socket, not a regular file; specgen "
                                       "reads and writes only regular files; remove it (or choose another path) "
                                       "and run again\n")


def test_a_folder_where_a_file_goes_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Old code: IsADirectoryError traceback from os.replace."""
    out = tmp_path / "gen"
    (out / "digits_mlp" / "model.py").mkdir(parents=True)
    assert build(out) == 1
    assert capsys.readouterr().err == (f"specgen: error: cannot write {out}/digits_mlp/model.py: it is a folder "
                                       "where specgen writes a generated file; remove it and run again\n")
    assert sorted(p.name for p in (out / "digits_mlp").iterdir()) == ["model.py"]


def test_a_root_reached_through_links_is_fine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Links above the output root are the user's choice: the root is resolved once, links below it refused."""
    (tmp_path / "real").mkdir()
    (tmp_path / "via").symlink_to(tmp_path / "real")
    assert build(tmp_path / "via") == 0
    assert build(tmp_path / "via", "--check") == 0
    assert (tmp_path / "real" / "digits_mlp" / "model.py").is_file()
    assert "up to date" in capsys.readouterr().out


def test_other_real_subfolders_are_left_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A __pycache__ (Python writes one on importing model.py) is neither flagged, counted nor removed."""
    out = tmp_path / "gen"
    cache = out / "digits_mlp" / "__pycache__"
    cache.mkdir(parents=True)
    (cache / "model.cpython-311.pyc").write_bytes(b"\0")
    assert build(out) == 0
    capsys.readouterr()
    assert build(out, "--check") == 0
    assert capsys.readouterr().out == f"ok: 5 generated files in {out} are up to date\n"
    assert (cache / "model.cpython-311.pyc").read_bytes() == b"\0"


def test_check_does_not_read_the_configured_schema_through_a_link(tmp_path: Path, elsewhere: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """`build --check` also compares [tool.specgen] schema: that file is read without following a link too."""
    (tmp_path / "pyproject.toml").write_text(f'[tool.specgen]\nspecs = ["{MLP}"]\nout = "gen"\nschema = "s.json"\n')
    (tmp_path / "s.json").symlink_to(elsewhere / "secret.env")
    monkeypatch.chdir(tmp_path)
    assert main(["build"]) == 0
    capsys.readouterr()
    assert main(["build", "--check"]) == 1
    assert capsys.readouterr().out == f"unsafe: s.json is a symbolic link (to {elsewhere / 'secret.env'}), {LINK_NOTE}\n"


def test_generated_folder_is_still_current(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["build", "--check"]) == 0
    # What build writes: the files directly in each spec's folder. Not rglob: importing a generated module
    # (the tests do, as `specgen train` does) leaves __pycache__/*.pyc there wherever Python writes bytecode.
    count = sum(1 for p in (ROOT / "generated").glob("*/*") if p.is_file())
    assert capsys.readouterr().out == f"ok: {count} generated files in generated are up to date\n"


# --- schema: links, read-only and full disks (item 12) -------------------------------------------------

def test_schema_refuses_to_write_through_a_link(tmp_path: Path, elsewhere: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Old code: write_text followed the link and overwrote keep.txt."""
    link = tmp_path / "schema.json"
    link.symlink_to(elsewhere / "keep.txt")
    assert main(["schema", "-o", str(link)]) == 1
    assert capsys.readouterr().err == (f"specgen: error: cannot write {link}: it is a symbolic link "
                                       f"(to {elsewhere / 'keep.txt'}), {LINK_NOTE}\n")
    assert (elsewhere / "keep.txt").read_bytes() == b"precious\n"


def test_schema_check_does_not_read_through_a_link(tmp_path: Path, elsewhere: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    link = tmp_path / "schema.json"
    link.symlink_to(elsewhere / "secret.env")
    assert main(["schema", "-o", str(link), "--check"]) == 1
    assert capsys.readouterr().out == (f"unsafe: {link} is a symbolic link (to {elsewhere / 'secret.env'}), "
                                       f"{LINK_NOTE}\n")


def test_schema_under_a_file_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A path whose 'folder' is a regular file: mkdir fails with EEXIST (ENOTDIR further down)."""
    (tmp_path / "notes.txt").write_text("a file\n")
    target = tmp_path / "notes.txt" / "schema.json"
    assert main(["schema", "-o", str(target)]) == 1
    assert capsys.readouterr().err == (f"specgen: error: cannot write {target}: a part of its path is a file, not a "
                                       "folder; remove that file or choose another path\n")


def test_build_under_a_file_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Old code: FileExistsError / NotADirectoryError traceback."""
    (tmp_path / "notes.txt").write_text("a file\n")
    assert build(tmp_path / "notes.txt" / "gen") == 1
    assert capsys.readouterr().err == (f"specgen: error: cannot write {tmp_path}/notes.txt/gen: a part of its path is "
                                       "a file, not a folder; remove that file or choose another path\n")
    assert build(tmp_path / "notes.txt") == 1
    assert capsys.readouterr().err == (f"specgen: error: cannot write {tmp_path}/notes.txt: it is a file, not a folder; "
                                       "remove it or choose another output folder\n")
    assert (tmp_path / "notes.txt").read_text() == "a file\n"


def _sys_refuses(path: Path) -> int:
    """The errno /sys gives root for creating `path` (skip where it does not refuse)."""
    try:
        os.mkdir(path)
    except OSError as exc:
        return exc.errno or 0
    os.rmdir(path)
    pytest.skip("/sys accepts new folders here")


def _refusal_line(target: str, code: int) -> str:
    reason = {errno.EACCES: "permission denied", errno.EPERM: "operation not permitted",
              errno.EROFS: "read-only file system"}[code]
    return f"specgen: error: cannot write {target}: {reason}; {REMEDIES[code]}\n"


def test_schema_into_a_read_only_folder(capsys: pytest.CaptureFixture[str]) -> None:
    """/sys refuses new files to root as well: EACCES on a writable sysfs, EROFS where it is mounted read-only."""
    target = Path("/sys/specgen-test-schema.json")
    assert main(["schema", "-o", str(target)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"specgen: error: cannot write {target}: ") and err.count("\n") == 1
    assert err in (_refusal_line(str(target), errno.EACCES), _refusal_line(str(target), errno.EROFS))


def test_build_into_a_read_only_folder(capsys: pytest.CaptureFixture[str]) -> None:
    out = Path("/sys/specgen-test-out")
    code = _sys_refuses(out)
    assert build(out) == 1
    # the folder that cannot be made is named: the output folder itself, made first for its lock (render/build_lock.py)
    assert capsys.readouterr().err == _refusal_line(str(out), code)


def _limit_file_size() -> None:
    # Python ignores SIGXFSZ, so going past the limit makes write() fail with EFBIG instead of killing it.
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


def test_schema_on_a_full_disk_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "schema.json"
    target.write_bytes(b"{}\n")  # the old schema
    result = subprocess.run([sys.executable, "-m", "specgen", "schema", "-o", str(target)], capture_output=True,
                            text=True, preexec_fn=_limit_file_size, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr == (f"specgen: error: cannot write {target}: file too large; the file is larger than the "
                             "file size limit allows; raise the limit and run again (the old file, if any, is "
                             "unchanged)\n")
    assert target.read_bytes() == b"{}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["schema.json"]  # no temporary file left behind


@pytest.mark.parametrize(("code", "line"), [
    (errno.ENOSPC, "no space left on device; the disk is full; free some space and run again"),
    (errno.EDQUOT, "disk quota exceeded; the disk quota is used up; free some space or raise the quota and run again"),
    (errno.EROFS, "read-only file system; the file system is read-only; choose a path on a writable one"),
])
def test_describe_names_the_file_and_what_to_do(code: int, line: str) -> None:
    """The errors no test can cause for root without mounting a file system: the same line shape."""
    with pytest.raises(OSError) as caught, writing(Path("out/model.onnx")):
        raise OSError(code, os.strerror(code), "out/.model.onnx.123.tmp")
    kept = " (the old file, if any, is unchanged)" if code != errno.EROFS else ""
    assert describe(caught.value) == f"cannot write out/model.onnx: {line}{kept}"


def test_describe_without_a_path_keeps_the_systems_words() -> None:
    assert describe(OSError(errno.EADDRINUSE, "Address already in use")) == "address already in use"
    assert describe(OSError("Cannot use /Data/Set")) == "Cannot use /Data/Set"


# --- infer --output (item 12) ---------------------------------------------------------------------------

@pytest.fixture
def identity_model(tmp_path: Path) -> tuple[Path, Path]:
    """A one-node ONNX model (y = x) and an .npz input for it."""
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])])
    model = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10), model)
    data = tmp_path / "in.npz"
    np.savez(data, x=np.ones((3, 2), np.float32))
    return model, data


def infer(model: Path, data: Path, output: Path) -> int:
    return main(["infer", str(model), "--input", str(data), "--output", str(output), "--provider", "cpu"])


def test_infer_writes_its_outputs_atomically(tmp_path: Path, identity_model: tuple[Path, Path],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert infer(*identity_model, tmp_path / "result") == 0
    assert capsys.readouterr().out.endswith(f"wrote {tmp_path / 'result.npz'}\n")
    with np.load(tmp_path / "result.npz") as saved:
        assert saved["y"].tolist() == [[1.0, 1.0]] * 3


def test_infer_refuses_an_output_link_before_running(tmp_path: Path, elsewhere: Path,
                                                     identity_model: tuple[Path, Path],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Old code: np.savez followed the link and replaced secret.env's contents with the outputs."""
    link = tmp_path / "result.npz"
    link.symlink_to(elsewhere / "secret.env")
    assert infer(*identity_model, link) == 1
    captured = capsys.readouterr()
    assert captured.out == ""  # refused before the model ran
    assert captured.err == (f"specgen: error: cannot write {link}: it is a symbolic link "
                            f"(to {elsewhere / 'secret.env'}), {LINK_NOTE}\n")
    assert (elsewhere / "secret.env").read_bytes() == SECRET


def test_infer_output_onto_a_folder(tmp_path: Path, identity_model: tuple[Path, Path],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Old code: IsADirectoryError traceback after running the model."""
    (tmp_path / "result.npz").mkdir()
    assert infer(*identity_model, tmp_path / "result.npz") == 1
    assert capsys.readouterr().err == (f"specgen: error: cannot write {tmp_path / 'result.npz'}: it is a folder; "
                                       "specgen writes a file there; give a file path and run again\n")


def test_infer_output_in_a_read_only_folder(identity_model: tuple[Path, Path],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    target = Path("/sys/specgen-test-result.npz")
    assert infer(*identity_model, target) == 1
    err = capsys.readouterr().err
    assert err in (_refusal_line(str(target), errno.EACCES), _refusal_line(str(target), errno.EROFS))


# --- the Triton repository folder ------------------------------------------------------------------------

def exported_mlp() -> bytes:
    """The built digits_mlp graph with its weight inputs turned into initializers, as an export leaves it."""
    model = onnx.load(ROOT / "generated" / "digits_mlp" / "model.onnx")
    data = {i.onnx_name for i in build_ir(load_spec(MLP)).inputs}
    graph = model.graph
    for value in [i for i in graph.input if i.name not in data]:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        graph.initializer.append(numpy_helper.from_array(np.zeros(shape, np.float32), value.name))
    kept = [i for i in graph.input if i.name in data]
    del graph.input[:]
    graph.input.extend(kept)
    return model.SerializeToString(deterministic=True)


@pytest.mark.parametrize("linked", ["digits_mlp", "digits_mlp/1"])
def test_triton_repository_refuses_linked_folders(tmp_path: Path, elsewhere: Path, linked: str) -> None:
    """Old code wrote model.onnx (and config.pbtxt) into `elsewhere` through the link."""
    repo = tmp_path / "repo"
    (repo / linked).parent.mkdir(parents=True)
    (repo / linked).symlink_to(elsewhere)
    before = snapshot(elsewhere)
    with pytest.raises(UnsafePathError) as caught:
        write_repository(repo, build_ir(load_spec(MLP)), exported_mlp())
    assert str(caught.value) == f"{repo / linked} is a symbolic link (to {elsewhere}), {LINK_NOTE}"
    assert snapshot(elsewhere) == before
    assert not list(repo.rglob("*.onnx")) and not list(repo.rglob("config.pbtxt"))


def test_triton_repository_refuses_a_linked_config(tmp_path: Path, elsewhere: Path) -> None:
    """Both targets are checked before the first write: no model.onnx appears either."""
    repo = tmp_path / "repo"
    (repo / "digits_mlp").mkdir(parents=True)
    (repo / "digits_mlp" / "config.pbtxt").symlink_to(elsewhere / "keep.txt")
    with pytest.raises(UnsafePathError, match=r"config\.pbtxt is a symbolic link"):
        write_repository(repo, build_ir(load_spec(MLP)), exported_mlp())
    assert not (repo / "digits_mlp" / "1").exists()
    assert (elsewhere / "keep.txt").read_bytes() == b"precious\n"


# --- a closed stdout (item 12) ----------------------------------------------------------------------------

@pytest.mark.parametrize("command", [["report", str(MLP)], ["validate", str(MLP)]])
def test_a_closed_pipe_is_quiet(command: list[str]) -> None:
    """`specgen report | head`: the reader is gone before specgen writes. Old code: BrokenPipeError traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run([sys.executable, "-m", "specgen", *command], stdout=write_end,
                                stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (141, "")
