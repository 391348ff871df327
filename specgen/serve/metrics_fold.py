"""A dead worker's metrics files, folded into one per kind (`specgen serve --workers N`, metrics.py's multiprocess mode).

prometheus_client keeps a dead process's counter and histogram files, so that sums never go backwards (only its live
gauges go, `mark_process_dead`), and nothing ever merges them: a worker restarted every minute would leave ~86k files
in a month, every one read by every scrape. `fold_dead` adds them, value by value (every counter and histogram value
is a plain sum over processes), into one `<kind>_dead.db` per kind, and removes them: once folded, the folder holds
the live workers' files, at most two `<kind>_dead.db` (counter, histogram: specgen makes no Summary, whose kind would
be a third) and `fold.lock`.

Exactly once. Scrapes (metrics.py `render`) hold a shared flock on the folder while they glob and read it, the fold an
exclusive one, so no scrape sees a fold half done. Under that lock, per kind: both files are read; the sum is written
to `<kind>_dead.partial` (not *.db, which is all prometheus_client reads); the dead worker's file is renamed to
`<kind>_<pid>.folded` (out of the sums), `.partial` replaces `<kind>_dead.db` (into them), and `.folded` is removed.
Should the replace fail, the rename is undone: the values are then counted where they were, never twice, never lost.

The parent never blocks on the lock. Linux flock does not favour a waiting writer, so scrapes that overlap (N workers,
each scraped) can hold the shared lock for as long as they keep coming: the fold asks for the exclusive lock without
waiting, every `LOCK_RETRY_SECONDS`, calls `give_up()` between tries (the supervisor's "a signal came"), and gives up
after `LOCK_WAIT_SECONDS`. A fold given up leaves every file as prometheus_client wrote it, still counted by every
scrape; the supervisor tries again at a later pass (workers.py), and at the stop the folder is removed whole.

Failures are not the supervisor's: a file that cannot be read (cut short, damaged) makes every scrape fail in
prometheus_client's collector too, so it is removed, with one warning line; a write that fails (ENOSPC on a full
tmpfs, ...) leaves the files as they are, counted, with one warning line. The parent writes with write(), never
through mmap as prometheus_client's MmapedDict does: a store into an mmap'd page of a full tmpfs is SIGBUS, which
would kill the supervisor; write() answers ENOSPC.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

log = logging.getLogger("specgen.serve")
ADDITIVE_KINDS = ("counter", "histogram", "summary")  # file kinds whose values add over processes
LOCK_NAME = "fold.lock"  # in the multiprocess folder; not *.db, which is all prometheus_client reads
LOCK_WAIT_SECONDS = 0.2  # a fold waits this long for the scrapes to pause, then is tried again at a later pass
LOCK_RETRY_SECONDS = 0.005  # between tries for the lock (and checks of give_up): well inside the watch loop's poll


@contextmanager
def folder_lock(folder: str, mode: int) -> Iterator[bool]:
    """flock the multiprocess folder: shared (LOCK_SH) to read it, exclusive (LOCK_EX) to fold files in it. With
    LOCK_NB in `mode`, yields False instead of waiting when another process holds it."""
    fd = os.open(os.path.join(folder, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, mode)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the lock


def fold_dead(pid: int, folder: str, give_up: Callable[[], bool] = lambda: False, wait: float | None = None) -> bool:
    """Worker `pid` is dead: drop its live gauges and fold its counters and histograms into `<kind>_dead.db` (module
    docstring). True when nothing of it is left to fold; False when the lock stayed taken for `wait` seconds or
    `give_up()` said so: its files are untouched and still counted, for a later call. Never raises."""
    from prometheus_client import multiprocess

    try:
        multiprocess.mark_process_dead(pid, folder)
    except OSError as exc:  # a live gauge file gone under it: the gauges left the sums all the same
        _warn(pid, "gauge_live*", exc, "some may stay in the live gauges' sums")
    deadline = time.monotonic() + (LOCK_WAIT_SECONDS if wait is None else wait)
    while not give_up():
        with folder_lock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB) as held:
            if held:
                for kind in ADDITIVE_KINDS:
                    try:
                        _fold_kind(pid, Path(folder), kind)
                    except Exception as exc:  # unforeseen: one line, and the supervisor serves on
                        _warn(pid, kind, exc, "left as they are")
                return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(LOCK_RETRY_SECONDS)
    return False


def _fold_kind(pid: int, folder: Path, kind: str) -> None:
    dead, into = folder / f"{kind}_{pid}.db", folder / f"{kind}_dead.db"
    if not dead.exists():
        return
    sums: dict[str, float] = {}
    if into.exists():
        _add_values(into, sums, pid)  # unreadable: removed, and the sums start again from this worker's
    if not _add_values(dead, sums, pid):
        return
    partial, folded = into.with_suffix(".partial"), dead.with_suffix(".folded")
    try:
        partial.write_bytes(_encoded(sums))
        dead.rename(folded)
    except OSError as exc:
        _warn(pid, kind, exc, "left as they are, still counted")
        _discard(partial)
        return
    try:
        os.replace(partial, into)
    except OSError as exc:
        _discard(partial)
        try:
            folded.rename(dead)  # back into the sums: counted where it was
        except OSError:
            _warn(pid, kind, exc, f"left in {folded.name}, out of the sums")
            return
        _warn(pid, kind, exc, "left as they are, still counted")
        return
    folded.unlink(missing_ok=True)


def _add_values(path: Path, sums: dict[str, float], pid: int) -> bool:
    """Add the values of one value file into `sums`; False (and the file removed) when it cannot be read."""
    from prometheus_client import mmap_dict

    reader: Any = mmap_dict.MmapedDict.read_all_values_from_file  # untyped; read(), not mmap: the collector's reader
    try:
        values = list(reader(str(path)))
    except Exception as exc:  # struct.error, RuntimeError, UnicodeDecodeError, json: a damaged file
        _warn(pid, path.name, exc, "removed: prometheus_client's collector cannot read it either")
        path.unlink(missing_ok=True)
        return False
    for key, value, _, _ in values:
        sums[key] = sums.get(key, 0.0) + value
    return True


def _encoded(values: dict[str, float]) -> bytes:
    """`values` in prometheus_client's value file format, as MmapedDict writes it (mmap_dict.py): the bytes used, 4
    bytes of padding, then per key its length, the key padded to 8 bytes, value and timestamp (native doubles)."""
    entries = []
    for key, value in values.items():
        encoded = key.encode("utf-8")
        padded = encoded + b" " * (8 - (len(encoded) + 4) % 8)
        entries.append(struct.pack(f"i{len(padded)}sdd", len(encoded), padded, value, 0.0))
    body = b"".join(entries)
    return struct.pack("ii", 8 + len(body), 0) + body


def _discard(path: Path) -> None:
    """Remove a temporary of a fold that failed, if it can be: a leftover is no *.db, never read, removed at the stop."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def _warn(pid: int, what: str, exc: BaseException, then: str) -> None:
    log.warning("a dead worker's metrics could not be folded", extra={"fields": {
        "event": "metrics_fold_failed", "pid": pid, "file": what, "error": f"{type(exc).__name__}: {exc}",
        "files": then}})
