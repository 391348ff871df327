"""The suite runs against an installed wheel in CI, where the repository root is not on sys.path."""

from __future__ import annotations

import re
from pathlib import Path


def test_no_test_imports_the_tests_folder_as_a_package() -> None:
    """`from tests.x import y` works only in an editable install; CI would fail to collect the file."""
    offenders = [f"{path.name}:{number}" for path in sorted(Path(__file__).parent.glob("*.py"))
                 for number, line in enumerate(path.read_text().splitlines(), 1)
                 if re.match(r"\s*(from|import)\s+tests(\.|\s|$)", line)]
    assert not offenders, f"import sibling test modules by their bare name (pytest puts tests/ on sys.path): {offenders}"
