"""What `build` deletes in a spec's folder, and what `build --check` says of a changed model.onnx (render/build.py).

Old: `build` deleted any file in `<out>/<name>/` that the spec does not generate, the user's own README.md
included, as "no longer generated"; `--check` said `drifted: .../model.onnx (binary; its text form shows the
change)` when model.onnx.txt was up to date and no diff was printed. Now a file is deleted only when it carries
specgen's mark (render/stale_folders.py's rule for whole folders); any other is named and kept.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specgen.cli import main

ROOT = Path(__file__).resolve().parents[1]
MLP = (ROOT / "examples" / "specs" / "digits_mlp.yaml").read_text()
UNTRAINED = MLP.split("\nloss:")[0] + "\n"  # no loss, optimizers or train: no train.py
KEEPS = "(not written by specgen: remove it by hand; `specgen build` keeps it)"
KEPT = "(not written by specgen: remove it by hand)"


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], list[str]]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


@pytest.fixture
def built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Path:
    """digits_mlp built into gen/ from s.yaml (relative paths, as a user types them); its folder."""
    monkeypatch.chdir(tmp_path)
    Path("s.yaml").write_text(MLP)
    assert main(["build", "s.yaml", "--out", "gen"]) == 0
    capsys.readouterr()
    return tmp_path / "gen" / "digits_mlp"


def _tools_entries(folder: Path) -> dict[Path, str | None]:
    """What tools leave in a folder without asking (None: a folder): Jupyter, git, macOS, TensorBoard, an editor,
    Python's import."""
    made: dict[Path, str | None] = {
        folder / ".ipynb_checkpoints": None, folder / ".ipynb_checkpoints" / "model-checkpoint.py": "x = 1\n",
        folder / ".gitignore": "*.pyc\n", folder / ".DS_Store": "\0\0", folder / ".model.py.swp": "swap",
        folder / "logs": None, folder / "logs" / "events.out": "e", folder / "__pycache__": None}
    for path, text in made.items():
        if text is None:
            path.mkdir()
        else:
            path.write_text(text)
    return made


def test_subfolders_and_dot_names_are_not_looked_at(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Old (4884917): each was `extra:`, so `--check` failed for ever on what Jupyter or git made in the folder."""
    made = _tools_entries(built)
    ok = (0, ["ok: 5 generated files in gen are up to date"], [])
    assert _run(capsys, "build", "s.yaml", "--out", "gen", "--check") == ok
    assert _run(capsys, "build", "s.yaml", "--out", "gen") == (0, ["built 1 spec(s) into gen: 0 file(s) changed"], [])
    assert _run(capsys, "build", "s.yaml", "--out", "gen", "--check") == ok
    assert {p: None if p.is_dir() else p.read_text() for p in made} == made  # all left as they were


def test_a_file_specgen_did_not_write_is_named_and_kept(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (built / "README.md").write_text("# my notes\n")
    _tools_entries(built)  # not named beside it
    assert _run(capsys, "build", "s.yaml", "--out", "gen", "--check") == (1, [
        f"extra: gen/digits_mlp/README.md {KEEPS}",
    ], ["specgen build --check: 1 file(s) out of date; remove the file(s) named by hand"])
    assert _run(capsys, "build", "s.yaml", "--out", "gen") == (0, ["built 1 spec(s) into gen: 0 file(s) changed"], [
        f"specgen build: kept gen/digits_mlp/README.md {KEPT}",
    ])
    assert (built / "README.md").read_text() == "# my notes\n"


def test_only_files_with_specgens_mark_are_removed(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A spec that does not train gets no train.py: a generated one (with the header) left in its folder goes, a
    hand-written one stays; a model.svg as specgen draws it (titled with the spec's name) goes, another stays."""
    Path("u.yaml").write_text(UNTRAINED)
    assert main(["build", "u.yaml", "--out", "u"]) == 0
    capsys.readouterr()
    folder = Path("u", "digits_mlp")
    (folder / "train.py").write_bytes((built / "train.py").read_bytes())
    (folder / "model.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg" width="1">\n<title>digits_mlp</title>\n'
                                      "</svg>\n")
    assert _run(capsys, "build", "u.yaml", "--out", "u", "--check") == (1, [
        "stale: u/digits_mlp/model.svg is no longer generated",
        "stale: u/digits_mlp/train.py is no longer generated",
    ], ["specgen build --check: 2 file(s) out of date; run `specgen build`"])
    assert _run(capsys, "build", "u.yaml", "--out", "u") == (0, [
        "removed u/digits_mlp/model.svg (no longer generated)",
        "removed u/digits_mlp/train.py (no longer generated)",
        "built 1 spec(s) into u: 2 file(s) changed (2 removed)",
    ], [])
    (folder / "train.py").write_text("# my own training loop\n")
    (folder / "model.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg">\n<title>mine</title>\n</svg>\n')
    assert _run(capsys, "build", "u.yaml", "--out", "u") == (0, ["built 1 spec(s) into u: 0 file(s) changed"], [
        f"specgen build: kept u/digits_mlp/model.svg {KEPT}",
        f"specgen build: kept u/digits_mlp/train.py {KEPT}",
    ])
    assert (folder / "train.py").read_text() == "# my own training loop\n"


def test_a_file_of_specgen_and_one_of_the_user_in_one_check(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (built / "collections.yaml").unlink()
    (built / "notes.txt").write_text("mine\n")
    assert _run(capsys, "build", "s.yaml", "--out", "gen", "--check") == (1, [
        "missing: gen/digits_mlp/collections.yaml (run `specgen build`)",
        f"extra: gen/digits_mlp/notes.txt {KEEPS}",
    ], ["specgen build --check: 2 file(s) out of date; run `specgen build` and remove the file(s) named by hand"])


def test_a_changed_binary_says_what_is_true_of_its_text_form(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    onnx, text = built / "model.onnx", built / "model.onnx.txt"
    # the binary alone, emptied as a power loss can leave it (no diff to show): a model.onnx with other bytes is not
    # build's own (tests/test_build_owned_r13.py)
    onnx.write_bytes(b"")
    summary = ["specgen build --check: 1 file(s) out of date; run `specgen build`"]
    assert _run(capsys, "build", "s.yaml", "--out", "gen", "--check") == (1, [
        "drifted: gen/digits_mlp/model.onnx (binary; its text form model.onnx.txt is up to date: the binary itself "
        "was edited or damaged; run `specgen build`)"], summary)
    original = text.read_text()
    text.write_text(original + "# changed\n")
    code, out, err = _run(capsys, "build", "s.yaml", "--out", "gen", "--check")
    assert (code, out[0], out[-2:], err) == (1, "--- gen/digits_mlp/model.onnx.txt (on disk)", [
        "-# changed",
        "drifted: gen/digits_mlp/model.onnx (binary; its text form model.onnx.txt differs too, as shown above; run "
        "`specgen build`)"], [summary[0].replace("1 file", "2 file")])
    text.unlink()
    assert _run(capsys, "build", "s.yaml", "--out", "gen", "--check") == (1, [
        "missing: gen/digits_mlp/model.onnx.txt (run `specgen build`)",
        "drifted: gen/digits_mlp/model.onnx (binary; its text form model.onnx.txt is missing too; run "
        "`specgen build`)"], [summary[0].replace("1 file", "2 file")])
