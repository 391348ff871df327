"""specgen in a user's repository (the `pkg` red-team findings 3-6, 8-10): folders left by deleted specs, how a
folder argument expands, [tool.specgen] mistakes, the schema check's advice, the template cache and CRLF checkouts.

Real files, links and system refusals; one small spec (digits_mlp) rendered in process, so the file runs in a few
seconds.
"""

from __future__ import annotations

import resource
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper
import pytest
from jinja2.bccache import Bucket, FileSystemBytecodeCache, bc_magic

from specgen.cli import main
from specgen.commands.common import expand, spec_paths
from specgen.config import load_config
from specgen.diagnostics import SpecError
from specgen.render import environment
from specgen.render.build import Output, check, render_one
from specgen.render.stale_folders import BUILT, unclaimed

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "examples" / "specs" / "digits_mlp.yaml"
CNN = ROOT / "examples" / "specs" / "digits_cnn.yaml"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _rendered(spec: Path, pictures: bool) -> dict[str, bytes]:
    output = render_one(spec, pictures)
    assert isinstance(output, Output)
    return output.files


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user repository: specs/digits_mlp.yaml and [tool.specgen] specs = ["specs"], as the working directory."""
    (tmp_path / "specs").mkdir()
    shutil.copy(MLP, tmp_path / "specs")
    (tmp_path / "pyproject.toml").write_text('[tool.specgen]\nspecs = ["specs"]\n')
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --- 3: generated/<old>/ left by a deleted or renamed spec ---------------------------------------------------------

def test_a_folder_no_spec_names_is_stale_and_build_removes_it(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(capsys, "build")[0] == 0
    gen = repo / "generated"
    shutil.copytree(gen / "digits_mlp", gen / "old_name")  # what a renamed spec leaves: specgen's files, all of them
    (gen / "old_name" / "__pycache__").mkdir()  # importing the old model.py made this
    (gen / "old_name" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\x00")
    shutil.copytree(gen / "digits_mlp", gen / "notes_kept")
    (gen / "notes_kept" / "notes.txt").write_text("mine\n")  # a hand-written file: never deleted
    (gen / "assets").mkdir()
    (gen / "assets" / "logo.txt").write_text("no header\n")  # the user's own folder: not specgen's, not reported
    kept = ("stale: generated/notes_kept/ (no spec names it; it also holds notes.txt, which specgen did not write: "
            "remove it by hand)\n")
    assert _run(capsys, "build", "--check") == (1, kept + "stale: generated/old_name/ (no spec names it)\n",
                                                "specgen build --check: 2 folder(s) out of date; run `specgen build` "
                                                "and remove the folder(s) named by hand\n")
    assert _run(capsys, "build", "specs/digits_mlp.yaml", "--check")[0] == 0  # with paths: other specs' folders
    assert _run(capsys, "build") == (0, "removed generated/old_name/ (no spec names it)\n"
                                        "built 1 spec(s) into generated: 5 file(s) changed (5 removed)\n",
                                     "specgen build: " + kept.replace("stale:", "kept"))
    assert sorted(p.name for p in gen.iterdir()) == ["assets", "digits_mlp", "notes_kept"]
    shutil.rmtree(gen / "notes_kept")
    assert _run(capsys, "build", "--check") == (0, "ok: 5 generated files in generated are up to date\n", "")


def test_only_the_files_build_writes_count_and_an_exported_model_is_never_deleted(
        repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """review finding 1: `specgen export` names the same ONNX producer, so only build's own names, each with its
    mark, count; model.onnx must be exactly what its model.onnx.txt parses to (a trained one never is)."""
    assert set(_rendered(MLP, pictures=True)) == set(BUILT)  # BUILT is every name build writes into a spec folder
    assert _run(capsys, "build")[0] == 0
    gen, graph = repo / "generated", repo / "generated" / "digits_mlp" / "model.onnx"
    (gen / "release").mkdir()  # exported models kept under `out`: not build's names, so not specgen's folder
    for name in ("digits_cnn_trained.onnx", "model.int8.onnx", "model.onnx"):
        shutil.copy(graph, gen / "release" / name)
    shutil.copytree(gen / "digits_mlp", gen / "trained")  # a trained model.onnx over the generated one
    model = onnx.load(str(graph))
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.zeros(10, np.float32), "out__bias"))
    (gen / "trained" / "model.onnx").write_bytes(model.SerializeToString())
    shutil.copytree(gen / "digits_mlp", gen / "variant")
    shutil.copy(graph, gen / "variant" / "model.fp16.onnx")
    note = "(no spec names it; it also holds {}, which specgen did not write: remove it by hand)"
    expected = [f"stale: generated/trained/ {note.format('model.onnx')}",
                f"stale: generated/variant/ {note.format('model.fp16.onnx')}"]
    assert _run(capsys, "build", "--check")[:2] == (1, "\n".join(expected) + "\n")
    assert _run(capsys, "build")[2] == "".join(f"specgen build: kept {e[7:]}\n" for e in expected)
    assert sorted(p.name for p in (gen / "release").iterdir()) == ["digits_cnn_trained.onnx", "model.int8.onnx",
                                                                  "model.onnx"]
    assert (gen / "trained" / "model.onnx").read_bytes() == model.SerializeToString()
    shutil.rmtree(gen / "variant")
    (gen / "trained" / "model.onnx").write_bytes(graph.read_bytes())  # the generated graph again: build's own
    assert _run(capsys, "build")[1] == "removed generated/trained/ (no spec names it)\n" \
                                       "built 1 spec(s) into generated: 5 file(s) changed (5 removed)\n"


def test_only_the_configured_set_into_the_configured_out_prunes(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """review finding 2: `build --out DIR` without paths is not the owner of DIR's other folders."""
    assert _run(capsys, "build", "--out", "golden")[0] == 0
    shutil.copytree(repo / "golden" / "digits_mlp", repo / "golden" / "other_set")  # built by another spec set
    assert _run(capsys, "build", "--out", "golden", "--check") == (
        0, "ok: 5 generated files in golden are up to date\n", "")
    assert _run(capsys, "build", "--out", "golden")[0] == 0
    assert (repo / "golden" / "other_set" / "model.py").is_file()
    assert _run(capsys, "build")[0] == 0
    shutil.copytree(repo / "generated" / "digits_mlp", repo / "generated" / "old")
    (repo / "generated" / "digits_mlp" / "collections.yaml").unlink()
    # --out naming the configured folder (another spelling) is the configured build: one file and one folder (7)
    assert _run(capsys, "build", "--out", "./generated/", "--check") == (
        1, "missing: generated/digits_mlp/collections.yaml (run `specgen build`)\n"
           "stale: generated/old/ (no spec names it)\n",
        "specgen build --check: 1 file(s) and 1 folder(s) out of date; run `specgen build`\n")
    assert _run(capsys, "build", "specs", "--check")[1] == (
        "missing: generated/digits_mlp/collections.yaml (run `specgen build`)\n")  # with paths: no folder
    assert _run(capsys, "build", "--out", "generated")[0] == 0
    assert not (repo / "generated" / "old").exists()


def test_folder_names_are_claimed_in_any_case(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """review finding 3: on macOS and Windows generated/digits_mlp/ IS generated/Digits_mlp/, so a case-only rename
    must not take the folder the spec now writes into for a left-over one. On Linux the old folder stays."""
    assert _run(capsys, "build")[0] == 0
    spec = repo / "specs" / "digits_mlp.yaml"
    spec.write_text(spec.read_text().replace("name: digits_mlp", "name: Digits_mlp"))
    assert unclaimed(["Digits_mlp"], repo / "generated") == []
    assert _run(capsys, "build")[1].splitlines()[-1] == "built 1 spec(s) into generated: 5 file(s) changed"
    assert sorted(p.name for p in (repo / "generated").iterdir()) == ["Digits_mlp", "digits_mlp"]
    assert _run(capsys, "build", "--check")[0] == 0


# --- 4 and 5: what a folder argument stands for ---------------------------------------------------------------------

def test_folders_note_links_match_any_case_and_skip_hidden_and_output(
        repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """review finding 5: a linked folder is not followed (as git and rglob), but each one is a `note:` line."""
    specs, common = repo / "specs", repo / "common"
    (common / "deep").mkdir(parents=True)
    (common / "shared.yml").write_text("x")
    (specs / "shared").symlink_to("../common")  # not followed: one note naming it and its target
    (specs / "loop").symlink_to(".")  # a link inside the walked tree adds nothing: no note
    (specs / ".hidden").symlink_to("../common")  # hidden: skipped like any hidden folder
    (specs / "upper.YAML").write_text("x")
    (specs / ".ipynb_checkpoints").mkdir()
    (specs / ".ipynb_checkpoints" / "digits_mlp-checkpoint.yaml").write_text("x")  # hidden folder: skipped
    (specs / "made.yaml").write_text("# Generated by specgen from 'a.yaml'. Do not edit.\n")  # output, not a spec
    assert expand([Path("specs")]) == [Path("specs/digits_mlp.yaml"), Path("specs/upper.YAML")]
    assert capsys.readouterr().err == ("note: specs/shared is a link to a folder (common) and is not followed; "
                                       "name common to include its specs\n")
    assert expand([Path("specs/shared")]) == [Path("specs/shared/shared.yml")]  # named: it is read
    assert expand([Path("specs"), Path("common")])[-1] == Path("common/shared.yml")
    (specs / "inside").symlink_to(".ipynb_checkpoints")  # below the tree but hidden: not walked, so noted
    assert capsys.readouterr().err == "" and len(expand([Path("specs")])) == 2
    assert capsys.readouterr().err == ("note: specs/inside is a link to a folder (specs/.ipynb_checkpoints) and is "
                                       "not followed; name specs/.ipynb_checkpoints to include its specs\n"
                                       "note: specs/shared is a link to a folder (common) and is not followed; "
                                       "name common to include its specs\n")


def test_a_linked_data_folder_is_not_read_as_specs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """review finding 5 (repro 2): `specs = ["."]` with a linked data set holding YAML that is no spec."""
    (tmp_path / "datasets" / "mnist").mkdir(parents=True)
    (tmp_path / "datasets" / "mnist" / "meta.yaml").write_text("classes: 10\nsource: http://example\n")
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "data").symlink_to("../datasets")
    shutil.copy(MLP, tmp_path / "repo")
    (tmp_path / "repo" / "pyproject.toml").write_text('[tool.specgen]\nspecs = ["."]\nout = "gen"\n')
    monkeypatch.chdir(tmp_path / "repo")
    assert _run(capsys, "validate") == (0, "ok: digits_mlp.yaml (digits_mlp: 4 layers, 17 variables)\n",
                                        f"note: data is a link to a folder "
                                        f"({tmp_path}/datasets) and is not followed; name {tmp_path}/datasets to "
                                        "include its specs\n")


def test_a_spec_folder_holding_the_out_folder_skips_it(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "pyproject.toml").write_text('[tool.specgen]\nspecs = ["."]\nout = "gen"\n')
    shutil.move(repo / "specs" / "digits_mlp.yaml", repo)
    (repo / "gen" / "hand").mkdir(parents=True)
    (repo / "gen" / "hand" / "x.yaml").write_text("x")  # no header, but inside `out`: never a spec
    assert spec_paths([]) == [Path("digits_mlp.yaml")]
    assert _run(capsys, "build")[0] == 0
    assert _run(capsys, "build", "--check") == (0, "ok: 5 generated files in gen are up to date\n", "")
    # with paths the table is not read (review finding 4): only build's own output folder and generated files
    assert spec_paths([Path(".")], Path("gen")) == [Path("digits_mlp.yaml")]
    assert spec_paths([Path(".")]) == [Path("digits_mlp.yaml"), Path("gen/hand/x.yaml")]
    shutil.rmtree(repo / "gen" / "hand")
    assert _run(capsys, "build", ".", "--out", "elsewhere")[0] == 0
    assert spec_paths([Path(".")]) == [Path("digits_mlp.yaml")]  # gen/ and elsewhere/ are output by their header


def test_with_paths_the_table_is_not_read(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """review finding 4: a key specgen does not know fails only the commands that use the table."""
    (repo / "pyproject.toml").write_text('[tool.specgen]\nspecs = ["specs"]\nmy_key = 1\n')
    assert _run(capsys, "validate", "specs/digits_mlp.yaml")[0] == 0
    assert _run(capsys, "validate", "specs")[0] == 0
    assert _run(capsys, "validate") == (1, "", "pyproject.toml: error: [tool.specgen] has an unknown key 'my_key' "
                                        "(expected 'out', 'pictures', 'schema' or 'specs')\n1 error found\n")


# --- 6: [tool.specgen] types and keys -------------------------------------------------------------------------------

@pytest.mark.parametrize(("body", "message"), [
    ('out = 5', 'out is 5; expected a folder path as a string, e.g. "generated"'),
    ('schema = ["a.json"]', "schema is ['a.json']; expected a file path as a string, e.g. "
                            '"schemas/specgen.schema.json"'),
    ('specs = "specs"', "specs is 'specs'; expected a list of spec files or folders as strings, e.g. [\"specs\"]"),
    ('specs = [1]', 'specs is [1]; expected a list of spec files or folders as strings, e.g. ["specs"]'),
    ('pictures = "yes"', "pictures is 'yes'; expected true or false"),
    ('spec = ["specs"]', "has an unknown key 'spec'; did you mean 'specs'? (expected 'out', 'pictures', "
                         "'schema' or 'specs')"),
])
def test_config_mistakes_are_one_line_naming_the_file(tmp_path: Path, body: str, message: str) -> None:
    (tmp_path / "pyproject.toml").write_text(f"[tool.specgen]\n{body}\n")
    (tmp_path / "sub").mkdir()
    with pytest.raises(SpecError) as caught:
        load_config(tmp_path / "sub")
    assert [str(d) for d in caught.value.diagnostics] == [f"{tmp_path}/pyproject.toml: error: [tool.specgen] "
                                                          f"{message}"]


# --- 8: the schema file -----------------------------------------------------------------------------------------------

def test_a_missing_schema_is_missing_and_the_advice_is_specgen_schema(repo: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "pyproject.toml").write_text('[tool.specgen]\nspecs = ["specs"]\nschema = "s/schema.json"\n')
    assert _run(capsys, "build")[0] == 0
    assert _run(capsys, "build", "--check") == (1, "missing: s/schema.json (run `specgen schema`)\n",
                                                "specgen build --check: 1 file(s) out of date; run `specgen schema`\n")
    assert _run(capsys, "schema", "--check")[1] == "missing: s/schema.json (run `specgen schema`)\n"
    assert _run(capsys, "schema")[0] == 0
    assert _run(capsys, "build", "--check")[0] == 0


def test_the_fallback_schema_path_is_below_the_pyproject_folder(repo: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(repo / "specs")
    assert _run(capsys, "schema") == (0, f"wrote {repo}/schemas/specgen.schema.json\n", "")
    assert not (repo / "specs" / "schemas").exists()
    before = (repo / "schemas" / "specgen.schema.json").stat()
    # Unchanged: not written again (the old code replaced it each time, and failed in a read-only checkout).
    assert _run(capsys, "schema") == (0, f"unchanged: {repo}/schemas/specgen.schema.json\n", "")
    after = (repo / "schemas" / "specgen.schema.json").stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_a_folder_where_the_schema_goes_is_named(repo: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """atomic.read_regular on a folder: the old message named the file descriptor (`5: it is a folder`)."""
    monkeypatch.chdir(repo)
    (repo / "folder").mkdir()
    assert _run(capsys, "schema", "--check", "-o", "folder") == (
        1, "unsafe: folder is a folder, not a regular file; specgen reads a file there; give a file path and run "
           "again\n", "")


# --- 9: the template cache --------------------------------------------------------------------------------------------

def test_the_cache_never_creates_home_and_a_failed_write_is_no_cache(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECGEN_NO_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "nonexistent"))
    assert environment._bytecode_cache() is None
    assert not (tmp_path / "nonexistent").exists()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cache = environment._bytecode_cache()
    assert isinstance(cache, FileSystemBytecodeCache) and (tmp_path / "cache" / "specgen").is_dir()
    bucket = Bucket(environment.environment(), "k", "checksum")
    bucket.code = compile("x = 1", "t", "exec")
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, limit[1]))  # a full disk: write() fails with EFBIG
    try:
        cache.dump_bytecode(bucket)  # Jinja raises here; the cache turns it into "not cached"
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
    entries = list((tmp_path / "cache").rglob("*.cache*"))
    assert [e.stat().st_size for e in entries] == []  # its temporary file removed too
    shutil.rmtree(tmp_path / "cache")
    cache.dump_bytecode(bucket)  # the folder vanished: FileNotFoundError, also no cache
    Path(cache.directory).mkdir(parents=True)
    (Path(cache.directory) / (cache.pattern % bucket.key)).write_bytes(bc_magic + b"\xff garbage")
    cache.load_bytecode(bucket)  # a corrupted entry (pickle error): a miss, not a failure
    code: object = bucket.code
    assert code is None
    monkeypatch.setenv("SPECGEN_NO_CACHE", "1")
    assert environment._bytecode_cache() is None


# --- 10: generated files checked out with CRLF --------------------------------------------------------------------------

def test_crlf_only_drift_is_one_line_about_line_endings(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    head = b"# Generated by specgen from m.yaml."  # build's mark: a file without it is not build's own to replace
    (tmp_path / "m" / "model.py").write_bytes(head + b"\r\na = 1\r\nb = 2\r\n")
    (tmp_path / "m" / "train.py").write_bytes(head + b"\r\na = 1\r\nb = 3\r\n")  # CRLF and a real change: the diff
    files = {"model.py": head + b"\na = 1\nb = 2\n", "train.py": head + b"\na = 1\nb = 2\n"}
    reports = check([Output(Path("m.yaml"), "m", files)], tmp_path / ".." / tmp_path.name)
    root = (tmp_path / ".." / tmp_path.name).as_posix()
    assert reports[0] == (f"drifted: {root}/m/model.py (line endings: CRLF on disk, LF expected; add "
                          f"`{root}/** text eol=lf` to .gitattributes)")
    assert reports[1].startswith(f"--- {root}/m/train.py (on disk)") and "-b = 3\r\n" in reports[1]


def test_a_spec_reached_twice_is_one_spec(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A folder plus a file in it, the same file spelled three ways, a link beside it: one spec each time. The old
    code read it twice, and build refused it as a name clash with itself while validate said ok twice."""
    (repo / "specs" / "alias.yaml").symlink_to("digits_mlp.yaml")
    spec = "specs/digits_mlp.yaml"
    for paths in (["specs", spec], [spec, f"./{spec}", str(repo / spec)]):
        code, out, err = _run(capsys, "build", *paths, "--out", "gen")
        assert (code, err, out.splitlines()[-1].rsplit(":", 1)[0]) == (0, "", "built 1 spec(s) into gen"), (out, err)
        code, out, err = _run(capsys, "validate", *paths)
        assert (code, out.count("ok: "), err) == (0, 1, "")
