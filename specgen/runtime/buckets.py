"""Batch-size buckets: a batch padded up to the next bucket, run in that bucket's fixed buffers, sliced back.

A captured CUDA graph replays fixed device addresses and fixed shapes, so `Predictor` (with `cuda_graphs`)
keeps one `Slot` per bucket: its input and output buffers, bound once through onnxruntime's IO binding,
and the graph onnxruntime captured for that binding (`gpu_graph_id` = the bucket size). A batch of `rows`
runs in the smallest bucket that holds it, its last row repeated into the padding; a batch larger than the
largest bucket runs in chunks of the largest. The padding rows are computed and thrown away: exported
models treat rows independently (the server's batcher already relies on this when it stacks requests).

Nothing here needs a GPU: on the CPU provider the same slots bind CPU buffers, which is how the tests
exercise padding, slicing, the lock and the copy-out (tests/test_predictor_buckets.py).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import numpy as np
import onnxruntime as ort

from specgen.errors import SpecgenError

Arrays = dict[str, np.ndarray]
# Triton's max_batch_size 0 means "no batching": requests of any size, so the default ladder applies
DEFAULT_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


class BucketError(SpecgenError, ValueError):
    """Buckets that cannot be used: not positive integers, or beyond the model's max_batch_size."""


def batch_buckets(max_batch_size: int = 0, buckets: Sequence[int] | None = None) -> tuple[int, ...]:
    """The sizes a batch is padded up to: the powers of two below `max_batch_size`, then `max_batch_size`.

    max_batch_size 64 gives 1, 2, 4, 8, 16, 32, 64; 48 gives 1, 2, 4, 8, 16, 32, 48; 0 (Triton: no
    batching) gives DEFAULT_BUCKETS. Powers of two bound the padding to less than half of any padded batch,
    with one captured graph per doubling. `buckets` replaces the ladder (sorted, duplicates dropped).
    """
    if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int) or max_batch_size < 0:
        raise BucketError(f"max_batch_size must be an integer, 0 or more; received {max_batch_size!r}")
    if buckets is not None:
        bad = [b for b in buckets if isinstance(b, bool) or not isinstance(b, int) or b < 1]
        if bad or not buckets:
            raise BucketError(f"batch buckets must be positive integers; received {list(buckets)}")
        over = [b for b in buckets if max_batch_size and b > max_batch_size]
        if over:
            raise BucketError(f"batch buckets {over} exceed max_batch_size {max_batch_size}")
        return tuple(sorted(set(buckets)))
    if max_batch_size == 0:
        return DEFAULT_BUCKETS
    ladder = [1 << k for k in range(max_batch_size.bit_length()) if 1 << k < max_batch_size]
    return (*ladder, max_batch_size)


def bucket_for(buckets: Sequence[int], rows: int) -> int:
    """The bucket a batch of `rows` is padded to: the smallest that holds it, else the largest (run in chunks)."""
    return next((b for b in buckets if b >= rows), buckets[-1])


def chunks(buckets: Sequence[int], rows: int) -> list[tuple[int, int, int]]:
    """(start, stop, bucket) for each piece of a batch: pieces of the largest bucket, then one padded piece."""
    largest, pieces, start = buckets[-1], [], 0
    while rows - start > largest:
        pieces.append((start, start + largest, largest))
        start += largest
    pieces.append((start, rows, bucket_for(buckets, rows - start)))
    return pieces


def pad_rows(arrays: Arrays, bucket: int) -> Arrays:
    """Each array grown to `bucket` rows by repeating its last row (zeros for an empty batch).

    The last row rather than zeros: the padding then holds values the model has just been given, so it
    cannot reach a path real inputs never take (a log of zero, an index the model refuses).
    """
    padded = {}
    for name, array in arrays.items():
        missing = bucket - array.shape[0]
        if missing < 0:
            raise BucketError(f"input '{name}' has {array.shape[0]} rows; bucket {bucket} holds at most {bucket}")
        if missing == 0:
            padded[name] = array
            continue
        filler = (np.repeat(array[-1:], missing, axis=0) if array.shape[0]
                  else np.zeros((missing, *array.shape[1:]), array.dtype))
        padded[name] = np.concatenate([array, filler])
    return padded


def take_rows(outputs: Arrays, rows: int, bucket: int) -> Arrays:
    """The first `rows` of every output of a bucket-sized run; an output not batch-first is an error."""
    for name, value in outputs.items():
        if value.ndim == 0 or value.shape[0] != bucket:
            raise BucketError(f"output '{name}' has shape {list(value.shape)}; a run of {bucket} rows needs {bucket} "
                              "as its first dimension to be sliced back")
    return {name: value[:rows] for name, value in outputs.items()}


class CaptureLock:
    """Graph captures exclusive, every other CUDA call shared: one per process (`CUDA_WORK`).

    onnxruntime captures with cudaStreamCaptureModeGlobal, under which a cudaMalloc or a synchronous copy
    from any thread of the process invalidates the capture (and fails that call): a model loading its
    graphs while another one serves, or a session being created beside a capture, would break one or the
    other. Waiting captures go first: new shared holders wait behind them, so a load under steady traffic
    still gets its turn. Not reentrant: a holder must not take it again.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._sharing = 0
        self._capturing = False
        self._waiting = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._condition:
            while self._capturing or self._waiting:
                self._condition.wait()
            self._sharing += 1
        try:
            yield
        finally:
            with self._condition:
                self._sharing -= 1
                if not self._sharing:
                    self._condition.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._condition:
            self._waiting += 1
            while self._capturing or self._sharing:
                self._condition.wait()
            self._waiting -= 1
            self._capturing = True
        try:
            yield
        finally:
            with self._condition:
                self._capturing = False
                self._condition.notify_all()


CUDA_WORK = CaptureLock()


class Slot:
    """One bucket: input and output buffers on `device`, bound once, and a lock held from copy-in to copy-out.

    `run` copies the padded inputs into the bound buffers (`OrtValue.update_inplace`: their addresses never
    change, as a captured graph requires), runs the session (onnxruntime replays the bucket's graph once it
    has captured it), and copies every output to new host arrays (`copy_outputs_to_cpu`) before the lock is
    released, so the next run of this bucket can never overwrite outputs a caller still holds. `graph_id`:
    onnxruntime's `gpu_graph_id` run option (one captured graph per id in one session); None runs without it.
    """

    def __init__(self, session: ort.InferenceSession, bucket: int, inputs: Mapping[str, tuple[tuple[int, ...], type]],
                 outputs: Mapping[str, tuple[tuple[int, ...], type]], device: str, graph_id: int | None = None):
        self.bucket, self.session, self.lock = bucket, session, threading.Lock()
        self.binding = session.io_binding()
        self.inputs = {name: ort.OrtValue.ortvalue_from_shape_and_type([bucket, *tail], dtype, device, 0)
                       for name, (tail, dtype) in inputs.items()}
        self.outputs = {name: ort.OrtValue.ortvalue_from_shape_and_type([bucket, *tail], dtype, device, 0)
                        for name, (tail, dtype) in outputs.items()}
        for name, value in self.inputs.items():
            self.binding.bind_ortvalue_input(name, value)
        for name, value in self.outputs.items():
            self.binding.bind_ortvalue_output(name, value)
        # None without a graph id: onnxruntime's run_with_iobinding looks the id up in the options it is given,
        # and options without one cost a C++ exception per run (27 us here, on a 14 us model)
        self.run_options: ort.RunOptions | None = None
        if graph_id is not None:
            self.run_options = ort.RunOptions()
            self.run_options.add_run_config_entry("gpu_graph_id", str(graph_id))

    def run(self, feeds: Arrays) -> Arrays:
        """Outputs for `feeds` (exactly `bucket` rows each, the model's dtypes, C-contiguous), as host copies."""
        with self.lock:
            for name, value in self.inputs.items():
                value.update_inplace(feeds[name])
            # onnxruntime's own IO-binding helper (transformers/io_binding_helper.py) synchronizes around the run:
            # the host-to-device copy must have landed before the graph reads the buffer
            self.binding.synchronize_inputs()
            self.session.run_with_iobinding(self.binding, self.run_options)
            self.binding.synchronize_outputs()
            copied = self.binding.copy_outputs_to_cpu()  # new host arrays, never views of the bound buffers
        return dict(zip(self.outputs, copied, strict=True))
