"""Helpers of the registry completeness tests (tests/test_<axis>_registry.py): docs tables and own tests."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args

ROOT = Path(__file__).resolve().parents[1]


def table_kinds(doc: str, heading: str) -> set[str]:
    """Names in backticks in the first cell of the table rows of section `heading` of docs/<doc>
    (up to the next heading of any level)."""
    text = (ROOT / "docs" / doc).read_text()
    assert f"\n{heading}\n" in text, f"docs/{doc} has no heading {heading!r}"
    section = re.split(r"\n#+ ", text.split(f"\n{heading}\n", 1)[1], maxsplit=1)[0]
    return {name for line in section.splitlines() if line.startswith("| ")
            for name in re.findall(r"`([a-z0-9_]+)`", line.split("|")[1])}


def has_own_test(name: str) -> bool:
    """A kind whose parity test has a file of its own: tests/test_<kind>.py."""
    return (ROOT / "tests" / f"test_{name}.py").is_file()


def union_members(union: Any) -> tuple[Any, ...]:
    """The models of an Annotated discriminated union."""
    inner = get_args(union)[0]
    return get_args(inner) or (inner,)


def literal_names(model: Any, field: str) -> tuple[str, ...]:
    return get_args(model.model_fields[field].annotation)
