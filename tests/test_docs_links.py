"""Every relative link in README.md, docs/, bench/ and examples/ Markdown points at a file that exists and,
with a `#fragment`, at a heading of that file (GitHub's anchors: lower case, punctuation dropped, spaces
to hyphens, repeats suffixed -1, -2). A renamed section or moved file breaks the docs silently otherwise."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("bench/*.md"), *ROOT.glob("examples/**/*.md")])
LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown page."""
    seen: Counter[str] = Counter()
    found: set[str] = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        match = re.match(r"#{1,6}\s+(.*)", line)
        if not match:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
        found.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return found


def links(page: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(FENCE.sub("", page.read_text()))
            if not re.match(r"[a-z]+:", m.group(1))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for link in links(page):
        target, _, fragment = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            broken.append(f"{link}: no file {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
        elif fragment and path.suffix == ".md" and fragment not in anchors(path):
            broken.append(f"{link}: no heading #{fragment} in {path.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)


# Code, templates and messages point readers at docs sections too ("docs/training.md#precision"); a renamed
# heading leaves them pointing nowhere, and no Markdown link check sees them. (Tests are left out: they name
# made-up pages on purpose.)
CODE_REFERENCE = re.compile(r"docs/([\w-]+\.md)(?:#([\w-]+))?")
SOURCES = sorted([*ROOT.glob("specgen/**/*.py"), *ROOT.glob("templates/**/*.j2")], key=str)


def code_references(source: Path) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2) or "") for m in CODE_REFERENCE.finditer(source.read_text())]


def test_docs_references_in_the_code_resolve() -> None:
    broken = []
    for source in SOURCES:
        for page, fragment in code_references(source):
            path = ROOT / "docs" / page
            if not path.exists():
                broken.append(f"{source.relative_to(ROOT)}: docs/{page}: no such page")
            elif fragment and fragment not in anchors(path):
                broken.append(f"{source.relative_to(ROOT)}: docs/{page}#{fragment}: no such heading")
    assert not broken, "\n".join(broken)


def test_the_checker_finds_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "a.md"
    page.write_text("# Top\n## Two words, here\n```\n# not a heading\n```\n[x](a.md#two-words-here) [y](b.md)\n")
    assert anchors(page) == {"top", "two-words-here"}
    assert links(page) == ["a.md#two-words-here", "b.md"]
    source = tmp_path / "m.py"
    source.write_text('"""x (docs/training.md#precision), y (docs/serve.md)."""')
    assert code_references(source) == [("training.md", "precision"), ("serve.md", "")]


# Where the project's own machines keep checkouts, scratch runs and virtualenvs: output pasted from one of them
# into the docs shows a reader a path that means nothing on theirs (a sweep's study printed as sqlite:////tmp/...).
MACHINE_PATHS = re.compile(r"(?<![\w.])(/work/|/tmp/scratch|/tmp/pytest-of-|/root/|/home/runner/|\.venv/lib/python)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_machine_paths_in_the_docs(page: Path) -> None:
    found = [f"{n}: {line.strip()[:120]}" for n, line in enumerate(page.read_text().splitlines(), 1)
             if MACHINE_PATHS.search(line)]
    assert found == [], f"{page.relative_to(ROOT)} shows paths of the machine the output was made on"
