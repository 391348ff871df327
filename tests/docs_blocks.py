"""The shell examples of README.md and docs/*.md: each `$ command` line of a fenced block with the lines it shows
under it, and the comparison with what the command really printed (tests/test_docs_outputs.py)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
_FENCE = re.compile(r"^\s*(```+|~~~+)")
_EXIT = re.compile(r"^\[exit (\d+)\]$")
TRIM = "..."  # a whole line of it stands for lines the doc leaves out (cli.md says so where it trims)


@dataclass
class Shown:
    """One `$ command` of a doc: where it is, the command and what the doc shows it printing."""

    doc: str  # README.md or docs/x.md
    line: int  # 1-based line of the `$ ` line
    command: str  # without the `$ `, a trailing `# comment` and `.venv/bin/`
    comment: str  # that comment ("after fixing line 15"): it tells two runs of one command apart
    lines: list[str] = field(default_factory=list)  # shown output, [exit N] and trailing blank lines taken off
    exit: int | None = None  # from `[exit N]`, or from a `$ echo $?` right after it

    @property
    def argv(self) -> list[str]:
        """The words of a specgen command (another tool's command, whose quoting may span lines: none)."""
        return shlex.split(self.command) if self.command.split()[:1] == ["specgen"] else []

    @property
    def key(self) -> tuple[str, str]:
        return (self.doc, f"{self.command}  # {self.comment}" if self.comment else self.command)


@dataclass
class Block:
    doc: str
    line: int  # of the opening fence
    shown: list[Shown]

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def _command(raw: str) -> tuple[str, str]:
    """The command and its comment (the docs put two or more spaces before one; no command has `  #` in it)."""
    head, sep, comment = raw.partition("  #")
    if not sep:
        head, sep, comment = raw.partition("\t#")
    command = head.strip()
    if command.startswith(".venv/bin/"):
        command = command[len(".venv/bin/"):]
    return command, comment.strip(" #")


def _segments(doc: str, start: int, body: list[str]) -> list[Shown]:
    shown: list[Shown] = []
    i = 0
    while i < len(body):
        text = body[i]
        if not text.startswith("$ "):
            if shown:
                shown[-1].lines.append(text.rstrip())
            i += 1
            continue
        raw, line = text[2:], start + i + 1
        while raw.endswith("\\") and i + 1 < len(body):  # a command continued on the next line
            i += 1
            raw = raw[:-1] + " " + body[i].strip()
        if raw.strip() == "echo $?" and shown:  # the exit status of the command before, on the next line
            shown[-1].exit = int(body[i + 1].strip())
            i += 2
            continue
        command, comment = _command(raw)
        shown.append(Shown(doc, line, command, comment))
        i += 1
    for one in shown:
        while one.lines and not one.lines[-1]:
            one.lines.pop()
        if one.lines and _EXIT.match(one.lines[-1]):
            one.exit = int(_EXIT.match(one.lines.pop()).group(1))  # type: ignore[union-attr]
            while one.lines and not one.lines[-1]:
                one.lines.pop()
    return shown


def blocks() -> list[Block]:
    """Every fenced block with at least one `$ ` line, in doc order."""
    found: list[Block] = []
    for path in DOCS:
        doc = path.relative_to(ROOT).as_posix()
        lines = path.read_text(encoding="utf-8").split("\n")
        i = 0
        while i < len(lines):
            opening = _FENCE.match(lines[i])
            if not opening:
                i += 1
                continue
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(opening.group(1)):
                j += 1
            shown = _segments(doc, i + 1, lines[i + 1:j])
            if shown:
                found.append(Block(doc, i + 1, shown))
            i = j + 1
    return found


def matches(shown: list[str], real: list[str]) -> bool:
    """Line for line, a `...` line standing for any number of real lines (none included)."""
    # reach[j]: the shown lines so far can account for real[:j]
    reach = [True] + [False] * len(real)
    for line in shown:
        if line.strip() == TRIM:
            for j in range(1, len(real) + 1):
                reach[j] = reach[j] or reach[j - 1]
            continue
        reach = [False] + [reach[j - 1] and real[j - 1] == line for j in range(1, len(real) + 1)]
    return reach[-1]


def yaml_specs() -> list[tuple[str, int, str]]:
    """(doc, line, text) of each ```yaml block that is a whole spec: `specgen:` and `name:` at the top level and
    no `extends:` (a variant needs its base, which the doc does not show beside it)."""
    found = []
    for path in DOCS:
        doc = path.relative_to(ROOT).as_posix()
        for match in re.finditer(r"^```yaml\n(.*?)^```", path.read_text(encoding="utf-8"), re.M | re.S):
            text = match.group(1)
            if re.search(r"^specgen:", text, re.M) and re.search(r"^name:", text, re.M) \
                    and not re.search(r"^extends:", text, re.M):
                found.append((doc, match.string.count("\n", 0, match.start()) + 1, text))
    return found
