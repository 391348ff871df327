"""Every flag of every subcommand's `--help` is in docs/cli.md's command table, in that command's row.

A row whose synopsis ends in `[...]` (train, infer, serve: too many flags for one cell) defers to the pages it
links to, and every flag must be on one of those instead. The flags come from the real parser, so a new flag
without its row fails here, not in a reader's hands.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from specgen.cli import parser

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(found[0].choices) if found else {}


def _commands() -> list[tuple[str, argparse.ArgumentParser]]:
    """(`validate`, its parser) for each command; a command with commands of its own (`import keras`) gives those."""
    commands: list[tuple[str, argparse.ArgumentParser]] = []
    for name, sub in _subparsers(parser()).items():
        inner = _subparsers(sub)
        commands += [(f"{name} {n}", p) for n, p in inner.items()] if inner else [(name, sub)]
    return commands


def _rows() -> dict[str, str]:
    rows: dict[str, str] = {}
    for line in (DOCS / "cli.md").read_text(encoding="utf-8").splitlines():
        match = re.match(r"\| `specgen ([a-z-]+(?: [a-z]+)?)[ `]", line)
        if match and not match.group(1).startswith("-"):  # `specgen --version` is no command
            rows.setdefault(match.group(1), line)
    return rows


def _named(flag: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text) is not None


COMMANDS = _commands()


@pytest.mark.parametrize(("name", "command"), COMMANDS, ids=[n for n, _ in COMMANDS])
def test_every_flag_is_in_the_command_table(name: str, command: argparse.ArgumentParser) -> None:
    rows = _rows()
    row = rows.get(name)
    assert row is not None, f"docs/cli.md's command table has no row for `specgen {name}`"
    synopsis = row.split("|")[1]
    where, text = "its row", row
    if "[...]" in synopsis:
        pages = re.findall(r"\]\(([a-z_]+\.md)", row)
        assert pages, f"`specgen {name}`'s row says [...] and links to no page that lists its flags"
        where, text = f"its row's pages {pages}", "".join((DOCS / page).read_text(encoding="utf-8") for page in pages)
    flags = [a.option_strings for a in command._actions if a.option_strings and "--help" not in a.option_strings]
    missing = [f[-1] for f in flags if not any(_named(one, text) for one in f)]
    assert not missing, f"`specgen {name} --help` has {missing}, which docs/cli.md does not show in {where}"


def test_every_command_has_a_row() -> None:
    """And no row names a command that does not exist (a rename left behind)."""
    names = {name for name, _ in COMMANDS}
    rows = set(_rows())
    assert rows == names, (sorted(names - rows), sorted(rows - names))
