"""`build`'s worker processes: forked after the imports, one pipe each, stopped at once on Ctrl-C.

multiprocessing.Pool was used before, and its teardown is what a Ctrl-C broke: every worker shares one task queue
and one result queue, each guarded by a lock in shared memory, and `terminate()` sends SIGTERM to workers that may
hold one of them or be half-way through writing a result (a rendered spec, hundreds of KB) into the shared pipe;
the pool's own threads can then wait on that lock or pipe for ever. Even with its workers ignoring SIGINT, 1 of 20
Ctrl-Cs under load (tests/test_build_interrupt_r8.py) hung `specgen build` in that teardown. Here each worker
has its own duplex pipe, which no other process holds: the parent sends an item's index (the items are already in
the worker's memory, forked), the worker sends back the result; on a stop, the parent kills the workers (they
write nothing, so there is nothing of theirs to finish) and waits for each, which SIGKILL makes certain.

Workers ignore SIGINT: a Ctrl-C reaches the whole process group, and only the parent acts on it. A worker whose
parent died (`kill -9`, or SIGTERM to the parent alone) reads the end of its pipe and exits.

Whatever crosses a pipe is pickled. A rendering error (or result) that does not pickle, or whose pickle cannot be
rebuilt (an `__init__` with required arguments), crosses as a stand-in holding its type, message and the worker's
traceback (`WorkerBug`, `WorkerProblem`): the real cause, never a dead worker's "out of memory?".
"""

from __future__ import annotations

import multiprocessing
import signal
import traceback
from collections.abc import Callable, Generator, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from multiprocessing.reduction import ForkingPickler
from typing import Any, TypeVar

from specgen.errors import SpecgenError

T = TypeVar("T")
R = TypeVar("R")
POLL = 0.1  # seconds: how long `stop()` may wait to be asked while every worker is busy


class WorkerDied(SpecgenError):
    """A worker ended without answering (the kernel's OOM killer, a `kill`): one line, not a traceback."""


class WorkerBug(RuntimeError):
    """An error in a worker (a bug) that could not cross its pipe as itself: `type: message`, which always pickles,
    with the worker's traceback as a note, as an error that crossed has; the CLI shows it whole, as any bug."""


class WorkerProblem(SpecgenError):
    """The same for an error meant for a person (a SpecgenError, such as UsageError(command, message), which does
    not rebuild from its pickle): its message, printed as one line as the original would have been."""


def forked_map(func: Callable[[T], R], items: Sequence[T], workers: int,
               stop: Callable[[], bool]) -> Generator[tuple[int, R], None, None]:
    """(index, func(item)) for every item, in the order they finish, from `workers` forked processes; ends early
    when `stop()` (asked at least every POLL seconds). Every worker is gone when the iterator ends or is closed."""
    context = multiprocessing.get_context("fork")
    pipes = [context.Pipe() for _ in range(workers)]
    processes: list[BaseProcess] = []
    try:
        for _, theirs in pipes:
            others = [end for pair in pipes for end in pair if end is not theirs]
            process = context.Process(target=_serve, args=(func, items, theirs, others), daemon=True)
            process.start()
            processes.append(process)
            theirs.close()  # the worker's end lives in the worker alone: its death is our end's EOF
        yield from _dispatch([mine for mine, _ in pipes], processes, items, stop)
    finally:
        for worker in processes:
            if worker.is_alive():  # stopped early, or an error: nothing of a worker's is left to finish
                worker.kill()
            worker.join()
            worker.close()  # its sentinel pipe now, not when the collector finds it: an error's traceback holds it
        for pair in pipes:  # ours, and the workers' ends that a failed start left here (close() twice is harmless)
            for end in pair:
                end.close()


def _dispatch(ends: list[Connection], processes: list[BaseProcess], items: Sequence[T],
              stop: Callable[[], bool]) -> Iterator[tuple[int, R]]:
    """Hand each worker one index at a time (a slow spec holds one worker, not a share of the list)."""
    queue = iter(range(len(items)))
    workers = dict(zip(ends, processes, strict=True))
    busy: dict[Connection, int] = {}  # a working worker's end: the index it renders, to name the item it failed on
    for end in ends:
        _next(end, queue, busy, workers[end])
    while busy and not stop():
        for ready in wait(list(busy), timeout=POLL):
            assert isinstance(ready, Connection)
            index = busy[ready]
            yield index, _received(ready, workers[ready], items[index])
            _next(ready, queue, busy, workers[ready])


def _next(end: Connection, queue: Iterator[int], busy: dict[Connection, int], process: BaseProcess) -> None:
    """Send the worker at `end` the next index, or None (no more work: it exits, and is busy no more)."""
    index = next(queue, None)
    try:
        end.send(index)
    except OSError:  # the worker died since its answer: a BrokenPipeError would pass for a closed stdout (cli.py)
        raise _died(process) from None
    if index is None:
        busy.pop(end, None)
    else:
        busy[end] = index


def _received(end: Connection, process: BaseProcess, item: object) -> Any:
    """The worker's result for `item`; its error raised here, with the worker's traceback as a note."""
    try:
        ok, value = end.recv()
    except (EOFError, ConnectionError):
        raise _died(process) from None
    except Exception as exc:  # the answer pickled in the worker but does not rebuild here: name the item at least
        raise WorkerBug(f"the answer of the worker rendering {item} could not be read: "
                        f"{type(exc).__name__}: {exc}") from exc
    if not ok:  # a bug in rendering: raised here, with the worker's traceback
        error, where = value
        error.add_note(f"in the worker rendering {item}:\n{where}")
        raise error
    return value


def _died(process: BaseProcess) -> WorkerDied:
    process.join()
    code = process.exitcode or 0
    how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
    return WorkerDied(f"a worker process of `specgen build` ended without answering ({how}; out of memory?); "
                      "nothing was written: run it again")


def _serve(func: Callable[[T], R], items: Sequence[T], end: Connection, others: list[Connection]) -> None:
    """A worker: render the indexes the parent sends until it sends None or its pipe ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to act on
    for other in others:  # the parent's ends, and the other workers' pipes: a copy here would keep them open
        other.close()
    try:
        while (index := end.recv()) is not None:
            end.send_bytes(_answer(func, items[index]))
    except (EOFError, OSError):  # the parent is gone (its end closed): nothing to answer
        return


def _answer(func: Callable[[T], R], item: T) -> memoryview:
    """(True, func(item)) pickled as Connection.send would, or (False, (error, traceback)): the error rendering
    raised, or the one pickling its result did (a result that does not pickle is a rendering bug like any other).
    Pickled here, apart from the send, so that only a failed send means the parent is gone."""
    try:
        return ForkingPickler.dumps((True, func(item)))
    except Exception as exc:
        return _error(exc, traceback.format_exc())


def _error(exc: Exception, where: str) -> memoryview:
    """An error's answer that the parent can rebuild: the error itself when its pickle loads again (tried here,
    where its type and message are still known; errors are rare, so the round trip costs nothing that counts),
    else a stand-in with its type and message."""
    try:
        data = ForkingPickler.dumps((False, (exc, where)))
        ForkingPickler.loads(data)
        return data
    except Exception:
        return ForkingPickler.dumps((False, (_stand_in(exc), where)))


def _stand_in(exc: Exception) -> Exception:
    """`exc` as an error that always pickles: its message for a person's error, `type: message` for a bug."""
    try:
        message = str(exc)
    except Exception:  # a broken __str__ is one more bug of the same error: its type still says which
        message = "(its message could not be made)"
    if isinstance(exc, SpecgenError):
        return WorkerProblem(message)
    return WorkerBug(f"{type(exc).__name__}: {message} (raised in a worker of `specgen build`; it could not be "
                     "sent back as itself)")
