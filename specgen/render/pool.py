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
"""

from __future__ import annotations

import multiprocessing
import signal
import traceback
from collections.abc import Callable, Generator, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import TypeVar

from specgen.errors import SpecgenError

T = TypeVar("T")
R = TypeVar("R")
POLL = 0.1  # seconds: how long `stop()` may wait to be asked while every worker is busy


class WorkerDied(SpecgenError):
    """A worker ended without answering (the kernel's OOM killer, a `kill`): one line, not a traceback."""


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
        for mine, _ in pipes:
            mine.close()


def _dispatch(ends: list[Connection], processes: list[BaseProcess], items: Sequence[T],
              stop: Callable[[], bool]) -> Iterator[tuple[int, R]]:
    """Hand each worker one index at a time (a slow spec holds one worker, not a share of the list)."""
    queue = iter(range(len(items)))
    busy = dict(zip(ends, processes, strict=True))
    for end in ends:
        _next(end, queue, busy)
    while busy and not stop():
        for ready in wait(list(busy), timeout=POLL):
            assert isinstance(ready, Connection)
            yield _received(ready, busy[ready], items)
            _next(ready, queue, busy)


def _next(end: Connection, queue: Iterator[int], busy: dict[Connection, BaseProcess]) -> None:
    """Send the worker at `end` the next index, or None (no more work: it exits, and is busy no more)."""
    index = next(queue, None)
    end.send(index)
    if index is None:
        del busy[end]


def _received(end: Connection, process: BaseProcess, items: Sequence[T]) -> tuple[int, R]:
    try:
        index, ok, value = end.recv()
    except (EOFError, ConnectionError):
        process.join()
        code = process.exitcode or 0
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        raise WorkerDied(f"a worker process of `specgen build` ended without answering ({how}; out of memory?); "
                         "nothing was written: run it again") from None
    if not ok:  # a bug in rendering: raised here, with the worker's traceback
        error, where = value
        error.add_note(f"in the worker rendering {items[index]}:\n{where}")
        raise error
    return index, value


def _serve(func: Callable[[T], R], items: Sequence[T], end: Connection, others: list[Connection]) -> None:
    """A worker: render the indexes the parent sends until it sends None or its pipe ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to act on
    for other in others:  # the parent's ends, and the other workers' pipes: a copy here would keep them open
        other.close()
    try:
        while (index := end.recv()) is not None:
            answer: tuple[int, bool, object]
            try:
                answer = (index, True, func(items[index]))
            except Exception as exc:
                answer = (index, False, (exc, traceback.format_exc()))
            end.send(answer)
    except (EOFError, OSError):  # the parent is gone (its end closed): nothing to answer
        return
