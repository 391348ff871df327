"""Progress for long work: a live bar on a terminal, nothing new in logs.

tqdm draws the bars: rate, time left, terminal width, redraw throttling and clearing the bar to print a
line are what a hand-written bar would have to redo (it is one small pure-Python package). Where the
output is not a terminal (CI logs, pipes) nothing here draws: `specgen train` keeps its plain lines.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import TextIO, TypeVar

from tqdm import tqdm

T = TypeVar("T")
DELAY = 2.0  # seconds: work that ends sooner shows no bar (most builds, small exports)
PLAIN_EVERY = 5.0  # seconds between plain progress lines when stdout is not a terminal


def delayed(items: Iterable[T], what: str, total: int | None = None, delay: float = DELAY) -> Iterator[T]:
    """`items`, with a bar on stderr when it is a terminal and the work runs past DELAY; the bar is
    removed when done, so what the command prints stays as it was."""
    return iter(tqdm(items, desc=what, total=total, delay=delay, leave=False, file=sys.stderr,
                     disable=not sys.stderr.isatty(), dynamic_ncols=True))


class Phases:
    """The named steps of one command (export: weights, TensorFlow, onnxruntime, ...): a bar on stderr when it is
    a terminal and the command has run past DELAY, cleared at the end, so what the command prints stays as it was.

    The bar appears at the first step that starts after the delay (nothing redraws it between steps).
    """

    def __init__(self, what: str, steps: Iterable[str], delay: float = DELAY):
        self.steps, self.delay, self.began = list(steps), delay, time.monotonic()
        self.bar = tqdm(total=len(self.steps), desc=what, delay=delay, leave=False, file=sys.stderr,
                        disable=not sys.stderr.isatty(), dynamic_ncols=True,
                        bar_format="{desc} [{n_fmt}/{total_fmt} done, {elapsed}]")
        self.what = what

    def start(self, step: str) -> None:
        """`step` begins: the bar counts the steps before it and names this one (drawn once past the delay)."""
        self.bar.n = self.steps.index(step)
        self.bar.set_description_str(f"{self.what}: {step}", refresh=False)
        if time.monotonic() - self.began >= self.delay:
            self.bar.refresh()

    def __enter__(self) -> Phases:
        return self

    def __exit__(self, *_: object) -> None:
        self.bar.close()


class TrainProgress:
    """`specgen train`'s progress: on a terminal a bar over the run's updates with rate and time left;
    otherwise (or with --quiet, nothing) one plain line every PLAIN_EVERY seconds and at each epoch end."""

    def __init__(self, first: int, stop: int, quiet: bool, out: TextIO | None = None):
        self.out, self.quiet, self.last, self.step = out or sys.stdout, quiet, 0.0, first
        self.bar = None
        if not quiet and self.out.isatty():
            self.bar = tqdm(total=stop, initial=first, desc="train", unit="step", file=self.out,
                            dynamic_ncols=True, mininterval=0.2, leave=True)

    def show(self, step: int, line: str, status: str, force: bool = False) -> None:
        """`line`: the plain line (step, rate, loss and metrics); `status`: what the bar shows after its
        own count and rate (loss and metrics)."""
        if self.bar is not None:
            self.bar.set_postfix_str(status, refresh=False)
            self.bar.update(step - self.step)
        elif not self.quiet and (force or time.monotonic() - self.last >= PLAIN_EVERY):
            self.last = time.monotonic()
            print(line, file=self.out, flush=True)
        self.step = step

    def write(self, line: str) -> None:
        """A line among the progress (an eval result): above the bar on a terminal."""
        if self.bar is not None:
            self.bar.write(line, file=self.out)
        else:
            print(line, file=self.out, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
