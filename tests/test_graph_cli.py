"""`specgen graph` on the command line (formats, errors, nothing written on a mistake), its dot and mermaid
text parsed structurally, and `specgen build`'s model.svg under `[tool.specgen] pictures`."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from specgen.cli import main
from specgen.ir.resolve import ir_from_file
from specgen.pictures.graph import render

ROOT = Path(__file__).resolve().parents[1]
RESNET = ROOT / "examples" / "specs" / "digits_resnet.yaml"


def test_writes_the_format_its_suffix_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ir = ir_from_file(RESNET)
    for name, fmt in (("g.svg", "svg"), ("g.html", "html"), ("g.dot", "dot"), ("g.mmd", "mermaid")):
        assert main(["graph", str(RESNET), "-o", str(tmp_path / name)]) == 0
        assert (tmp_path / name).read_text() == render(ir, fmt)
    assert capsys.readouterr().out.splitlines()[0] == f"wrote {tmp_path / 'g.svg'} (svg: 11 layers)"
    page = (tmp_path / "g.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and render(ir, "svg") in page
    assert main(["graph", str(RESNET), "--depth", "0"]) == 0
    assert capsys.readouterr().out == render(ir, "svg", 0)


def test_graph_does_not_import_tensorflow(tmp_path: Path) -> None:
    import subprocess

    code = ("import sys; from specgen.cli import main; "
            f"main(['graph', {str(RESNET)!r}, '-o', {str(tmp_path / 'g.svg')!r}]); print('tensorflow' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.splitlines()[-1] == "False"


@pytest.mark.parametrize(("args", "message"), [
    (["-o", "{out}/g.png"], "specgen graph: error: cannot tell the format of -o {out}/g.png from '.png'; expected a name "
     "ending in .svg, .html, .htm, .dot, .gv, .mmd, .mermaid, or --format svg|html|dot|mermaid"),
    (["-o", "{out}/g.svg", "--format", "dot"], "specgen graph: error: -o {out}/g.svg ends in '.svg' (format svg) but "
     "--format is dot; expected them to agree: drop --format or change the file name"),
])
def test_a_usage_mistake_is_one_line_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        args: list[str], message: str) -> None:
    assert main(["graph", str(RESNET), *(a.format(out=tmp_path) for a in args)]) == 2  # as argparse's mistakes
    assert capsys.readouterr().err == message.format(out=tmp_path) + "\n"
    assert list(tmp_path.iterdir()) == []


def test_dot_is_well_formed() -> None:
    text = render(ir_from_file(RESNET), "dot")
    lines = text.splitlines()
    assert lines[0] == 'digraph "digits_resnet" {' and lines[-1] == "}"
    assert text.count("{") == text.count("}") == 3  # the graph and the clusters stem and block
    nodes = re.findall(r'^\s*"([^"]+)" \[label=', text, re.M)
    assert len(nodes) == len(set(nodes)) == 14  # 1 input, 11 layers, 2 outputs
    edges = re.findall(r'^\s*"([^"]+)" -> "([^"]+)";$', text, re.M)
    assert len(edges) == 14 and {n for e in edges for n in e} <= set(nodes)
    assert ('"stem/relu" -> "block/sum";' in text) and re.search(r'subgraph "cluster_stem" \{ label="stem";', text)


def test_mermaid_is_well_formed() -> None:
    text = render(ir_from_file(RESNET), "mermaid")
    lines = [line.strip() for line in text.splitlines()]
    assert lines[0] == "flowchart TB"
    assert sum(line.startswith("subgraph ") for line in lines) == sum(line == "end" for line in lines) == 2
    nodes = re.findall(r'^(n\d+)\["', "\n".join(lines), re.M)
    assert sorted(nodes, key=lambda n: int(n[1:])) == [f"n{i}" for i in range(14)]  # each once, nested in clusters
    edges = re.findall(r"^(n\d+) --> (n\d+)$", "\n".join(lines), re.M)
    assert len(edges) == 14 and {n for e in edges for n in e} <= set(nodes)


def _project(tmp_path: Path, pictures: str) -> Path:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "digits_resnet.yaml").write_text(RESNET.read_text().replace("../data/", f"{ROOT}/examples/data/"))
    (tmp_path / "pyproject.toml").write_text(f'[tool.specgen]\nspecs = ["specs"]\nout = "gen"\npictures = {pictures}\n')
    return tmp_path


def test_build_writes_and_checks_model_svg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(_project(tmp_path, "true"))
    assert main(["build"]) == 0
    svg = tmp_path / "gen" / "digits_resnet" / "model.svg"
    assert svg.read_text() == render(ir_from_file(tmp_path / "specs" / "digits_resnet.yaml"), "svg")
    svg.write_text(svg.read_text().replace("stem/conv", "stem/conv0"))
    capsys.readouterr()
    assert main(["build", "--check"]) == 1
    assert "--- gen/digits_resnet/model.svg (on disk)" in capsys.readouterr().out
    assert main(["build", "--out", "elsewhere"]) == 0  # pictures belong to the project's own out folder
    assert not (tmp_path / "elsewhere" / "digits_resnet" / "model.svg").exists()


def test_a_pictures_setting_that_is_not_a_flag_is_one_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(_project(tmp_path, '"yes"'))
    assert main(["build"]) == 1
    assert capsys.readouterr().err == ("pyproject.toml: error: [tool.specgen] pictures is 'yes'; expected true or false\n"
                                       "1 error found\n")
    assert not (tmp_path / "gen").exists()
