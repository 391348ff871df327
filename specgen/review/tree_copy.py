"""A revision's spec files copied into a temporary folder (`specgen diff REV:PATH`, review/sides.py), and nothing
written anywhere else, whatever the tree holds.

`git mktree` writes trees no checkout could hold: a link `d.yaml` and a folder `d.yaml` side by side (or `D.yaml`
and `d.yaml`, one name on a case-insensitive file system), a name twice, parts `..` or `.git`. Copied naively, a link
`d.yaml -> /any/dir` followed by `d.yaml/e.yaml` writes `/any/dir/e.yaml`. So names are checked before anything is
written (`check_names`), and each write is checked again where it lands (`Copy`), so that a case the names miss (a
file system that folds names in its own way) is refused too, never followed.
"""

from __future__ import annotations

import os
import stat
import unicodedata
from collections.abc import Iterable
from pathlib import Path

from specgen.diagnostics import Diagnostic, SpecError, quoted

NAME_MAX = 255  # bytes in one part of a name (ext4, APFS, NTFS): a longer one cannot be written anywhere
LONGEST = 768  # bytes in a whole name: with the temporary folder's path, within the 1024 that macOS opens


def _refused(label: str, message: str) -> SpecError:
    return SpecError([Diagnostic(label, None, message)])


def folded(name: str) -> str:
    """`name` as a case-insensitive file system compares it (APFS, NTFS): case and Unicode form ignored."""
    return unicodedata.normalize("NFD", unicodedata.normalize("NFD", name).casefold())


def split_name(name: str) -> list[str]:
    """A tree's name as the file system reads it: its folders, then its file."""
    for sep in {os.sep, os.altsep or os.sep} - {"/"}:  # Windows reads `a\\..\\b` as a path too
        name = name.replace(sep, "/")
    return name.split("/")


def check_names(names: Iterable[str], twice: set[str], links: Iterable[str], at: str, label: str) -> None:
    """Refuse, before anything is written, a tree that no checkout could hold: a name twice, a part that is empty,
    `.`, `..` or `.git`, a name too long to write, or a name below a link (a link `d.yaml` and a folder `d.yaml`, or
    `D.yaml`, one name where case is ignored): writing it would follow the link out of the temporary folder."""
    linked = {folded(name): name for name in links}
    for name in names:
        if name in twice:
            raise _refused(label, f"{at} holds {quoted(name)} twice; such a tree comes only from a crafted commit, "
                                  "and is not read")
        parts = split_name(name)
        bad = next((part for part in parts if part in ("", ".", "..") or folded(part) == ".git"), None)
        if bad is not None:
            which = f"a part {quoted(bad)}" if bad else "an empty part"
            raise _refused(label, f"{at} holds {quoted(name)}, which has {which}; a revision's files are read only "
                                  "under plain names")
        if max(len(os.fsencode(part)) for part in parts) > NAME_MAX:
            raise _refused(label, f"{at} holds {quoted(name)}, a part of which is longer than {NAME_MAX} bytes; no "
                                  "file system takes such a name")
        if len(os.fsencode(name)) > LONGEST:
            raise _refused(label, f"{at} holds {quoted(name)}, a name longer than {LONGEST} bytes, the most read for "
                                  "one name")
        for end in range(1, len(parts)):
            folder = "/".join(parts[:end])
            link = linked.get(folded(folder))
            if link is not None:
                both = (f"both a link and a folder named {quoted(link)}" if link == folder else f"a link "
                        f"{quoted(link)} and a folder {quoted(folder)} (one name where case is ignored)")
                raise _refused(label, f"{at} holds {both}, the folder holding {quoted(name)}; such a tree comes only "
                                      "from a crafted commit, and specgen writes nothing through a link")


class Copy:
    """Writes a revision's files under one folder and nowhere else: each folder on the way is created by name and
    checked (a real folder, not a link, whose real path is the copy's top joined with its name) before anything is
    written in it, and each file or link is created where nothing is (O_EXCL, O_NOFOLLOW; a link never replaces an
    entry), so no entry the tree holds twice or under two spellings of one name can send a write elsewhere."""

    def __init__(self, into: Path, at: str, label: str) -> None:
        self.top = os.path.realpath(into)
        self.at = at
        self.label = label
        self.folders: set[str] = set()  # checked: created by this copy, and nothing it writes replaces an entry

    def file(self, name: str, data: bytes) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
        try:
            with os.fdopen(os.open(self._parent(name), flags, 0o644), "wb") as out:
                out.write(data)
        except OSError as exc:
            raise self._failed(name, exc) from None

    def link(self, name: str, target: str) -> None:
        try:
            os.symlink(target, self._parent(name))
        except OSError as exc:
            raise self._failed(name, exc) from None

    def _parent(self, name: str) -> str:
        """Where `name` is written, each folder on the way created and checked; a folder that is a link, a file,
        or resolves anywhere else is refused. An OSError is the caller's to put in the tree's words."""
        parts = split_name(name)
        for end in range(1, len(parts)):
            folder = "/".join(parts[:end])
            if folder in self.folders:
                continue
            path = os.path.join(self.top, *parts[:end])
            try:
                os.mkdir(path, 0o755)
            except FileExistsError:  # made for an earlier name (in another spelling), or an entry: checked below
                pass
            mode = os.lstat(path).st_mode
            if not stat.S_ISDIR(mode) or os.path.realpath(path) != path:
                what = "a link" if stat.S_ISLNK(mode) else "a file" if not stat.S_ISDIR(mode) else "another folder"
                tail = ", and specgen writes nothing through a link" if what == "a link" else ""
                raise _refused(self.label, f"{self.at} holds {quoted(name)}, but {quoted(folder)} on its path is "
                                           f"{what} in the copy; such a tree comes only from a crafted commit{tail}")
            self.folders.add(folder)
        return os.path.join(self.top, *parts)

    def _failed(self, name: str, exc: OSError) -> SpecError:
        """The refusal for a write that failed: in the tree's words, never the temporary folder's path."""
        reason = (f"another entry of {self.at} has that name where this file system ignores case or Unicode form; "
                  "such a tree is not read" if isinstance(exc, FileExistsError)
                  else exc.strerror or type(exc).__name__)
        return _refused(self.label, f"cannot copy {quoted(name)} of {self.at}: {reason}")
