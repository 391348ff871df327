"""`specgen build`: golden files, byte-identical rebuilds, --check diffs, nothing half-written."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from specgen.cli import main
from specgen.kinds.ops import REGISTRY
from specgen.render.environment import templates_dir

ROOT = Path(__file__).resolve().parents[1]
SPECS = sorted((ROOT / "examples" / "specs").glob("*.yaml"))
DIGITS_CNN, DIGITS_MLP = ROOT / "examples" / "specs" / "digits_cnn.yaml", ROOT / "examples" / "specs" / "digits_mlp.yaml"
FILES = ("model.py", "train.py", "collections.yaml", "model.onnx.txt", "model.onnx")  # every example trains


def build(out: Path, *paths: Path) -> int:
    return main(["build", *map(str, paths or SPECS), "--out", str(out)])


def test_generated_folder_matches_the_examples(tmp_path: Path) -> None:
    """Golden test: the checked-in generated/ is exactly what the examples render to."""
    assert build(tmp_path) == 0
    for spec in SPECS:
        name = spec.stem
        for file in FILES:
            assert (tmp_path / name / file).read_bytes() == (ROOT / "generated" / name / file).read_bytes(), (name, file)


def test_two_builds_are_byte_identical(tmp_path: Path) -> None:
    assert build(tmp_path / "a") == 0
    assert build(tmp_path / "b") == 0
    for spec in SPECS:
        for file in FILES:
            assert (tmp_path / "a" / spec.stem / file).read_bytes() == (tmp_path / "b" / spec.stem / file).read_bytes()


def test_check_passes_on_the_repo(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["build", "--check"]) == 0
    assert "up to date" in capsys.readouterr().out


def test_check_prints_a_diff_and_fails_on_drift(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = ROOT / "examples" / "specs" / "digits_mlp.yaml"
    assert build(tmp_path, spec) == 0
    model_py = tmp_path / "digits_mlp" / "model.py"
    model_py.write_text(model_py.read_text().replace('name="hidden/kernel"', 'name="hidden/kernel2"'))
    (tmp_path / "digits_mlp" / "model.onnx").unlink()
    (tmp_path / "digits_mlp" / "leftover.txt").write_text("old")
    before = {p: p.read_bytes() for p in (tmp_path / "digits_mlp").iterdir()}
    capsys.readouterr()
    assert main(["build", str(spec), "--out", str(tmp_path), "--check"]) == 1
    out = capsys.readouterr().out
    removed = [line for line in out.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line for line in out.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert len(removed) == len(added) == 1
    assert removed[0].endswith('name="hidden/kernel2"') and added[0].endswith('name="hidden/kernel"')
    assert f"missing: {tmp_path / 'digits_mlp' / 'model.onnx'}" in out
    assert (f"extra: {tmp_path / 'digits_mlp' / 'leftover.txt'} (not written by specgen: remove it by hand; "
            "`specgen build` keeps it)") in out.splitlines()
    assert {p: p.read_bytes() for p in (tmp_path / "digits_mlp").iterdir()} == before  # --check writes nothing


def test_build_removes_stale_files(tmp_path: Path) -> None:
    """A file of specgen's (with its mark) that the spec no longer generates: train.py, once the spec cannot train.
    A file specgen did not write is kept (tests/test_build_stale_r8.py)."""
    spec = ROOT / "examples" / "specs" / "digits_mlp.yaml"
    assert build(tmp_path, spec) == 0
    untrained = tmp_path / "untrained.yaml"
    untrained.write_text(spec.read_text().split("\nloss:")[0] + "\n")
    assert build(tmp_path, untrained) == 0
    assert sorted(p.name for p in (tmp_path / "digits_mlp").iterdir()) == sorted(set(FILES) - {"train.py"})


def test_one_bad_spec_writes_nothing_at_all(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(DIGITS_CNN.read_text().replace("op: flatten", "op: flaten"))
    out = tmp_path / "out"
    assert build(out, DIGITS_CNN, bad) == 1
    assert not out.exists()
    err = capsys.readouterr().err
    assert "unknown op 'flaten'; did you mean 'flatten'?" in err
    assert "Traceback" not in err


def test_same_spec_name_twice_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "copy.yaml"
    shutil.copy(SPECS[0], copy)
    assert build(tmp_path / "out", SPECS[0], copy) == 1
    assert f"spec name '{SPECS[0].stem}' is also used by" in capsys.readouterr().err


def test_onnx_pins_ir_version_and_opset() -> None:
    model = onnx.load(str(ROOT / "generated" / "digits_cnn" / "model.onnx"))
    assert model.ir_version == 10
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 21)]
    assert [i.name for i in model.graph.input][:1] == ["image"]
    assert [o.name for o in model.graph.output] == ["logits"]
    batch = model.graph.input[0].type.tensor_type.shape.dim[0]
    assert batch.dim_param == "batch"
    onnx.checker.check_model(model, full_check=True)


def test_opset_18_pins_ir_version_8(tmp_path: Path) -> None:
    text = DIGITS_MLP.read_text().replace("name: digits_mlp", "name: old_opset") + "\nexport: {onnx: {opset: 18}}\n"
    spec = tmp_path / "old.yaml"
    spec.write_text(text)
    assert build(tmp_path / "out", spec) == 0
    model = onnx.load(str(tmp_path / "out" / "old_opset" / "model.onnx"))
    assert (model.ir_version, model.opset_import[0].version) == (8, 18)


def test_generated_files_say_they_are_generated() -> None:
    for spec in SPECS:
        for file in ("model.py", "train.py", "collections.yaml", "model.onnx.txt"):
            first = (ROOT / "generated" / spec.stem / file).read_text().splitlines()[0]
            assert first.startswith("# Generated by specgen from ") and spec.name in first, (spec, file)
            assert first.endswith("Do not edit: change the spec and run `specgen build`."), (spec, file)


def test_every_op_has_a_template_in_the_installed_package() -> None:
    folder = templates_dir()
    for op in REGISTRY.values():
        assert (folder / "tf" / "ops" / f"{op.tf_template}.py.j2").is_file(), op.name
        for template in op.onnx_templates:
            assert (folder / "onnx" / "ops" / f"{template}.onnx.j2").is_file(), op.name


FAMILY_WIDE = Path(__file__).resolve().parents[1] / "examples" / "specs" / "family" / "wide.yaml"


def test_validate_and_build_never_import_tensorflow(tmp_path: Path) -> None:
    """Nor do diff, explain and validate --resolved (docs/review.md, docs/spec.md#composing-specs)."""
    code = (
        "import sys\n"
        "from specgen.cli import main\n"
        f"assert main(['validate', *{[str(s) for s in SPECS]!r}]) == 0\n"
        f"assert main(['build', *{[str(s) for s in SPECS]!r}, '--out', {str(tmp_path)!r}]) == 0\n"
        f"assert main(['report', {str(SPECS[0])!r}]) == 0\n"
        f"assert main(['diff', {str(SPECS[0])!r}, {str(SPECS[0])!r}, '--map', '--fail-on', 'interface,checkpoint']) == 0\n"
        f"assert main(['validate', {str(FAMILY_WIDE)!r}, '--resolved']) == 0\n"
        f"assert main(['explain', {str(FAMILY_WIDE)!r}, 'layers[conv1].filters']) == 0\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'onnxruntime'))\n"
        "print('HEAVY', heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "HEAVY []" in result.stdout


def _many_specs(folder: Path, count: int) -> list[Path]:
    """`count` specs (the examples under new names): enough for the worker-pool path."""
    folder.mkdir()
    paths = []
    for i in range(count):
        source = SPECS[i % len(SPECS)]
        path = folder / f"{source.stem}_{i}.yaml"
        path.write_text(source.read_text().replace(f"name: {source.stem}\n", f"name: {source.stem}_{i}\n"))
        paths.append(path)
    return paths


def test_parallel_build_equals_serial_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker pool renders and writes exactly what one process does; files get 0666 less the umask."""
    from specgen.render import build as build_module

    specs = _many_specs(tmp_path / "specs", build_module.PARALLEL_FROM + 2)
    old_mask = os.umask(0o027)
    try:
        assert build(tmp_path / "pool", *specs) == 0
        monkeypatch.setattr(build_module, "PARALLEL_FROM", 10**6)
        assert build(tmp_path / "serial", *specs) == 0
    finally:
        os.umask(old_mask)
    pool = sorted(p.relative_to(tmp_path / "pool") for p in (tmp_path / "pool").rglob("*"))
    serial = sorted(p.relative_to(tmp_path / "serial") for p in (tmp_path / "serial").rglob("*"))
    assert pool == serial and len(pool) == len(specs) * (1 + len(FILES))  # folders and files, no temp files
    for rel in pool:
        a, b = tmp_path / "pool" / rel, tmp_path / "serial" / rel
        if a.is_file():
            assert a.read_bytes() == b.read_bytes(), rel
            assert stat.S_IMODE(a.stat().st_mode) == stat.S_IMODE(b.stat().st_mode) == 0o640, rel


def test_parallel_build_with_one_bad_spec_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from specgen.render.build import PARALLEL_FROM

    specs = _many_specs(tmp_path / "specs", PARALLEL_FROM + 2)
    bad = next(p for p in reversed(specs) if "op: flatten" in p.read_text())  # not every example flattens
    bad.write_text(bad.read_text().replace("op: flatten", "op: flaten"))
    assert build(tmp_path / "out", *specs) == 1
    assert not (tmp_path / "out").exists()
    err = capsys.readouterr().err
    assert f"{bad}:" in err and "unknown op 'flaten'; did you mean 'flatten'?" in err



# `one` is read only inside the If's then-branch, `axes` by no node; `flag` decides the branch.
UNREAD = """g (float[2] x, bool flag) => (float[2] y)
<int64[1] axes = {0}, float[1] one = {1.0}>
{
  y = If (flag) <then_branch = t () => (float[2] z) {z = Add (x, one)}, else_branch = e () => (float[2] w) {w = Identity (x)}>
}
"""


@pytest.mark.parametrize(("text", "unread"), [(UNREAD, ["axes"]),
                                              (UNREAD.replace("int64[1] axes = {0}, ", ""), [])])
def test_an_initializer_no_node_reads_is_found_through_subgraphs(text: str, unread: list[str]) -> None:
    """Each op's plan makes only the constants its chosen nodes read (onnxruntime warns about each other one at
    every session start, and they are bytes for nothing): render/files.py refuses a generated graph with one, so
    every build and every op case checks it. A read inside a subgraph counts."""
    from specgen.render.files import _unread_initializers

    assert _unread_initializers(onnx.parser.parse_graph(text)) == unread
