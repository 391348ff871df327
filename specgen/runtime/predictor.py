"""onnxruntime sessions for exported models: provider choice, input checks, IO binding and CUDA graphs on GPU.

`auto` asks for CUDA first when the installed onnxruntime offers it. onnxruntime
falls back to the CPU silently when CUDA libraries are missing, so the provider
that actually runs is read back from the session (`Predictor.provider`).

On the CUDA provider every run goes through IO binding (inputs copied to the device once, outputs read
back once) and convolutions run channels-last (`prefer_nhwc`: bench/RESULTS.md measured ResNet50 1.25x
faster at batch 8 in float32, and fp16's tensor cores need it). With `cuda_graphs`, one CUDA graph is
captured per batch-size bucket (runtime/buckets.py) and replayed: 1.46x (fp32) to 1.93x (fp16) more on
ResNet50 at batch 8 on an H200. onnxruntime keeps a session's captured graphs per thread, so every
capture and replay runs on the Predictor's own thread (`executor`); calls from other threads are handed
to it. It captures with cudaStreamCaptureModeGlobal, so captures hold `CUDA_WORK` exclusively and every
other CUDA call of every Predictor in the process (session creation, runs) holds it shared.
"""

from __future__ import annotations

import ctypes.util
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from specgen.errors import SpecgenError
from specgen.runtime import lengths, quantized_inputs
from specgen.runtime.buckets import CUDA_WORK, Slot, batch_buckets, bucket_for, chunks, pad_rows, take_rows
from specgen.runtime.sources.base import lossy_cast

CUDA, CPU = "CUDAExecutionProvider", "CPUExecutionProvider"
DTYPES = {"tensor(float)": np.float32, "tensor(int32)": np.int32, "tensor(int64)": np.int64, "tensor(double)": np.float64,
          "tensor(uint8)": np.uint8, "tensor(float16)": np.float16}
# onnxruntime runs a model a few times before it captures (memory is allocated then, never during a capture);
# recent versions do those runs inside the first call, older ones count calls: 3 calls capture on either
CAPTURE_CALLS = 3
PROBE_ROWS = 2  # a batch of 2 tells a batch-first output (first dim 2) from one of fixed size 1


class InputError(SpecgenError, ValueError):
    """Inputs that do not fit the model: names, dtypes or shapes."""


# The --provider values each command takes (its argparse choices): an error's advice names only those of the
# command that printed it (`specgen export` gates variants on the provider that will run them: no `auto`).
PROVIDERS = ("auto", "cuda", "cpu")  # specgen infer, specgen serve
EXPORT_PROVIDERS = ("cpu", "cuda")


def _cpu_choices(choices: Sequence[str]) -> str | None:
    """The command's --provider values that run on the CPU ('cpu or auto'); None where it has none, as for an fp16
    export, which the CPU cannot verify: advice naming one would only lead to another refusal."""
    found = [c for c in ("cpu", "auto") if c in choices]
    return " or ".join(found) if found else None


def _accept_cpu(choices: Sequence[str]) -> str:
    """How to run on the CPU instead, in the command's own --provider values ('' where none runs there)."""
    cpu = _cpu_choices(choices)
    return f" Use --provider {cpu} to accept that." if cpu else ""


def has_cuda_driver() -> bool:
    """Whether the NVIDIA driver library is present: without it CUDA cannot start, so `auto` skips it."""
    return ctypes.util.find_library("cuda") is not None


def _no_cuda(choice: str, choices: Sequence[str] = PROVIDERS) -> None:
    """InputError where `--provider cuda` asks for a CUDA provider this onnxruntime does not have."""
    available = ort.get_available_providers()
    if choice == "cuda" and CUDA not in available:
        cpu = _cpu_choices(choices)
        raise InputError(f"the CUDA provider is not in this onnxruntime (available: {', '.join(available)}); "
                         f"install onnxruntime-gpu{f', or use --provider {cpu}' if cpu else ''}")


def _providers(choice: str) -> list[str]:
    available = ort.get_available_providers()
    if choice == "cpu":
        return [CPU]
    _no_cuda(choice)
    if choice == "cuda" or (choice == "auto" and CUDA in available and has_cuda_driver()):
        return [CUDA, CPU]
    if choice == "auto":
        return [CPU]
    raise InputError(f"unknown provider '{choice}'; expected auto, cuda or cpu")


def session_providers(choice: str, cuda_graphs: bool = False, nhwc: bool = True) -> list[Any]:
    """The `providers` argument of the session: CUDA (when chosen) with its options, then the CPU.

    `prefer_nhwc` and `enable_cuda_graph` are options of onnxruntime's CUDA provider; nothing in the
    exported graph changes.
    """
    names = _providers(choice)
    options = {**({"prefer_nhwc": "1"} if nhwc else {}), **({"enable_cuda_graph": "1"} if cuda_graphs else {})}
    return [(CUDA, options) if name == CUDA and options else name for name in names]


def _check_range(name: str, array: np.ndarray, dtype: np.dtype) -> None:
    """Values that the model's dtype cannot hold: integers past an integer dtype (300 for uint8 pixels; numpy's cast
    would wrap them) and finite floats past a narrower float dtype (1e300 into float32; the cast makes them inf)."""
    if array.dtype == dtype or not array.size:
        return
    if array.dtype.kind == "f" and dtype.kind == "f":
        _check_float_range(name, array, dtype)
        return
    if array.dtype.kind not in "iu" or dtype.kind not in "iu":
        return
    info, low, high = np.iinfo(dtype), array.min(), array.max()
    if low < info.min or high > info.max:
        raise InputError(f"input '{name}': received {low if low < info.min else high}, expected {dtype.name} values "
                         f"in [{info.min}, {info.max}]")


def _check_float_range(name: str, array: np.ndarray, dtype: np.dtype) -> None:
    largest = float(np.finfo(dtype).max)
    if float(np.finfo(array.dtype).max) <= largest:  # as Python floats: float16 vs 3.4e38 warned of an overflow
        return
    past = np.isfinite(array) & (np.abs(array) > largest)
    if past.any():
        at = tuple(int(i) for i in np.argwhere(past)[0])
        raise InputError(f"input '{name}': received {array[at]} at {list(at)}, expected {dtype.name} numbers within "
                         f"+-{np.finfo(dtype).max!s} (or nan, inf, -inf)")


def shape_shown(shape: Sequence[Any]) -> list[Any]:
    """A model input's shape as messages show it: its sizes and named dimensions, `batch` for an unnamed one."""
    return [d if isinstance(d, int | str) else "batch" for d in shape]


def empty_batch(name: str, shape: tuple[int, ...]) -> str:
    """An input of no rows is refused, as the server refuses it: onnxruntime's kernels disagree on an empty batch
    (LSTM/GRU/RNN abort or crash the process, opset 23's Attention fails with an internal message, others answer
    an empty output), so one model would answer differently by op, opset and provider."""
    return f"input '{name}': received batch size 0 (shape {list(shape)}), expected at least 1 row"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


class Predictor:
    """Run an exported model: `Predictor("model.onnx")({"image": batch})` -> outputs by name.

    `cuda_graphs`: on the CUDA provider, capture one CUDA graph per batch-size bucket at construction and
    replay it; a batch is padded up to its bucket (`bucket_for`) and its outputs sliced back. The buckets
    are `batch_buckets(max_batch_size)` (1, 2, 4, ... up to max_batch_size) unless `buckets` names them.
    Where graphs cannot be used (another provider runs, a non-batch dimension is named, an output is not
    batch-first, onnxruntime refuses the capture) the Predictor runs without them and says why in
    `graph_note`. `buckets` given without `cuda_graphs` pads batches on any provider (on the CPU only
    worth it to check the path: padding costs compute there). `nhwc`: the CUDA provider's `prefer_nhwc`.
    `choices`: the --provider values of the command that runs it, the only ones its advice names.
    """

    def __init__(self, model: Path | str | bytes, provider: str = "auto", threads: int = 0, *,
                 cuda_graphs: bool = False, max_batch_size: int = 0, buckets: Sequence[int] | None = None,
                 nhwc: bool = True, choices: Sequence[str] = PROVIDERS):
        ladder = batch_buckets(max_batch_size, buckets)  # refuses bad buckets before the model loads
        self.source = model if isinstance(model, bytes) else str(model)
        self.threads, self.nhwc = threads, nhwc
        # A failed CUDA start is logged by the default logger before any session option applies; it is
        # reported through `provider` (and by `specgen infer`) instead.
        ort.set_default_logger_severity(4)
        self.graph_note: str | None = None
        _no_cuda(provider, choices)  # refused first in the command's own advice (_providers' names them all)
        self.session = self._session(provider, cuda_graphs)
        self.provider = self.session.get_providers()[0]
        self.fell_back = CUDA in _providers(provider) and self.provider != CUDA
        if provider == "cuda" and self.provider != CUDA:
            raise InputError("the CUDA provider could not start (CUDA or cuDNN libraries missing?); "
                             f"onnxruntime fell back to the CPU.{_accept_cpu(choices)}")
        self.inputs = {i.name: (tuple(i.shape), DTYPES.get(i.type, np.float32)) for i in self.session.get_inputs()}
        self.outputs = [o.name for o in self.session.get_outputs()]
        metadata = self.session.get_modelmeta().custom_metadata_map
        self.bounds = lengths.read(metadata)
        self.minima, self.id_ranges = lengths.read_minima(metadata), lengths.read_ids(metadata)
        self.quantized = quantized_inputs.read(metadata)  # an int8 variant's inputs that cannot carry NaN or inf
        self.graphs = cuda_graphs and self.graph_note is None
        if cuda_graphs and self.provider != CUDA and self.graph_note is None:
            self.graph_note = f"CUDA graphs need the CUDA provider; {self.provider} runs this model"
            self.graphs = False
        self.buckets: tuple[int, ...] | None = ladder if self.graphs or buckets is not None else None
        self.executor: ThreadPoolExecutor | None = None
        self._thread: int | None = None  # the ident of the executor's one thread
        self._slots: dict[int, Slot] = {}
        self._plain_options: ort.RunOptions | None = None  # none at all is cheapest (buckets.Slot says why)
        if self.graphs:  # outside any captured graph: onnxruntime's "no capture, no replay" id
            self._plain_options = ort.RunOptions()
            self._plain_options.add_run_config_entry("gpu_graph_id", "-1")
        if self.buckets is not None:
            self._start_slots(provider)

    def _session(self, provider: str, cuda_graphs: bool) -> ort.InferenceSession:
        """The session; with `cuda_graphs`, one without graphs (and `graph_note` saying why) where onnxruntime
        refuses them at load (a node outside the CUDA provider, control flow)."""
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        gpu = CUDA in _providers(provider)
        with CUDA_WORK.shared() if gpu else nullcontext():  # its weights' cudaMalloc must not meet a capture
            if not cuda_graphs or not gpu:
                return ort.InferenceSession(self.source, options, providers=session_providers(provider, False, self.nhwc))
            try:
                return ort.InferenceSession(self.source, options, providers=session_providers(provider, True, self.nhwc))
            except Exception as exc:  # onnxruntime's own exception types; a model that cannot load fails again below
                self.graph_note = f"onnxruntime cannot capture this model as a CUDA graph: {_first_line(exc)}"
                return ort.InferenceSession(self.source, options,
                                            providers=session_providers(provider, False, self.nhwc))

    def _fixed_examples(self) -> str | None:
        """Why a bucket's buffers cannot be allocated: a named (run-time) dimension besides the batch."""
        for name, (shape, _) in self.inputs.items():
            if not shape or any(not isinstance(d, int) for d in shape[1:]):
                return f"input '{name}' has shape {list(shape)}: each bucket needs fixed sizes besides the batch"
        return None

    def _start_slots(self, provider: str) -> None:
        """The bucket thread, then every slot allocated (and, with graphs, captured) on it, largest first."""
        reason = self._fixed_examples()
        if reason is None:
            self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specgen-buckets")
            try:
                self._thread = self.executor.submit(threading.get_ident).result()
                self.executor.submit(self._make_slots).result()
                return
            except Exception as exc:
                reason = _first_line(exc)
                self.close()
        if not self.graphs:  # buckets on the CPU (a test of the path) cannot do without fixed sizes
            raise InputError(f"batch buckets cannot be used: {reason}")
        self.graph_note = f"CUDA graphs are not used: {reason}"
        self.graphs, self.buckets = False, None
        self.session = self._session(provider, False)  # a failed capture can leave the session unusable
        self._plain_options = None

    def _make_slots(self) -> None:
        with CUDA_WORK.exclusive() if self.graphs else nullcontext():
            self._allocate_and_capture()

    def _allocate_and_capture(self) -> None:
        tails = {n: (tuple(shape[1:]), dtype) for n, (shape, dtype) in self.inputs.items()}
        probe = self._run_plain({n: np.zeros((PROBE_ROWS, *t), d) for n, (t, d) in tails.items()})
        for name, value in probe.items():
            if value.ndim == 0 or value.shape[0] != PROBE_ROWS:
                raise InputError(f"output '{name}' has shape {list(value.shape)} for a batch of {PROBE_ROWS}: "
                                 "not batch-first, so a padded batch cannot be sliced back")
        outs = {n: (tuple(v.shape[1:]), v.dtype.type) for n, v in probe.items()}
        device = "cuda" if self.provider == CUDA else "cpu"
        assert self.buckets is not None
        # largest first: its runs grow onnxruntime's memory arena once, so the smaller buckets' captures
        # find their memory already there (no allocation may happen while a stream is being captured)
        for bucket in sorted(self.buckets, reverse=True):
            slot = Slot(self.session, bucket, tails, outs, device, graph_id=bucket if self.graphs else None)
            zeros = {n: np.zeros((bucket, *t), d) for n, (t, d) in tails.items()}
            for _ in range(CAPTURE_CALLS if self.graphs else 1):
                slot.run(zeros)
            self._slots[bucket] = slot

    def close(self) -> None:
        """Stop the bucket thread and free the buckets' buffers (a model unloaded by the server); later calls run
        plain. Call it from any thread but the executor's own (it waits for that thread to finish)."""
        if self.executor is not None:
            self.executor.shutdown(wait=True)
        with CUDA_WORK.shared() if self.provider == CUDA else nullcontext():  # cudaFree must not meet a capture
            self.executor, self._slots, self._thread = None, {}, None

    def bucket_for(self, rows: int) -> int:
        """The rows a batch of `rows` is run as: its bucket (padded up to it); `rows` itself without buckets.

        Above the largest bucket the batch runs in chunks of the largest, so that is returned.
        """
        return rows if self.buckets is None else bucket_for(self.buckets, rows)

    def check(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The inputs as contiguous arrays of the model's dtypes, or an InputError naming what is wrong."""
        missing = sorted(set(self.inputs) - set(inputs))
        unknown = sorted(set(inputs) - set(self.inputs))
        if missing or unknown:
            raise InputError(f"inputs must be exactly {sorted(self.inputs)}; missing {missing}, unknown {unknown}")
        checked = {}
        for name, (shape, dtype) in self.inputs.items():
            array = np.asarray(inputs[name])
            if array.dtype != dtype and (array.dtype.kind == "b" or not np.can_cast(array.dtype, dtype, "same_kind")):
                raise InputError(f"input '{name}': received dtype {array.dtype}, expected {np.dtype(dtype).name}")
            lost = lossy_cast(array, np.dtype(dtype))  # same_kind lets int64 16777217 become float32 16777216
            if lost is not None:
                raise InputError(f"input '{name}': the value {array[lost]} at {list(lost)} has no exact "
                                 f"{np.dtype(dtype).name}; received dtype {array.dtype}: send it as "
                                 f"{np.dtype(dtype).name} or within its exact range")
            _check_range(name, array, np.dtype(dtype))
            if array.ndim != len(shape) or any(isinstance(d, int) and d != a for d, a in zip(shape, array.shape, strict=True)):
                raise InputError(f"input '{name}': received shape {list(array.shape)}, expected {shape_shown(shape)}")
            if array.ndim and not array.shape[0] and not isinstance(shape[0], int):  # a named or unnamed batch
                raise InputError(empty_batch(name, array.shape))
            checked[name] = np.ascontiguousarray(array, dtype=dtype)
        problem = self.out_of_range(checked)
        if problem:
            raise InputError(problem)
        return checked

    def out_of_range(self, inputs: dict[str, np.ndarray]) -> str | None:
        """Why an input is outside the limits the export recorded (runtime/lengths.py), or None: sized unlike another
        input along a dimension they share, longer or shorter than a named dimension takes, or an id outside an
        embedding's rows; or NaN or inf in an input an int8 variant quantizes (runtime/quantized_inputs.py).
        `specgen serve` asks it too."""
        shapes = {n: np.shape(inputs[n]) for n in self.inputs if n in inputs}
        declared = {n: s for n, (s, _) in self.inputs.items() if n in shapes}
        return (lengths.unequal(declared, shapes) or lengths.violation(self.bounds, declared, shapes)
                or lengths.too_short(self.minima, declared, shapes)
                or lengths.bad_id(self.id_ranges, {n: inputs[n] for n in shapes})
                or quantized_inputs.non_finite(self.quantized, inputs))

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        feeds = self.check(inputs)
        with CUDA_WORK.shared() if self.provider == CUDA else nullcontext():  # never beside another model's capture
            if not self._slots or self.executor is None:
                return self._run_plain(feeds)
            if threading.get_ident() == self._thread:
                return self._run_buckets(feeds)  # the server's batcher may run its batches on `executor` itself
            return self.executor.submit(self._run_buckets, feeds).result()

    def _run_buckets(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """On the bucket thread: each chunk padded to its bucket, run in its slot, its rows taken back."""
        assert self.buckets is not None
        rows = next(iter(feeds.values())).shape[0]
        parts = []
        for start, stop, bucket in chunks(self.buckets, rows):
            piece = {n: a[start:stop] for n, a in feeds.items()}
            parts.append(take_rows(self._slots[bucket].run(pad_rows(piece, bucket)), stop - start, bucket))
        if len(parts) == 1:
            return parts[0]
        return {name: np.concatenate([p[name] for p in parts]) for name in self.outputs}

    def _run_plain(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One run without buckets; on CUDA through IO binding (outputs left on the device until read)."""
        if self.provider != CUDA:
            return dict(zip(self.outputs, self.session.run(self.outputs, feeds, self._plain_options), strict=True))
        binding = self.session.io_binding()  # inputs copied to the GPU once, outputs left there until read
        for name, array in feeds.items():
            binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array, "cuda", 0))
        for name in self.outputs:
            binding.bind_output(name, "cuda", 0)
        self.session.run_with_iobinding(binding, self._plain_options)
        return dict(zip(self.outputs, binding.copy_outputs_to_cpu(), strict=True))
