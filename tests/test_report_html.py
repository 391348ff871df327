"""`specgen report --html` of a real trained and exported run: sections, self-contained, and in real Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from specgen.cli import main
from specgen.pictures.curves import read_run
from specgen.report.export_lines import export_lines
from specgen.report.html import SECTIONS

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = Path(os.environ.get("SPECGEN_ARTIFACTS", ROOT / "tests" / "artifacts"))


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("report")
    spec = tmp / "mlp.yaml"
    text = (ROOT / "examples/specs/digits_mlp.yaml").read_text().replace("../data/digits.npz",
                                                                          str(ROOT / "examples/data/digits.npz"))
    spec.write_text(text + "checkpoint: {dir: run, every_steps: 1000}\n")
    run = tmp / "run"
    assert main(["train", str(spec), "--steps", "40", "--quiet"]) == 0
    assert main(["export", str(spec), "--checkpoint", str(run), "-o", str(run / "export")]) == 0
    out = tmp / "report.html"
    assert main(["report", str(spec), "--html", "--run", str(run), "-o", str(out)]) == 0
    return out, run


def test_every_section_with_its_content(page: tuple[Path, Path]) -> None:
    out, run = page
    text = out.read_text()
    assert re.findall(r'<section id="([a-z]+)">', text) == list(SECTIONS)
    report = json.loads((run / "export" / "export.json").read_text())
    for line in export_lines(report):  # the parity and accuracy lines, as `specgen export` printed them
        assert line in text
    assert "hidden/kernel" in text and "<title>digits_mlp</title>" in text  # variables table, graph SVG
    assert text.count("<svg") == 2  # the graph and the curves


def test_train_logs_each_optimizers_learning_rate(page: tuple[Path, Path]) -> None:
    rates = {s.tag: s for s in read_run(page[1]) if s.stage == "train"}["learning_rate/all"]
    assert rates.steps == (20, 40)
    # Inside the 50-step linear warm-up of a 0.002 rate: it grows and stays below the peak.
    assert 0 < rates.values[0] < rates.values[1] < 0.002


def test_the_page_fetches_nothing(page: tuple[Path, Path]) -> None:
    text = page[0].read_text()
    assert re.findall(r'(?:href|src)="([^#"][^"]*)"', text) == []  # every link is to an anchor of the page
    assert "<script" not in text and "@import" not in text and "url(" not in text.replace("url(#", "")
    # http appears only as XML namespace names (never fetched).
    assert set(re.findall(r'(\S+)="https?://', text)) <= {"xmlns", "xmlns:xlink"}


def test_chromium_draws_the_page(page: tuple[Path, Path], tmp_path: Path) -> None:
    browser = shutil.which("chromium")
    if browser is None:
        pytest.skip("chromium is not installed (.ci/run installs Debian's chromium where it can: root and apt-get)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report_html.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path}", "--window-size=1280,4000"]
    dom = subprocess.run([browser, *flags, "--enable-logging=stderr", "--v=0", "--dump-dom", page[0].as_uri()],
                         capture_output=True, text=True, timeout=120, check=True)
    assert re.findall(r'<section id="([a-z]+)">', dom.stdout) == list(SECTIONS)
    # The page's console messages and failed loads are logged as CONSOLE lines: there must be none.
    assert [line for line in dom.stderr.splitlines() if "CONSOLE" in line or "net::ERR" in line] == []
    subprocess.run([browser, *flags, f"--screenshot={shot}", page[0].as_uri()], capture_output=True, timeout=120,
                   check=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_two_pictures_on_one_page_have_unique_ids_that_resolve_in_their_own_picture() -> None:
    """`report --html --run RUN --sweep DIR` inlined two matplotlib SVGs whose ids were alike (`figure_1`, the glyph
    `DejaVuSans-14`): 147 duplicate ids on one page, each reference resolving to the first picture's (pictures
    checker F2). Each picture's ids and references get its section's prefix."""
    from specgen.pictures.curves import Series, render
    from specgen.report.html import inline_svg

    svg = render([[Series("run", "train", "loss", (0, 1, 2), (1.0, 0.5, 0.25))]]).decode()
    raw = re.findall(r'\bid="([^"]*)"', svg)
    assert raw and re.search(r'href="#', svg)  # the picture has ids and references: the check below can fail
    pictures = {prefix: inline_svg(svg, prefix) for prefix in ("curves", "sweep")}
    ids = [i for body in pictures.values() for i in re.findall(r'\bid="([^"]*)"', body)]
    assert len(ids) == len(set(ids)) == 2 * len(raw)
    for prefix, body in pictures.items():
        own = set(re.findall(r'\bid="([^"]*)"', body))
        refs = set(re.findall(r'(?:href="#|url\(#)([^")]*)', body))
        assert refs and refs <= own and all(i.startswith(f"{prefix}-") for i in own)
