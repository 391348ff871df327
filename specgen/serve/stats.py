"""Per-version inference statistics in Triton's format (`GET /v2/models/{name}/stats`, the gRPC ModelStatistics RPC).

The counts and durations mean what Triton's mean (docs/protocol/extension_statistics.md):

- `success` / `fail`: requests admitted to the version's queue that were answered / not (a timeout or deadline
  passed in the queue, the client left, onnxruntime failed), and their cumulative duration from receipt to answer.
  A request refused before it is admitted (a bad request, a full queue) counts in none of them, as in Triton
  (answers.py `finished`);
- `queue`: per successful request, the time from joining the model's queue to its batch starting;
- `compute_input` / `compute_infer` / `compute_output`: per successful request, the durations of the batch
  it ran in: joining the requests' inputs into one batch, the onnxruntime run, splitting the outputs back
  (each request of a batch is charged the whole batch's durations, as Triton charges them);
- `inference_count`: rows (examples) of successful requests, `execution_count`: onnxruntime runs (batches);
- `batch_stats`: per batch size in rows, the runs of that size and their compute durations, once per run;
- `last_inference`: milliseconds since the epoch of the last batch run.

A request whose batch ran but whose answer nobody received (its client left or its deadline passed while the batch
ran) is a `fail` and adds nothing to `queue`, `compute_*` or `inference_count`: Triton adds those in
`InferenceStatsAggregator::UpdateSuccess`, for requests reported successful only, while a run counts in
`execution_count` and `batch_stats` (`UpdateInferBatchStats`, once per run) whatever became of its requests. So
`queue.count` and `compute_*.count` equal `success.count`, and the rows of `batch_stats` can exceed
`inference_count` by the rows of such requests. The batcher hands each request its part of the run (`RunTimes`, on
its `Ticket`); the handler passes it to `answered` with the request's outcome, the one place success is decided.

Counters are plain integers changed on the event loop only (the batcher reports a finished batch from
its collector task, requests report their answer from their handler), so no lock is needed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def as_json(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass(frozen=True)
class BatchTimes:
    """One onnxruntime run of a batch: its rows, and nanoseconds to join inputs, run, and split outputs."""

    rows: int
    input_ns: int
    infer_ns: int
    output_ns: int


@dataclass(frozen=True)
class RunTimes:
    """One request's part in a run: its rows, its nanoseconds in the queue, and the run's durations."""

    rows: int
    queue_ns: int
    batch: BatchTimes


@dataclass
class VersionStats:
    """The statistics of one served version of one model."""

    name: str
    version: int
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    inference_count: int = 0
    execution_count: int = 0
    last_inference: int = 0
    batches: dict[int, tuple[Duration, Duration, Duration]] = field(default_factory=dict)

    def executed(self, times: BatchTimes) -> None:
        """A batch ran (whatever becomes of its requests: their part is counted by `answered`)."""
        self.execution_count += 1
        self.last_inference = time.time_ns() // 1_000_000
        per_size = self.batches.get(times.rows)
        if per_size is None:
            per_size = self.batches[times.rows] = (Duration(), Duration(), Duration())
        for duration, ns in zip(per_size, (times.input_ns, times.infer_ns, times.output_ns), strict=True):
            duration.add(ns)

    def answered(self, ok: bool, ns: int, run: RunTimes | None = None) -> None:
        """A request admitted to the queue was answered (`ok`: with its outputs) after `ns`; `run`: its part of the run
        it was in. Only a successful request adds its queue and compute durations and its rows (module docstring)."""
        if not ok:
            self.fail.add(ns)
            return
        self.success.add(ns)
        if run is None:  # never for a 200 (each one ran in a batch); its count is kept true regardless
            return
        self.inference_count += run.rows
        self.queue.add(run.queue_ns)
        self.compute_input.add(run.batch.input_ns)
        self.compute_infer.add(run.batch.infer_ns)
        self.compute_output.add(run.batch.output_ns)

    def as_json(self) -> dict[str, Any]:
        """Triton's JSON for this version (integers, not the strings protobuf's JSON mapping makes of uint64)."""
        zero = {"count": 0, "ns": 0}
        return {
            "name": self.name, "version": str(self.version), "last_inference": self.last_inference,
            "inference_count": self.inference_count, "execution_count": self.execution_count,
            "inference_stats": {"success": self.success.as_json(), "fail": self.fail.as_json(),
                                "queue": self.queue.as_json(), "compute_input": self.compute_input.as_json(),
                                "compute_infer": self.compute_infer.as_json(),
                                "compute_output": self.compute_output.as_json(), "cache_hit": zero, "cache_miss": zero},
            "response_stats": {},
            "batch_stats": [{"batch_size": size, "compute_input": d_in.as_json(), "compute_infer": d_run.as_json(),
                             "compute_output": d_out.as_json()}
                            for size, (d_in, d_run, d_out) in sorted(self.batches.items())],
            "memory_usage": [],
        }
