"""Dynamic batching: checked requests for one model are gathered into one onnxruntime run, then split back.

One collector task per model runs on the event loop. It takes the oldest waiting request and
adds the next ones while their rows fit in `max_batch_size` and their examples have its shape,
until the batch is full or the oldest request has waited `max_delay` (Triton's `max_queue_delay_microseconds`). The batch
then runs in the model's own worker thread, so the event loop keeps accepting and checking
requests; the rows that pile up meanwhile form the next batch. At most `queue_size` requests
wait (queued or gathered, not yet running): beyond that `submit` raises QueueFull at once.

A batch that fails in onnxruntime is retried one request at a time, so a request can only fail
itself, never the requests it was batched with. A request whose caller has gone (a gRPC deadline
passed, the call was cancelled, an HTTP client closed its connection: app.py) is dropped from the queue
instead of run. So is a request whose own `timeout` (the protocol parameter, microseconds, parameters.py) passes
while it waits: it is answered QueueTimeout, as Triton's dynamic batcher rejects a request whose timeout expired in
its queue ("Request timeout expired", UNAVAILABLE). A request whose batch has started runs to its end either way.

The config's `default_queue_policy` (model_config.QueuePolicy) sets that timeout as Triton's does: its
`default_timeout_microseconds` for every request, a request's own shorter one only with `allow_timeout_override`;
with `timeout_action: DELAY` a request past its timeout is not answered but moved behind the requests still in time
(Triton's delayed queue), and runs once they have.

Joining relies on the model's rows being independent; a version whose graph couples them (a dynamically
quantized int8 variant, coupling.py) gets `batching=False` from registry.py: one request per run.

Each run is timed in the worker thread (joining the inputs, the onnxruntime run, splitting the
outputs) and reported to the version's statistics (stats.py) once per run; each request's part (its rows, its time
in the queue, the run's durations) goes on its Ticket, for its handler to count once it knows whether the request
was answered (a client may leave while its batch runs: then it is a failure, as in Triton).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from specgen.errors import SpecgenError
from specgen.serve.logs import client_text
from specgen.serve.model_config import QueuePolicy
from specgen.serve.stats import BatchTimes, RunTimes, VersionStats

Arrays = dict[str, np.ndarray]
log = logging.getLogger("specgen.serve")


class QueueFull(Exception):
    """The model's queue holds `queue_size` requests already."""


class ShuttingDown(Exception):
    """The server is draining: no new requests join."""


class QueueTimeout(SpecgenError):
    """The request's `timeout` passed while it waited in the queue: it was dropped unrun."""


NO_POLICY = QueuePolicy()  # a config without default_queue_policy: a request's own timeout alone
# A timer this far off never fires in practice; capping it keeps a uint64 timeout within what event loops accept.
LONGEST_TIMER_S = 1e9


class BatchObserver(Protocol):
    def queue_depth(self, model: str, depth: int) -> None: ...
    def batch(self, model: str, requests: int, rows: int, seconds: float) -> None: ...


class Ticket(asyncio.Future[Arrays]):
    """The future of a submitted request: its outputs, and once its batch has run, `run`, its part of that run."""

    __slots__ = ("run",)

    def __init__(self, loop: asyncio.AbstractEventLoop):
        super().__init__(loop=loop)
        self.run: RunTimes | None = None


@dataclass(eq=False)  # one request is equal only to itself (deque.remove; its arrays have no truth value)
class _Job:
    inputs: Arrays
    rows: int
    future: Ticket
    id: str | None = None  # as the log shows it: escaped and cut (the response echoes the request's own)
    enqueued: float = field(default_factory=time.monotonic)
    started: bool = False  # its batch runs: past the point where a timeout drops it
    timer: asyncio.TimerHandle | None = None  # fires at its timeout, if it has one


def _joinable(first: _Job, other: _Job) -> bool:
    """Whether two requests stack into one batch: the same example shapes (a named dimension, an image of any size
    before a resize layer, may differ between requests; those run in separate batches, in arrival order)."""
    return all(first.inputs[name].shape[1:] == other.inputs[name].shape[1:] for name in first.inputs)


def _join(jobs: list[_Job]) -> Arrays:
    if len(jobs) == 1:
        return jobs[0].inputs
    return {name: np.concatenate([job.inputs[name] for job in jobs]) for name in jobs[0].inputs}


def _split(outputs: Arrays, jobs: list[_Job]) -> list[Arrays]:
    total = sum(job.rows for job in jobs)
    if len(jobs) == 1:
        return [outputs]
    for name, value in outputs.items():
        if value.ndim == 0 or value.shape[0] != total:
            raise RuntimeError(f"output '{name}' has shape {list(value.shape)}; a batch of {total} rows needs "
                               f"{total} as its first dimension")
    parts, start = [], 0
    for job in jobs:
        parts.append({name: value[start:start + job.rows] for name, value in outputs.items()})
        start += job.rows
    return parts


class Batcher:
    """Queue, batch and run one model's requests: `await batcher.submit(inputs, rows)` -> its outputs."""

    def __init__(self, model: str, run: Callable[[Arrays], Arrays], *, max_batch_size: int, max_delay: float,
                 queue_size: int, batching: bool = True, observer: BatchObserver | None = None,
                 stats: VersionStats | None = None, version: int | None = None,
                 policy: QueuePolicy = NO_POLICY):
        if queue_size < 1:
            raise ValueError(f"queue_size must be at least 1; received {queue_size}")
        self.model, self.run = model, run
        self.max_batch_size = max(max_batch_size, 1)
        self.max_delay, self.queue_size = max_delay, queue_size
        self.batching = batching and max_batch_size > 1
        self.observer, self.stats, self.version, self.policy = observer, stats, version, policy
        self._queue: deque[_Job] = deque()
        self._delayed: deque[_Job] = deque()  # past their timeout under timeout_action DELAY: taken after _queue
        self._gathered = 0  # jobs taken from the queue into the batch being formed
        self._wakeup = asyncio.Event()
        self._closing = False
        self._hurried = False  # a retired version: batches form from what is queued, without waiting for more
        self._executor: ThreadPoolExecutor | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def waiting(self) -> int:
        """Requests admitted and not yet running."""
        return len(self._queue) + len(self._delayed) + self._gathered

    def start(self) -> None:
        """Start the worker thread and the collector task (call on the running event loop)."""
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"onnxruntime-{self.model}")
        self._task = asyncio.get_running_loop().create_task(self._collect(), name=f"batcher-{self.model}")

    def submit(self, inputs: Arrays, rows: int, request_id: str | None = None,
               timeout_us: int = 0) -> Ticket:
        """Queue checked inputs; the future gets this request's rows of every output, or QueueTimeout when its
        timeout (the request's `timeout_us`, 0: none, under the config's queue policy) passes before its batch starts."""
        if self._closing:
            raise ShuttingDown(f"the server is shutting down; model '{self.model}' takes no new requests")
        if self.waiting >= self.queue_size:
            raise QueueFull(f"the queue of model '{self.model}' is full ({self.waiting} requests waiting, "
                            f"queue size {self.queue_size}); retry later")
        loop = asyncio.get_running_loop()
        job = _Job(inputs, rows, Ticket(loop), client_text(request_id))
        timeout_us, configured = self.policy.timeout(timeout_us)
        if timeout_us:
            job.timer = loop.call_later(min(timeout_us / 1e6, LONGEST_TIMER_S), self._expire, job, timeout_us,
                                        configured)
        self._queue.append(job)
        self._report_depth()
        self._wakeup.set()
        return job.future

    def _expire(self, job: _Job, timeout_us: int, configured: bool) -> None:
        """A request's timeout passed: unless its batch has started, it is answered now and left to
        `_drop_abandoned` (and the gathering's filter) like a request whose caller has gone; or, under
        timeout_action DELAY, moved behind the requests still in time."""
        if job.started or job.future.done():
            return
        if self.policy.delay:
            self._postpone(job)
            return
        waited_ms = (time.monotonic() - job.enqueued) * 1000
        whose = (f"the timeout of {timeout_us} microseconds that its config.pbtxt sets (dynamic_batching "
                 "default_queue_policy default_timeout_microseconds)") if configured else (
            f"its timeout of {timeout_us} microseconds")
        job.future.set_exception(QueueTimeout(
            f"request timeout expired: the request waited {waited_ms:.1f} ms in the queue of model '{self.model}', "
            f"past {whose}, and was not run"))
        self._wakeup.set()  # the collector may be waiting on this very request for company

    def _postpone(self, job: _Job) -> None:
        """Triton's DELAY: the request goes to the delayed queue, taken once no request in time waits. One already
        gathered into the forming batch (not in the queue) stays there: it is next to run anyway."""
        try:
            self._queue.remove(job)
        except ValueError:
            return
        self._delayed.append(job)

    def hurry(self) -> None:
        """Stop waiting out `max_delay` for company: the version is retired, and the requests it holds (each one a
        user keeping it open, registry.py) run with what is queued now. It still takes requests already routed here."""
        self._hurried = True
        self._wakeup.set()

    async def close(self) -> None:
        """Take no new requests, finish every admitted one, then stop the worker thread."""
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            await self._task
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    def _report_depth(self) -> None:
        if self.observer is not None:
            self.observer.queue_depth(self.model, self.waiting)

    def _drop_abandoned(self) -> None:
        """Requests whose caller has gone (their future cancelled) leave the head of the queue unrun."""
        dropped = 0
        for queue in (self._queue, self._delayed):
            while queue and queue[0].future.done():
                queue.popleft()
                dropped += 1
        if dropped:
            self._report_depth()

    async def _wait(self, timeout: float | None) -> bool:
        """Wait for a new request (or closing) up to `timeout` seconds; False on timeout."""
        self._wakeup.clear()
        try:
            await asyncio.wait_for(self._wakeup.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def _gather(self) -> list[_Job]:
        """The next batch: the oldest request, then others while they fit, until full or the delay is over."""
        jobs = [(self._queue or self._delayed).popleft()]
        self._gathered, rows = 1, jobs[0].rows
        deadline = jobs[0].enqueued + self.max_delay
        while self.batching and rows < self.max_batch_size:
            self._drop_abandoned()
            if queue := self._queue or self._delayed:  # the requests in time first, then the delayed ones
                if rows + queue[0].rows > self.max_batch_size or not _joinable(jobs[0], queue[0]):
                    break
                jobs.append(queue.popleft())
                self._gathered += 1
                rows += jobs[-1].rows
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closing or self._hurried or not await self._wait(remaining):
                break
        return jobs

    async def _collect(self) -> None:
        while True:
            self._drop_abandoned()
            while not self._queue and not self._delayed:
                if self._closing:
                    return
                await self._wait(None)
                self._drop_abandoned()
            jobs = await self._gather()
            self._gathered = 0
            self._report_depth()
            jobs = [job for job in jobs if not job.future.done()]  # gone (or timed out) while the batch was gathered
            for job in jobs:  # no await until the run is handed to the worker: no timer fires in between
                job.started = True
                if job.timer is not None:
                    job.timer.cancel()
            if jobs:
                await self._run(jobs)

    def _run_batch(self, jobs: list[_Job]) -> tuple[list[Arrays], BatchTimes, float]:
        """In the worker thread: join the inputs, run the model once, split the outputs; each step timed."""
        started = time.monotonic()
        t0 = time.perf_counter_ns()
        joined = _join(jobs)
        t1 = time.perf_counter_ns()
        outputs = self.run(joined)
        t2 = time.perf_counter_ns()
        results = _split(outputs, jobs)
        t3 = time.perf_counter_ns()
        return results, BatchTimes(sum(job.rows for job in jobs), t1 - t0, t2 - t1, t3 - t2), started

    async def _run(self, jobs: list[_Job]) -> None:
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        try:
            results, times, began = await loop.run_in_executor(self._executor, self._run_batch, jobs)
        except Exception as exc:
            if len(jobs) == 1:
                self._settle(jobs[0], None, exc)
                return
            log.warning("batch failed; retrying its requests one at a time",
                        extra={"fields": {"event": "batch_failed", "model": self.model, "requests": len(jobs),
                                          "error": str(exc)}})
            for job in jobs:
                await self._run([job])
            return
        seconds = time.perf_counter() - started
        rows = times.rows
        if self.observer is not None:
            self.observer.batch(self.model, len(jobs), rows, seconds)
        if self.stats is not None:
            self.stats.executed(times)
        for job in jobs:  # counted by the request's handler, in the statistics only if it is answered (stats.py)
            job.future.run = RunTimes(job.rows, int((began - job.enqueued) * 1e9), times)
        if log.isEnabledFor(logging.INFO):
            log.info("batch", extra={"fields": {"event": "batch", "model": self.model, "version": self.version,
                                                "requests": len(jobs), "rows": rows, "run_ms": round(seconds * 1000, 3),
                                                "ids": [job.id for job in jobs]}})
        for job, result in zip(jobs, results, strict=True):
            self._settle(job, result, None)

    @staticmethod
    def _settle(job: _Job, result: Arrays | None, error: Exception | None) -> None:
        if job.future.done():  # the client went away
            return
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(result or {})
