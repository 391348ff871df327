"""Output folders no spec claims any more: `<out>/<old name>/` after a spec was deleted or renamed.

Only `specgen build` and `build --check` on the configured set into the configured `out` look for them
(commands/build.py): then the specs are the whole set that owns `out`, so a folder under `out` that none of them
names is left over. With paths, or with `--out` somewhere else, the other folders belong to specs not given.

A folder is specgen's only by what `build` itself writes into a spec folder (`BUILT`, render/files.py and
render/build.py's model.svg), each file with its mark (`_survey`). A name outside that set (an exported
`model.int8.onnx`, `notes.txt`), or one of these names without its mark (a trained `model.onnx`: `specgen export`
writes the same producer name, so the producer alone proves nothing), is the user's: the folder is kept and named.
A folder with no file of `build`'s in it is not looked at. `stale:` in `--check` and `removed` in `build` are the
same folders, as for files (render/build.py). The same rule (`built`) decides, inside a folder a spec still names,
which file it no longer generates is specgen's to delete; there subfolders and dot-names (.ipynb_checkpoints/,
.gitignore) are not looked at (render/build.py `_not_looked_at`), while here they keep the folder like any other
name: deleting the folder would delete them. And it decides which file under one of `build`'s names `build` may
overwrite (`not_ours`): a file it may not delete is one it may not replace either.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specgen.atomic import writing
from specgen.paths import shown
from specgen.text import HEADER_START

TEXT = ("model.py", "train.py", "collections.yaml", "model.onnx.txt")  # render/files.py render_files, with HEADER_START
BUILT = (*TEXT, "model.onnx", "model.svg")  # every name `build` writes into a spec folder (a test holds this to it)
CACHE = "__pycache__"  # Python's own cache of the generated model.py / train.py, made by importing them
ONNX_LIMIT = 1 << 24  # bytes: a generated model.onnx holds no weights (they are graph inputs); anything bigger is not


@dataclass(frozen=True)
class Unclaimed:
    """A folder under `out` with `build`'s files that no spec names; `foreign`: entries `build` did not write."""

    shown: Path
    real: str
    ours: list[str]
    caches: list[str]  # __pycache__/<file>, each compiled from one of `ours`
    foreign: list[str]

    def note(self) -> str:
        if not self.foreign:
            return "(no spec names it)"
        names = ", ".join(shown(n) for n in self.foreign[:3]) + (
            f" and {len(self.foreign) - 3} more" if len(self.foreign) > 3 else "")
        return f"(no spec names it; it also holds {names}, which specgen did not write: remove it by hand)"


def unclaimed(names: Iterable[str], root: Path) -> list[Unclaimed]:
    """The folders directly under `root` with `build`'s files and a name not in `names`, sorted by name.

    Names are compared case-insensitively (casefold), on every system: on a case-insensitive file system (macOS,
    Windows) `generated/digits/` IS the folder a spec renamed to `Digits` writes into, and os.path.normcase does
    not fold on Linux, where a repository may be checked out for such a machine. casefold() folds more than any
    file system does (ß and ss), so at worst a stale folder is kept, never a live one deleted.
    Nothing is followed: a link under `root` is not a folder of specgen's, and every file is read without
    following a link (`_head`: O_NOFOLLOW)."""
    real_root = os.path.realpath(root)
    if not os.path.isdir(real_root):
        return []
    claimed = {n.casefold() for n in names}
    found = []
    with os.scandir(real_root) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name.casefold() in claimed or entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
                continue
            folder = _survey(root / entry.name, entry.path)
            if folder.ours:
                found.append(folder)
    return found


def _survey(where: Path, real: str) -> Unclaimed:
    """Which entries `build` wrote: a text file of `TEXT` starting with the header; beside a generated model.py,
    the model.onnx that model.onnx.txt parses to (`_graph_of`) and the model.svg titled with the folder's name."""
    with os.scandir(real) as entries:
        listing = sorted(entries, key=lambda e: e.name)
    files = {e.name for e in listing if e.is_file(follow_symlinks=False)}
    ours = [n for n in TEXT if n in files and _head(os.path.join(real, n), len(HEADER_START)) == HEADER_START]
    if "model.py" in ours:
        if "model.onnx" in files and "model.onnx.txt" in ours and _graph_of(real):
            ours.append("model.onnx")
        if "model.svg" in files and _picture(os.path.join(real, "model.svg"), where.name):
            ours.append("model.svg")
    caches: list[str] = []
    foreign = []
    for entry in listing:
        if entry.name in ours:
            continue
        if entry.name == CACHE and entry.is_dir(follow_symlinks=False) and _compiled(entry.path, ours, caches):
            continue
        foreign.append(entry.name + ("/" if entry.is_dir(follow_symlinks=False) else ""))
    return Unclaimed(where, real, sorted(ours), caches, foreign)


def built(real: str, name: str, title: str) -> bool:
    """Whether the regular file `name` in the spec folder `real` is one `build` wrote, by `_survey`'s rule: a text
    file of `TEXT` starting with the header, a model.svg titled `title` (the spec's name), the model.onnx its
    model.onnx.txt parses to. render/build.py deletes a file a spec no longer generates only then: a file of the
    user's in a folder a spec still names (notes.txt, a hand-written train.py) is named, never deleted."""
    path = os.path.join(real, name)
    if name in TEXT:
        return _head(path, len(HEADER_START)) == HEADER_START
    if name == "model.svg":
        return _picture(path, title)
    return name == "model.onnx" and _graph_of(real)


def not_ours(real: str, name: str, title: str, on_disk: bytes) -> str | None:
    """Why `build` may not overwrite `name`, a file it generates, found holding `on_disk` in the spec folder `real`
    (None: it may). The rule that guards deleting (`built`) guards overwriting too: a trained model.onnx, a
    hand-written model.py under a generated name is the user's, and replacing it destroys it as surely as deleting
    it. An empty file holds nothing to lose: a power loss can leave a renamed file so (render/build.py NO_FSYNC)."""
    if not on_disk or built(real, name, title):
        return None
    if name in TEXT:
        return "it does not start with the `# Generated by specgen` line"
    if name == "model.svg":
        return f"it is not specgen's drawing of '{title}'"
    if _has_weights(on_disk):
        return "it holds an ONNX model with weights (an export?)"
    if name == "model.onnx" and _earlier_build(on_disk):
        return None  # a build killed between model.onnx.txt and model.onnx leaves the old graph beside the new text
    if not os.path.lexists(os.path.join(real, "model.onnx.txt")):
        return "no model.onnx.txt beside it shows it is the graph specgen build wrote"
    return "it is not the graph that the model.onnx.txt beside it parses to"


def _has_weights(graph: bytes) -> bool:
    """Whether `graph` is an ONNX model holding weights: `build`'s never does (weights are graph inputs; its only
    initializers are the constants ops declare, `_constant`), `specgen export`'s always does."""
    model = _model(graph)
    return model is not None and not _weightless(model)


def _weightless(model: Any) -> bool:
    """Whether every initializer of `model` is a constant an op declares (`_constant`): no weight among them."""
    return all(_constant(i) for i in model.graph.initializer)


def _earlier_build(graph: bytes) -> bool:
    """Whether `graph` is a model.onnx an earlier `build` wrote: specgen's producer mark, nodes, and no weights
    (`_has_weights`). `specgen export`'s models hold their weights, and nothing else writes that mark; overwriting a
    graph of no weights loses nothing `build` cannot make again."""
    model = _model(graph)
    return model is not None and model.producer_name == "specgen" and len(model.graph.node) > 0 and _weightless(model)


def _model(graph: bytes) -> Any:
    """The ONNX model in `graph`, or None for bytes that are none."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        return onnx.ModelProto.FromString(graph)
    except (DecodeError, ValueError):
        return None


def _constant(tensor: Any) -> bool:
    """An initializer `build` writes: what an op declares through the ONNX plan's `constant` (an int64 vector) or
    `float_constant` (a float scalar named `<node>___<what>`), never a weight (render/onnx_plan.py)."""
    import onnx

    if tensor.data_type == onnx.TensorProto.INT64:
        return True
    return tensor.data_type == onnx.TensorProto.FLOAT and not tensor.dims and "___" in tensor.name


def _head(path: str, size: int) -> bytes:
    """The first `size` bytes of a regular file, never through a link or from a pipe (b"" for anything else): a
    big file someone left in the folder is not read whole."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return b""
    with os.fdopen(fd, "rb") as handle:
        return handle.read(size) if stat.S_ISREG(os.fstat(handle.fileno()).st_mode) else b""


def _graph_of(real: str) -> bool:
    """model.onnx is specgen's when it is exactly what `build` makes of the model.onnx.txt beside it (parsed, with
    its doc string; render/files.py onnx_model). A trained or converted model (`specgen export`: weights as
    initializers, other nodes) never is, though it names the same producer. Parsed by onnx, a base dependency."""
    import onnx
    import onnx.parser
    from google.protobuf.message import DecodeError

    paths = [os.path.join(real, n) for n in ("model.onnx", "model.onnx.txt")]
    try:
        if any(os.lstat(p).st_size > ONNX_LIMIT for p in paths):
            return False  # a trained model's size: not read
    except OSError:
        return False  # gone since the listing
    graph, text = (_head(p, ONNX_LIMIT) for p in paths)
    try:
        model = onnx.parser.parse_model(text.decode())
        model.doc_string = onnx.ModelProto.FromString(graph).doc_string
    except (onnx.parser.ParseError, DecodeError, UnicodeDecodeError, IndexError, ValueError):
        return False  # the exceptions render/files.py onnx_model meets, and a file that is no protobuf
    return bool(graph) and model.SerializeToString(deterministic=True) == graph


def _picture(path: str, name: str) -> bool:
    """model.svg has no comment line: it is specgen's when it opens as specgen/pictures/graph.py writes it, with
    the folder's own spec name as its title, beside a generated model.py (pictures = true writes it there)."""
    lines = _head(path, 4096).split(b"\n", 2)
    return (len(lines) > 2 and lines[0].startswith(b'<svg xmlns="http://www.w3.org/2000/svg" ')
            and lines[1] == b"<title>" + name.encode() + b"</title>")


def _compiled(folder: str, ours: list[str], caches: list[str]) -> bool:
    """__pycache__ holding only `<stem>.<tag>.pyc` (or `<stem>.<tag>.opt-N.pyc`) of a generated `<stem>.py`, as
    Python names them; adds them to `caches`."""
    stems = {n[:-3] for n in ours if n.endswith(".py")}
    with os.scandir(folder) as entries:
        listing = list(entries)
    names = [e.name for e in listing if e.is_file(follow_symlinks=False) and _compiled_name(e.name, stems)]
    if len(names) != len(listing):
        return False
    caches += [f"{CACHE}/{n}" for n in sorted(names)]
    return True


def _compiled_name(name: str, stems: set[str]) -> bool:
    parts = name.split(".")
    return (len(parts) in (3, 4) and parts[0] in stems and parts[-1] == "pyc" and bool(parts[1])
            and (len(parts) == 3 or parts[2].startswith("opt-")))


def remove(folder: Unclaimed) -> None:
    """Delete a folder `unclaimed` found with nothing foreign in it: its files, its __pycache__, then the folder.
    unlink and rmdir never follow a link, and rmdir refuses a folder that gained a file since the survey."""
    assert not folder.foreign
    with writing(folder.shown):
        if not stat.S_ISDIR(os.lstat(folder.real).st_mode):
            return  # replaced since the survey: no longer the folder that was checked
        for name in folder.caches + folder.ours:
            os.unlink(os.path.join(folder.real, name))
        if folder.caches:
            os.rmdir(os.path.join(folder.real, CACHE))
        os.rmdir(folder.real)
