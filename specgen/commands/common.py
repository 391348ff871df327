"""What several commands share: argparse types and the spec paths of `validate`, `build` and `report`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from specgen.config import load_config
from specgen.diagnostics import Diagnostic, SpecError
from specgen.errors import SpecgenError, UsageError
from specgen.paths import shown
from specgen.text import HEADER_START

SPEC_SUFFIXES = (".yaml", ".yml")


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1 (a count of examples, trials or workers)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"received {text!r}; expected a positive integer")
    return value


def nonnegative_int(text: str) -> int:
    """argparse type: an integer of 0 or more (a count where 0 means none: `--steps 0` trains nothing)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"received {text!r}; expected a whole number, 0 or more")
    return value


def shape(text: str) -> tuple[int, ...]:
    """argparse type: positive integers joined by commas (an input shape: 96,96,3)."""
    try:
        dims = tuple(int(d) for d in text.split(","))
    except ValueError:
        dims = ()
    if not dims or min(dims) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers joined by commas (96,96,3); received {text!r}")
    return dims


class OutputFile(argparse.Action):
    """argparse action of an option naming where a command writes (`graph -o`; OutputFolder: `build --out`): a Path,
    never from an empty word. Path("") is Path("."), the working folder, and an empty word is an unset variable in a
    script (`-o "$OUT"`), not a choice to write there: a command-line mistake, one line and exit 2 (UsageError,
    raised past argparse, whose own errors print the usage too). InputPath: the same for what a command reads."""

    expected = "a file name"

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        words = [values] if isinstance(values, str) else list(values or [])
        if "" in words:
            name = option_string or self.metavar or self.dest  # a positional by its metavar, as usage shows it
            raise UsageError(parser.prog.removeprefix("specgen "), f"{name}: received an empty path (an unset "
                             f"variable in a script?); expected {self.expected}")
        paths = [Path(str(word)) for word in words]
        setattr(namespace, self.dest, paths[0] if isinstance(values, str) else paths)


class OutputFolder(OutputFile):
    """OutputFile for an option naming a folder (`build --out`, `export -o`)."""

    expected = "a folder: name one, or . for the working folder"


class InputPath(OutputFile):
    """OutputFile for an argument naming what a command reads (a spec, a checkpoint, a model, a repository):
    `specgen serve "$REPO"` with REPO unset served the folder it ran in."""

    expected = "a file or folder to read"


class NoSpecs(SpecgenError):
    """A folder argument holding no spec file: a typo or an unpopulated folder, never a silent success."""


def expand(paths: Sequence[Path], skip: Sequence[Path] = ()) -> list[Path]:
    """Files as given; folders contribute their spec files (`_walk`), sorted. A folder without any is an error
    (one line per such folder), so `specgen report specs/` on an empty or mistyped folder does not pass CI.
    `skip`: output folders, never entered (their files are output, not specs)."""
    found: list[Path] = []
    empty: list[Path] = []
    outs = {os.path.realpath(p) for p in skip}
    tops = {os.path.realpath(p) for p in paths if p.is_dir()}  # a link into any of them needs no note
    for path in paths:
        if path.is_dir():
            specs = sorted(_walk(path, outs, tops))
            found += specs
            empty += [] if specs else [path]
        else:
            found.append(path)
    if empty:
        raise NoSpecs("\n".join(f"no spec files (*.yaml, *.yml) in {shown(p)}" for p in empty))
    # A file reached twice (named twice, named and inside a named folder, or beside a link to it) is one spec:
    # read twice, build would refuse it as a name clash with itself. It keeps the place it was first reached.
    first: dict[str, Path] = {}
    for path in found:
        first.setdefault(os.path.realpath(path), path)
    return list(first.values())


def _walk(folder: Path, outs: set[str], tops: set[str]) -> Iterator[Path]:
    """The spec files below `folder`: *.yaml and *.yml in any case (`upper.YAML` is accepted when named, so a
    folder includes it too). Folders whose name starts with '.' (.git, .ipynb_checkpoints copies of specs) and
    output folders are not entered; a file that starts with specgen's generated header (a collections.yaml) is
    output, not a spec.

    A link to a folder below `folder` is not followed, as git and Python's rglob do not (a linked data set or a
    mounted volume is no spec folder, and is not walked whole), but it is never skipped silently: one `note:` line
    names it and its target, which the user can name to include it. A link to a folder that a walk reaches anyway
    (`tops`: the folders named in the same command), or to an output folder, adds nothing and has no note.
    `folder` itself may be a link: it was named."""

    def refuse(error: OSError) -> None:  # an unreadable folder is one line, not a silent gap in the set
        raise NoSpecs(f"cannot read the folder {shown(error.filename or folder)}: {error.strerror}")

    for top, folders, files in os.walk(folder, onerror=refuse):
        if os.path.realpath(top) in outs:
            folders[:] = []
            continue
        kept = []
        for name in sorted(f for f in folders if not f.startswith(".")):
            link = os.path.join(top, name)
            if os.path.islink(link):  # os.walk lists a link to a folder with the folders, and does not enter it
                _note_link(Path(link), tops, outs)
            else:
                kept.append(name)
        folders[:] = kept
        for name in files:
            path = Path(top, name)
            if not name.lower().endswith(SPEC_SUFFIXES):
                continue
            if path.is_file():
                if not _generated(path):
                    yield path
            elif not name.startswith("."):
                # A dangling link, a FIFO or a socket named *.yaml is handed on, and reading it is then one error
                # line saying what it is (spec/spec_file.py), as when it is named: skipping all but regular files
                # made a folder of broken links pass CI. A hidden one is an editor's lock (Emacs's `.#model.yaml`
                # is a dangling link while the file is edited), skipped as hidden folders are.
                yield path


def _note_link(link: Path, tops: set[str], outs: set[str]) -> None:
    target = os.path.realpath(link)
    if _within(target, outs) or any(_walked(target, top) for top in tops):
        return  # its files are output, or are walked anyway through the real folders
    print(f"note: {shown(link)} is a link to a folder ({shown(target)}) and is not followed; name "
          f"{shown(target)} to include its specs", file=sys.stderr)


def _within(path: str, folders: set[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip(os.sep) + os.sep) for f in folders)


def _walked(target: str, top_real: str) -> bool:
    """Whether the walk reaches `target` through real folders: it lies below `top_real` and no folder on the way
    is hidden (a resolved path holds no link, so every folder on it is entered unless hidden or an output)."""
    if not _within(target, {top_real}):
        return False
    return not any(part.startswith(".") for part in Path(os.path.relpath(target, top_real)).parts if part != ".")


def _generated(path: Path) -> bool:
    """Whether the file (a regular one: opening a FIFO would block) starts with the header specgen writes on every
    generated text file (text.HEADER)."""
    try:
        with open(path, "rb") as file:
            return file.read(len(HEADER_START)) == HEADER_START
    except OSError:
        return False  # the spec loader reports an unreadable file with its own line


def require_regular(path: Path, what: str) -> None:
    """A path a command hands to a foreign reader (onnxruntime, TensorFlow) is a regular file, or it is one line:
    a FIFO would block that reader forever and a folder gets a misleading parse error. A missing path is left to
    the reader, whose message names it."""
    from specgen.runtime.sources.base import MISSING, REGULAR, file_kind

    kind = file_kind(path)
    if kind not in (MISSING, REGULAR):
        raise SpecError([Diagnostic(shown(path), None, f"{what} is {kind}, not a regular file")])


def spec_paths(given: Sequence[Path], out: Path | None = None) -> list[Path]:
    """The spec files a command works on: those given, else pyproject's `[tool.specgen] specs`. With paths the
    table is not read at all (a key specgen does not know fails only the commands that use it); folders then skip
    only `out` (the folder build writes into) and generated files. Without paths they also skip the configured
    `out`: `specs = ["."]` holds the output folder."""
    if given:
        paths = expand(given, [out] if out else [])
    else:
        config = load_config()
        paths = expand(config.specs, [config.out, *([out] if out else [])])
    if not paths:
        raise SpecError([Diagnostic("specgen", None, "no spec files given; pass paths or set "
                                    "[tool.specgen] specs in pyproject.toml")])
    return paths


def schema_drift(target: Path, text: str) -> list[str]:
    """[] if `target` holds `text`; else one report line. Never reads through a link or a device. The advice is
    `specgen schema`, the one command that writes this file (`specgen build` never does)."""
    from specgen.atomic import UnsafePathError, read_regular

    try:
        on_disk = read_regular(target)
    except UnsafePathError as exc:
        return [f"unsafe: {exc}"]
    if on_disk is None:
        return [f"missing: {shown(target)} (run `specgen schema`)"]
    return [] if on_disk == text.encode() else [f"drifted: {shown(target)} (run `specgen schema`)"]
