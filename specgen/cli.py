"""The `specgen` command line: the parser, built from specgen/commands/'s table, and the one place
where errors become what a person reads.

Spec mistakes print `path:line:col: error: message` lines and exit 1; they never print a traceback.
Each command is one module of specgen/commands/ (its flags and its `run`); this module only assembles
them and turns errors into lines and exit statuses. Only the module of the command that runs is imported:
`specgen --version`, `--help` and a pre-commit hook's start pay for argparse, not for the spec and IR stack.
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any, TextIO, cast

from specgen import __version__, native_logs, startup
from specgen.commands import COMMANDS, load
from specgen.errors import SpecgenError, UsageError
from specgen.extras import from_missing
from specgen.runtime.interrupt import pending, raising_interrupts


class _CommandParser(argparse.ArgumentParser):
    """One command's parser, whose module is imported (and its flags added) when first needed: argparse hands a
    command's words to its own parser, so `specgen train ...` imports commands/train.py alone and `specgen --help`
    (the command list, from COMMANDS) imports none."""

    def __init__(self, *args: Any, module: str = "", **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._module = module  # "" once loaded, and for the parsers a command adds itself (`import keras`)

    def load(self) -> _CommandParser:
        if self._module:
            command, self._module = load(self._module), ""
            command.add_arguments(self)
            self.set_defaults(run=command.run)
        return self

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self.load()
        return super().parse_known_args(args, namespace)


def parser(lazy: bool = False) -> argparse.ArgumentParser:
    """`specgen`'s parser; every command's flags are there, unless `lazy` (main): then a command's module is
    imported only when the command line names it."""
    top = argparse.ArgumentParser(prog="specgen", description="Declarative TensorFlow training specs.")
    top.add_argument("--version", action="version", version=f"specgen {__version__}")
    top.add_argument("--verbose", action="store_true",
                     help="show TensorFlow's own start-up and INFO logs (hidden by default; so does setting "
                          "TF_CPP_MIN_LOG_LEVEL yourself)")
    # Not `required`: argparse would then refuse `specgen --bogus` for the missing command before naming the flag it
    # did not know; _parse says which is wrong.
    sub = top.add_subparsers(dest="command", parser_class=_CommandParser)
    for name, module, help_text in COMMANDS:
        command = sub.add_parser(name, help=help_text, module=module)
        if not lazy:
            command.load()
    return top


def _parse(top: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """`top.parse_args(argv)`, but words no parser took are refused by the command's own parser: argparse leaves
    them to the top one, whose line named no command (`specgen: error: unrecognized arguments: --bogus`), unlike
    every other usage error of a command (`specgen build: error: ...`, docs/cli.md's exit codes)."""
    args, extras = top.parse_known_args(argv)
    if getattr(args, "command", None) is None:  # `specgen`, `specgen --bogus`: the unknown word first, it is the slip
        top.error(f"unrecognized arguments: {' '.join(extras)}" if extras else
                  "the following arguments are required: command")  # exits 2, as argparse does
    if extras:
        words = list(sys.argv[1:] if argv is None else argv)
        command = getattr(args, "command", None)
        before = command in words and extras[0] in words and words.index(extras[0]) < words.index(command)
        chosen = top if before else _chosen(top, args)  # `specgen --bogus build`: the top level's word, not build's
        chosen.error(f"unrecognized arguments: {' '.join(extras)}")  # exits 2, as argparse does
    return args


def _chosen(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost parser the command line chose, through each level's command word (`specgen import keras`)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and getattr(args, action.dest, None) in action.choices:
            return _chosen(action.choices[getattr(args, action.dest)], args)
    return parser


def _quiet_broken_pipe() -> int:
    """stdout's reader went away (`specgen report | head`): exit quietly, the Python-docs way.

    Later writes (and the flush at exit) go to /dev/null instead of raising again; 141 is what
    a shell reports for a program stopped by SIGPIPE, so `set -o pipefail` scripts see it.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout without a file descriptor (tests capture it)
        pass
    return 141


def main(argv: Sequence[str] | None = None) -> int:
    with raising_interrupts():  # a Ctrl-C Python swallows (a weakref callback, a __del__) is not lost
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    try:
        args = _parse(parser(lazy=True), argv)  # imports the command's module: a Ctrl-C may land here too
        if pending():  # one Python swallowed while importing
            raise KeyboardInterrupt
        gc.freeze()  # start-up objects are long-lived: keep full collections from rescanning them
        if sys.stdout is None:  # fd 1 closed at start (`>&-`): Python sets sys.stdout to None
            return _stdout_closed()
        # A command that never loads TensorFlow sets native_logs=False: its stderr is the real one (commands/serve.py)
        filtered = getattr(args, "native_logs", True)
        _whole_lines()
        with startup.trimmed(), native_logs.quiet(args.verbose) if filtered else nullcontext(), _marked_stdout():
            code = int(args.run(args))
            sys.stdout.flush()  # a closed pipe or a full disk shows up here, inside the handlers, not at exit
        return code
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except ModuleNotFoundError as exc:  # an optional extra's package, on a path no `extras.need()` checked first
        missing = from_missing(exc, f"specgen {_command_word(argv)}".rstrip())
        if missing is None:  # specgen's own module, or a broken install: a bug to see whole
            raise
        return _refused(missing)
    except (SpecgenError, OSError) as exc:  # the one place: every error meant for a person, never a traceback
        return _refused(exc)
    except KeyboardInterrupt:
        return _interrupted(argv)
    except Exception:
        if pending():  # a Ctrl-C a library turned into its own error (pydantic's SchemaError while it imports)
            return _interrupted(argv)
        raise  # a bug: seen whole


def _interrupted(argv: Sequence[str] | None) -> int:
    """Ctrl-C, for every command and at any moment (imports, reading, TensorFlow's start): one line and the
    status a shell gives for SIGINT, never a traceback. A command that knows more about what it leaves on disk
    says so itself and exits 130 on its own (`specgen train` names the checkpoint to continue from); here the
    command had not got that far, or writes its files atomically (whole or not at all)."""
    command = _command_word(argv)
    print(f"\nspecgen{' ' + command if command else ''}: interrupted (Ctrl-C); it stopped before it finished",
          file=sys.stderr)
    return 130


def _command_word(argv: Sequence[str] | None) -> str:
    """The command the line names (`train`), or "" (read from the words: the parser may not have finished)."""
    words = list(sys.argv[1:] if argv is None else argv)
    return next((w for w in words if not w.startswith("-")), "")


def _stdout_closed() -> int:
    """Refuse before any work: every command prints its results to stdout, and a command that wrote its files and
    then failed to say so (or drew a picture to nowhere) would leave the caller unable to tell what happened."""
    print("specgen: error: standard output is closed (the command was started with >&-); specgen prints its "
          "results there, so it did nothing: redirect it to a file or to /dev/null instead", file=sys.stderr)
    return 1


class _MarkedStream:
    """Standard output while a command runs: what its write or flush raises is marked as standard output's, so
    `_refused` can say so (an OSError from print() names no file). Everything else is the stream's own."""

    def __init__(self, stream: Any):
        self._stream = stream

    def write(self, data: Any) -> Any:
        try:
            try:
                return self._stream.write(data)
            except UnicodeEncodeError:  # a path the stream's encoding cannot spell (PYTHONIOENCODING=ascii, a cp1252
                # console): escaped as Python escapes it on stderr, not a traceback after the files were written
                encoding = getattr(self._stream, "encoding", None) or "utf-8"
                return self._stream.write(data.encode(encoding, "backslashreplace").decode(encoding))
        except OSError as exc:
            exc.specgen_stdout = True  # type: ignore[attr-defined]
            raise

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            exc.specgen_stdout = True  # type: ignore[attr-defined]
            raise

    @property
    def buffer(self) -> _MarkedStream:  # `specgen curves` writes its PNG bytes there
        return _MarkedStream(self._stream.buffer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _whole_lines() -> None:
    """Each line of stdout and stderr in one write. Python's stderr writes through to its file (stdout too under
    PYTHONUNBUFFERED, as a sweep runs its trials), so a print is two writes, its text and its newline; with both
    streams in one log (a sweep's trial log) and stderr relayed by native_logs' thread, a line of the other stream
    landed between them (`...going on without ittraining tracked_sweep: step 0 -> 5`), and the sweep could not read
    the tracker's warning. Line buffering writes a line whole, newline included; tqdm's bars flush themselves."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.write_through:
            stream.reconfigure(write_through=False, line_buffering=True)


@contextmanager
def _marked_stdout() -> Iterator[None]:
    stream, marked = sys.stdout, _MarkedStream(sys.stdout)
    sys.stdout = cast(TextIO, marked)
    try:
        yield
    finally:
        if cast(Any, sys.stdout) is marked:  # a command that replaced it keeps its own
            sys.stdout = stream


def _stdout_broken(exc: OSError) -> bool:
    return bool(getattr(exc, "specgen_stdout", False))


def _refused(exc: SpecgenError | OSError) -> int:
    """Print why the command stopped, one line each; the exit status (2 for a command-line mistake, 3 for a
    specgen bug, else 1)."""
    from dataclasses import replace  # here: the error path alone pays for the diagnostics' imports

    from specgen.diagnostics import SpecError, one_line, report_lines
    from specgen.paths import shown
    from specgen.render.errors import RenderError

    if isinstance(exc, UsageError):  # as argparse prints its own usage errors
        print(f"specgen {exc.command}: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    if isinstance(exc, RenderError):
        print(f"specgen: internal error, nothing was written: {exc}\nPlease report it with the spec that "
              "caused it.", file=sys.stderr)
        return 3
    if isinstance(exc, SpecError):
        # Paths that runtime code resolved (run folders, checkpoints) print relative to the working directory.
        diagnostics = [replace(d, path=shown(d.path)) for d in exc.diagnostics]
        for line in report_lines(diagnostics):  # at most MAX_PER_FILE a file, then a count
            print(line, file=sys.stderr)
        count = len(exc.diagnostics)
        print(f"{count} error{'s' if count != 1 else ''} found", file=sys.stderr)
        return 1
    if isinstance(exc, OSError) and _stdout_broken(exc):
        _quiet_broken_pipe()  # the unwritten rest goes to /dev/null at exit, not into a second error
        print(f"specgen: error: cannot write standard output: {one_line(exc.strerror or str(exc)).lower()}; what "
              "it printed is incomplete (files it wrote are whole: each is written atomically)", file=sys.stderr)
        return 1
    if isinstance(exc, OSError):
        # A user's environment (read-only or full disk, a link where a file goes, a missing
        # folder) is never a traceback: one line naming the file and what to do.
        from specgen.atomic import describe

        print(f"specgen: error: {one_line(describe(exc))}", file=sys.stderr)
        return 1
    # One a command did not turn into a SpecError. one_line: a file name or a record's text inside the
    # message must not bring a line break, a terminal escape or a bidi override to the user's terminal.
    # A message of several problems (a repository's) keeps one line per problem.
    for line in str(exc).split("\n"):
        print(f"specgen: error: {one_line(line)}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
