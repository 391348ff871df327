"""Where a sweep's Optuna study lives: SQLite in the sweep folder by default, or any storage `--storage` names.

`--storage` takes an RDB URL (`sqlite:///shared/study.db`, `postgresql://...`, `mysql://...`; the driver must be
installed) or `journal:PATH`, Optuna's journal file on a shared filesystem. Processes on several machines that
open one storage work on one study. A storage that cannot be opened is one line naming it (a password in the
URL is masked), before any trial starts; so is SQLite in memory (IN_MEMORY) and an empty `--storage ''`.

Dead trial processes: every trial records its owner (host, boot, process id and start time); a sweep that starts
marks the running trials of owners gone from its own machine as interrupted at once. RDB storages also keep
Optuna's heartbeat (every HEARTBEAT seconds while a trial runs), so a trial whose machine died is marked after
GRACE seconds by whichever sweep process looks next; the journal storage has no heartbeat in Optuna, so there a
trial lost with its machine stays running until a sweep on that machine starts again. A trial is made with its
owner in one storage call, and one without an owner is lost after a grace of minutes (claim.py).
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specgen.diagnostics import Diagnostic, SpecError
from specgen.paths import shown
from specgen.sweep.errors import SweepUsageError

if TYPE_CHECKING:
    from optuna.storages import BaseStorage

HEARTBEAT = 10  # seconds between the heartbeats of a running trial (RDB storages)
GRACE = 60  # seconds without a heartbeat after which a running trial counts as lost
RACES = 5  # tries to open a new RDB storage that another process is making at the same moment
SQLITE_TIMEOUT = 60  # seconds a SQLite writer waits for another process's transaction (sqlite3's default: 5)
EXPECTED = ("expected an Optuna storage: an RDB URL (sqlite:///study.db, postgresql://user@host/db) or "
            "journal:PATH (a journal file on a shared filesystem)")
# SQLite in memory is one database per connection, gone with the process: the sweep's worker threads (each its own
# connection), a sweep that continues later and other sweep processes would each find an empty one (no study).
IN_MEMORY = ("an in-memory SQLite database is private to one connection and gone when the sweep ends, so the "
             "sweep's worker threads, a later run that continues the sweep and other sweep processes cannot share "
             "the study; expected a database file (sqlite:///study.db), an RDB server (postgresql://user@host/db) "
             "or journal:PATH")


def default_url(folder: Path) -> str:
    return f"sqlite:///{folder.resolve() / 'study.db'}"


def checked_url(given: str | None, folder: Path, command: str = "sweep") -> str:
    """`--storage`'s URL, or the default in the sweep folder when the flag is absent. An empty `--storage ''` is
    refused rather than read as absent: a script whose variable came out empty meant some storage, not the default.
    A usage line of `command` (exit 2), as an in-memory URL is."""
    if given is None:
        return default_url(folder)
    if not given.strip():
        raise SweepUsageError(f"--storage {shlex.quote(given)}: the URL is empty; {EXPECTED}", command)
    return given


def in_memory(url: str) -> bool:
    """Whether `url` is SQLite in memory: `sqlite://`, `sqlite:///:memory:`, `file::memory:` or `mode=memory`."""
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
    except Exception:  # not a URL SQLAlchemy reads: opening it says so
        return False
    if parsed.get_backend_name().lower() != "sqlite":
        return False
    database = parsed.database or ""
    return database in ("", ":memory:") or database.startswith("file::memory:") or \
        parsed.query.get("mode") == "memory"


def masked(url: str) -> str:
    """The URL as printed: its password replaced by ***, and a SQLite or journal file's path relative to the working
    directory when it lies under it (`sqlite:///runs/x-sweep/study.db`, which names the same file from here)."""
    for scheme in ("journal:", "sqlite:///"):
        if url.startswith(scheme):
            return scheme + shown(url[len(scheme):])
    try:
        from sqlalchemy.engine import make_url

        return shown(make_url(url).render_as_string(hide_password=True))
    except Exception:  # not a URL SQLAlchemy reads: opening it says so
        return shown(url)


def open_storage(url: str, on_stale: Callable[[Any, Any], None], command: str = "sweep") -> BaseStorage:
    """The storage `url` names, opened (its tables made); one line naming it when it cannot be (an in-memory URL:
    a usage line of `command`, exit 2)."""
    import optuna

    if in_memory(url):  # it opens, and every other connection then finds no study: refused before any is made
        raise SweepUsageError(f"--storage {masked(url)}: {IN_MEMORY}", command)
    try:
        if url.startswith("journal:"):
            from optuna.storages.journal import JournalFileBackend, JournalStorage

            path = Path(url.removeprefix("journal:"))
            if not path.name or not path.parent.is_dir():
                raise FileNotFoundError(f"no folder {shown(path.parent)} for the journal file")
            return JournalStorage(JournalFileBackend(str(path)))
        kwargs = {"connect_args": {"timeout": SQLITE_TIMEOUT}} if url.startswith("sqlite") else {}
        for attempt in range(RACES):
            try:
                return optuna.storages.RDBStorage(url, engine_kwargs=kwargs, heartbeat_interval=HEARTBEAT,
                                                  grace_period=GRACE, heartbeat_stale_trial_callback=on_stale)
            except Exception as exc:
                # Two sweeps opening a new storage at once both make its tables: the second finds them made
                if attempt + 1 == RACES or not any(w in str(exc) for w in ("already exists", "locked", "UNIQUE")):
                    raise
                time.sleep(0.5)
        raise AssertionError("unreachable")
    except Exception as exc:  # SQLAlchemy's and the drivers' errors have no common base below Exception
        raise refused(url, exc) from None


def refused(url: str, exc: BaseException) -> SpecError:
    reason = str(exc).strip().split("\n")[0][:300] or type(exc).__name__
    if isinstance(exc, ModuleNotFoundError):
        reason = f"its driver is not installed ({exc.name})"
    return SpecError([Diagnostic(f"--storage {masked(url)}", None, f"cannot open the storage: {reason}; {EXPECTED}")])


def owner() -> dict[str, Any]:
    """This process as a trial's owner: host, boot, process id and its start time (a reused id is not it)."""
    import socket

    return {"host": socket.gethostname(), "boot": _boot(), "pid": os.getpid(), "start": _start(os.getpid())}


def gone(record: Any) -> bool:
    """Whether the owner recorded with a trial is a process of this machine that no longer runs."""
    if not isinstance(record, dict):
        return False
    me = owner()
    if record.get("host") != me["host"]:
        return False  # another machine's: its heartbeat (RDB storages) says whether it lives
    if record.get("boot") != me["boot"]:
        return True  # this machine restarted since
    pid = record.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process: alive
        return False
    return record.get("start") is not None and _start(pid) != record.get("start")


def _boot() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat, field 22), or None off Linux."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])
