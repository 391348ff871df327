"""`build`'s worker pool (render/pool.py) with answers that do not cross a pipe as themselves.

Old (4884917): an error or result that does not pickle made the worker print a multiprocessing traceback and exit
1, and the parent said "ended without answering (exit status 1; out of memory?) ... run it again"; an error that
pickles but cannot be rebuilt (an `__init__` with required arguments, as UsageError's) raised TypeError from the
parent's recv, the original error lost; a worker that could not be started left the other workers' pipe ends open.
"""

from __future__ import annotations

import multiprocessing.context
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from specgen.cli import main
from specgen.errors import SpecgenError, UsageError
from specgen.render.build import PARALLEL_FROM, usable_cpus
from specgen.render.pool import WorkerBug, WorkerDied, WorkerProblem, _next, forked_map

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the pool forks; fds from /proc")
ITEMS = [0, 1, 2, 3]
SENT_BACK = "(raised in a worker of `specgen build`; it could not be sent back as itself)"


class TwoArguments(Exception):
    """Pickles as TwoArguments("1-2"), which its __init__ refuses: it cannot be rebuilt in the parent."""

    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"{a}-{b}")


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _run(func: Callable[[int], object]) -> list[tuple[int, object]]:
    return sorted(forked_map(func, ITEMS, 2, lambda: False), key=lambda pair: pair[0])


def _fails_at_2(error: Callable[[], Exception]) -> Callable[[int], int]:
    def render(item: int) -> int:
        if item == 2:
            raise error()
        return item
    return render


def _lock_error() -> Exception:
    error = ValueError("x")
    error.lock = threading.Lock()  # type: ignore[attr-defined]  # a lock does not pickle
    return error


@pytest.mark.parametrize(("error", "raised", "message", "last"), [
    (lambda: TwoArguments(1, 2), WorkerBug, f"TwoArguments: 1-2 {SENT_BACK}", "TwoArguments: 1-2"),
    (_lock_error, WorkerBug, f"ValueError: x {SENT_BACK}", "ValueError: x"),
    (lambda: UsageError("build", "a person's message"), WorkerProblem, "a person's message",
     "specgen.errors.UsageError: a person's message"),
    (lambda: ValueError("crosses as itself"), ValueError, "crosses as itself", "ValueError: crosses as itself"),
])
def test_an_error_that_does_not_cross_the_pipe_keeps_its_type_message_and_traceback(
        error: Callable[[], Exception], raised: type[Exception], message: str, last: str) -> None:
    before = _fds()
    with pytest.raises(raised) as caught:
        _run(_fails_at_2(error))
    assert str(caught.value) == message
    note = caught.value.__notes__[0].splitlines()  # the worker's traceback of the original error
    assert note[:2] == ["in the worker rendering 2:", "Traceback (most recent call last):"]
    assert note[-1].endswith(last)
    assert _fds() == before  # every pipe closed, the workers' sentinels too, while the error is still held


def test_a_result_that_does_not_pickle_is_the_pickling_error() -> None:
    with pytest.raises(TypeError) as caught:
        _run(lambda item: threading.Lock() if item == 2 else item)
    assert str(caught.value) == "cannot pickle '_thread.lock' object"
    note = caught.value.__notes__[0].splitlines()
    assert (note[0], note[-1]) == ("in the worker rendering 2:", "TypeError: cannot pickle '_thread.lock' object")


def test_a_result_that_pickles_but_does_not_rebuild_names_the_item() -> None:
    with pytest.raises(WorkerBug) as caught:
        _run(lambda item: TwoArguments(1, 2) if item == 2 else item)
    assert str(caught.value) == ("the answer of the worker rendering 2 could not be read: TypeError: "
                                 "TwoArguments.__init__() missing 1 required positional argument: 'b'")


def test_answers_that_cross_come_back_whole() -> None:
    assert _run(lambda item: item * item) == [(0, 0), (1, 1), (2, 4), (3, 9)]


def test_a_worker_that_fails_to_start_leaves_no_pipe_open(monkeypatch: pytest.MonkeyPatch) -> None:
    start = multiprocessing.context.ForkProcess.start
    started: list[int] = []

    def second_fails(process: multiprocessing.context.ForkProcess) -> None:
        if started:
            raise OSError(11, "Resource temporarily unavailable")  # fork's EAGAIN: a process limit
        started.append(1)
        start(process)

    monkeypatch.setattr(multiprocessing.context.ForkProcess, "start", second_fails)
    before = _fds()
    with pytest.raises(OSError, match="Resource temporarily unavailable") as caught:  # held: its frames too
        next(forked_map(lambda item: item, ITEMS, 3, lambda: False))
    assert _fds() == before, caught.value


def test_a_worker_gone_before_its_next_item_is_one_line() -> None:
    """Old: the parent's send raised BrokenPipeError, which cli.py takes for a closed stdout: exit 141, silent."""
    context = multiprocessing.get_context("fork")
    mine, theirs = context.Pipe()
    process = context.Process(target=os._exit, args=(3,))
    process.start()
    process.join()
    theirs.close()  # as the worker's end is once it exited
    with pytest.raises(WorkerDied) as caught:
        _next(mine, iter(ITEMS), {}, process)
    mine.close()
    assert str(caught.value) == ("a worker process of `specgen build` ended without answering (exit status 3; out of "
                                 "memory?); nothing was written: run it again")


def _specs(folder: Path) -> Path:
    folder.mkdir()
    for i in range(PARALLEL_FROM):  # not read: render_one is replaced
        (folder / f"s{i}.yaml").write_text("specgen: 1\n")
    return folder


@pytest.mark.skipif(usable_cpus() < 2, reason="a build renders in a pool only with two CPUs or more")
def test_build_prints_a_persons_error_from_a_worker_as_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Old: UsageError(command, message) did not rebuild in the parent: a TypeError traceback."""
    from specgen.render import build

    def render_one(path: Path, pictures: bool = False) -> None:
        if path.name == "s0.yaml":  # one only: the first to fail would depend on which worker answers first
            raise UsageError("build", f"cannot render {path.name}")

    monkeypatch.setattr(build, "render_one", render_one)  # before the fork: the workers have it too
    specs = _specs(tmp_path / "specs")
    assert main(["build", str(specs), "--out", str(tmp_path / "out")]) == 1
    assert capsys.readouterr() == ("", "specgen: error: cannot render s0.yaml\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(usable_cpus() < 2, reason="a build renders in a pool only with two CPUs or more")
def test_build_raises_a_bug_that_does_not_pickle_as_a_bug(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug stays a traceback (cli.py), with the worker's: old, "out of memory?; run it again"."""
    from specgen.render import build

    def render_one(path: Path, pictures: bool = False) -> None:
        raise _lock_error()

    monkeypatch.setattr(build, "render_one", render_one)
    with pytest.raises(WorkerBug, match=r"^ValueError: x \(raised in a worker") as caught:
        main(["build", str(_specs(tmp_path / "specs")), "--out", str(tmp_path / "out")])
    assert caught.value.__notes__[0].startswith("in the worker rendering ")
    assert not isinstance(caught.value, SpecgenError)
