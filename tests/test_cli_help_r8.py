"""What `--help` and docs/cli.md say about the command line is what it does (gencli report F4, F6, F8).

- every status the CLI's code returns has its row in docs/cli.md's exit-code table, and the table has no other;
- a word no command knows is refused by that command's parser (`specgen build: error: ...`), for every command;
- the help of `build --out`, `schema -o`, `explain --set` and each `--workers` says what the code does;
- docs/cli.md's table of train's flags holds every flag of `specgen train`;
- the batch-norm warning counts training batches, not "updates", under accumulation.
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import pytest

from specgen.cli import main, parser
from specgen.ir import lints
from specgen.ir.resolve import build_ir
from specgen.runtime.interrupt import SIGNALS, exit_status
from specgen.spec.load import load_spec_text

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "specgen"
CLI_MD = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")


# --- exit statuses ---------------------------------------------------------------------------------


def _module_of(dotted: str) -> Path | None:
    path = ROOT / Path(*dotted.split("."))
    return path.with_suffix(".py") if path.with_suffix(".py").exists() else (
        path / "__init__.py" if (path / "__init__.py").exists() else None)


def _functions(path: Path) -> tuple[dict[str, ast.FunctionDef], dict[str, str]]:
    """A module's functions (methods too) by name, and where each `from X import name` of it comes from."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    functions = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    imported = {alias.asname or alias.name: n.module for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom) and n.module for alias in n.names}
    return functions, imported


def _statuses(path: Path, name: str, seen: set[tuple[Path, str]]) -> set[int]:
    """The statuses function `name` of `path` returns: its integer literals, and what the functions it returns
    the result of return, followed through the modules they are imported from."""
    if (path, name) in seen:
        return set()
    seen.add((path, name))
    functions, imported = _functions(path)
    found: set[int] = set()
    for node in ast.walk(functions[name]):
        if not isinstance(node, ast.Return) or node.value is None:
            continue
        for part in ast.walk(node.value):
            if isinstance(part, ast.Constant) and type(part.value) is int:
                found.add(part.value)
            elif isinstance(part, ast.Call) and isinstance(part.func, ast.Name):
                callee = part.func.id
                if callee == "exit_status":  # 128 + the signal: each signal the commands act on
                    found |= {exit_status(s) for s in SIGNALS}
                elif callee in functions:
                    found |= _statuses(path, callee, seen)
                elif callee in imported and (module := _module_of(imported[callee])) is not None:
                    if callee in _functions(module)[0]:
                        found |= _statuses(module, callee, seen)
    return found


def _code_statuses() -> set[int]:
    """What `specgen` can exit with: cli.main's own statuses and every command's `run`, followed into the
    functions whose result it returns; `SystemExit(exit_status(...))` raised anywhere (train's Ctrl-C/SIGTERM)."""
    seen: set[tuple[Path, str]] = set()
    found = _statuses(PACKAGE / "cli.py", "_main", seen)
    for command in sorted((PACKAGE / "commands").glob("*.py")):
        if "run" in _functions(command)[0]:
            found |= _statuses(command, "run", seen)
    for path in PACKAGE.rglob("*.py"):
        if "SystemExit(exit_status(" in path.read_text(encoding="utf-8"):
            found |= {exit_status(s) for s in SIGNALS}
    return found


def _table_statuses() -> set[int]:
    start = CLI_MD.index("| exit status | meaning |")
    rows = CLI_MD[start:].split("\n\n")[0].splitlines()[2:]
    return {int(row.split("|")[1]) for row in rows}


def test_the_exit_code_table_lists_every_status_the_code_returns() -> None:
    found = _code_statuses()
    assert {0, 1, 2, 3, 130, 141, 143} <= found  # the walk reaches cli, the commands and train's SIGTERM
    assert _table_statuses() == found


def test_the_exit_code_table_names_the_signals_and_gates() -> None:
    table = CLI_MD[CLI_MD.index("| exit status | meaning |"):].split("\n\n")[0]
    assert "`diff --fail-on SECTIONS`: one of those sections breaks" in table
    assert "`serve`: stopped by SIGINT (Ctrl-C) or SIGTERM after answering every request" in table


# --- a word no command knows ------------------------------------------------------------------------


def _commands() -> list[tuple[list[str], argparse.ArgumentParser]]:
    """(the words naming it, its parser) of every command, `import keras` included."""
    def below(words: list[str], p: argparse.ArgumentParser) -> list[tuple[list[str], argparse.ArgumentParser]]:
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            return [(words, p)]
        return [c for name, sub in subs[0].choices.items() for c in below([*words, name], sub)]
    return below([], parser())


def _required(p: argparse.ArgumentParser) -> list[str]:
    """Words that satisfy the parser's required arguments (values are never read: the line is refused first)."""
    words: list[str] = []
    for action in p._actions:
        if not action.option_strings and action.nargs not in ("*", "?", argparse.PARSER, argparse.SUPPRESS):
            words += ["x"] * (action.nargs if isinstance(action.nargs, int) else 1)
        elif action.required and action.option_strings:
            words += [action.option_strings[0], "x"]
    return words


COMMANDS = _commands()


@pytest.mark.parametrize(("words", "command"), COMMANDS, ids=[" ".join(w) for w, _ in COMMANDS])
def test_an_unknown_flag_is_refused_by_the_command_s_own_parser(
        words: list[str], command: argparse.ArgumentParser, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*words, *_required(command), "--bogus"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == \
        f"specgen {' '.join(words)}: error: unrecognized arguments: --bogus"


def test_an_unknown_flag_before_the_command_is_the_top_level_s(capsys: pytest.CaptureFixture[str]) -> None:
    """`specgen --bogus build`: the word is given to specgen, not to build (it was blamed on build)."""
    with pytest.raises(SystemExit) as exited:
        main(["--bogus", "build"])
    assert (exited.value.code, capsys.readouterr().err.splitlines()[-1]) == (
        2, "specgen: error: unrecognized arguments: --bogus")


# --- help texts ---------------------------------------------------------------------------------------


def _help(words: list[str], flag: str) -> str:
    command = dict((" ".join(w), p) for w, p in COMMANDS)[" ".join(words)]
    (action,) = [a for a in command._actions if flag in a.option_strings]
    return str(action.help)


def test_defaults_in_help_are_the_configured_ones() -> None:
    assert _help(["build"], "--out") == \
        "output folder (default: `out` of [tool.specgen] in the nearest pyproject.toml, else generated/)"
    assert _help(["schema"], "-o") == (
        "the schema file (default: `schema` of [tool.specgen] in the nearest pyproject.toml, else "
        "schemas/specgen.schema.json under that pyproject.toml's folder, or the working directory without one)")


def test_explain_set_is_explained_as_validate_s() -> None:
    assert _help(["explain"], "--set") == _help(["validate"], "--set") == \
        "override a value of the merged spec, as train does (repeatable)"


def test_each_workers_help_says_what_it_counts() -> None:
    assert _help(["train"], "--workers") == \
        "the TFJob's Worker replicas, pods each running `specgen train SPEC` (default 2)"
    assert _help(["sweep"], "--workers") == \
        "Worker replicas of each trial's TFJob, pods each running the trial (default 1)"
    assert _help(["serve"], "--workers") == \
        "server processes on the same ports, onnxruntime's threads split between them (default 1)"


def test_every_train_flag_has_its_row_in_cli_md() -> None:
    section = CLI_MD[CLI_MD.index("## `specgen train`"):]
    section = section[:section.index("\n## ")]
    firsts = " ".join(row.split("|")[1] for row in section.splitlines() if row.startswith("| `"))
    train = dict((" ".join(w), p) for w, p in COMMANDS)["train"]
    flags = [f for a in train._actions for f in a.option_strings if f not in ("-h", "--help")]
    missing = [f for f in flags if not re.search(rf"`{re.escape(f)}(?![\w-])", firsts)]
    assert missing == []


# --- the batch-norm warning under accumulation -----------------------------------------------------------


def test_the_momentum_warning_counts_training_batches_under_accumulation() -> None:
    text = ("specgen: 1\nname: lint\ninputs:\n  x: {shape: [8]}\noutputs:\n  y: last\nlayers:\n"
            "  - {name: last, op: batch_norm, momentum: 0.99}\n")
    ir = build_ir(load_spec_text(text))
    assert lints.momentum_warnings(ir, 12, accumulate=4) == [
        "warning: batch-norm momentum 0.99 ('last'): after the 48 planned training batches (12 updates x "
        "accumulate 4) the moving statistics still hold 62% of their initial values (mean 0, variance 1), so "
        "evaluation and export normalize with mostly wrong statistics; momentum 0.939 or lower leaves under 5%"]
    assert lints.momentum_warnings(ir, 48)[0].startswith(
        "warning: batch-norm momentum 0.99 ('last'): after the 48 planned updates the moving statistics")
