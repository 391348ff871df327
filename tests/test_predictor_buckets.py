"""Batch buckets on the CPU: the ladder, padding and slicing back, the slot's lock and copy-out, the bucket thread.

The CUDA-graph path (tests/test_gpu_predictor.py) runs the same code with device buffers and a `gpu_graph_id`
per bucket; everything here needs no GPU: `Predictor(..., buckets=...)` on the CPU provider pads each batch into
a bucket's bound CPU buffers exactly as the GPU path does into device buffers.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from specgen.runtime import predictor as predictor_module
from specgen.runtime.buckets import (
    DEFAULT_BUCKETS,
    BucketError,
    CaptureLock,
    Slot,
    batch_buckets,
    bucket_for,
    chunks,
    pad_rows,
    take_rows,
)
from specgen.runtime.predictor import CPU, CUDA, InputError, Predictor, session_providers


def _model(batch: str | int = "batch", side: int | str = 8, extra_output: str | None = None) -> bytes:
    """NHWC image -> Transpose -> Conv -> Relu -> Flatten -> MatMul -> Softmax: the shape of an exported CNN."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), "w"),
               numpy_helper.from_array((rng.standard_normal((8 * 6 * 6, 10)) / 10).astype(np.float32), "g")]
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]), helper.make_node("Conv", ["t", "w"], ["c"]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("MatMul", ["f", "g"], ["logits"]), helper.make_node("Softmax", ["logits"], ["p"])]
    outputs = [helper.make_tensor_value_info("p", TensorProto.FLOAT, [batch, 10])]
    if extra_output:  # a whole-batch sum: not batch-first, so a padded batch cannot be sliced back
        nodes.append(helper.make_node("ReduceSum", ["logits"], [extra_output], keepdims=0))
        outputs.append(helper.make_tensor_value_info(extra_output, TensorProto.FLOAT, []))
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, side, 8, 4])],
                              outputs, weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10).SerializeToString()


MODEL = _model()


def _images(rows: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 8, 8, 4)).astype(np.float32)


def test_bucket_ladder() -> None:
    assert batch_buckets(64) == (1, 2, 4, 8, 16, 32, 64) == DEFAULT_BUCKETS
    assert batch_buckets(48) == (1, 2, 4, 8, 16, 32, 48)
    assert batch_buckets(100) == (1, 2, 4, 8, 16, 32, 64, 100)
    assert batch_buckets(1) == (1,)
    assert batch_buckets(0) == DEFAULT_BUCKETS  # Triton's "no batching": requests of any size
    assert batch_buckets(64, [8, 1, 8, 32]) == (1, 8, 32)


@pytest.mark.parametrize(("args", "message"), [
    ((-1,), "max_batch_size must be an integer, 0 or more; received -1"),
    ((True,), "max_batch_size must be an integer, 0 or more; received True"),
    ((16, [0, 4]), "batch buckets must be positive integers; received [0, 4]"),
    ((16, []), "batch buckets must be positive integers; received []"),
    ((16, [2.0]), "batch buckets must be positive integers; received [2.0]"),
    ((16, [8, 32]), "batch buckets [32] exceed max_batch_size 16"),
])
def test_bad_buckets(args: tuple, message: str) -> None:
    with pytest.raises(BucketError) as caught:
        batch_buckets(*args)
    assert str(caught.value) == message


def test_bucket_for_and_chunks() -> None:
    ladder = (1, 2, 4, 8)
    assert [bucket_for(ladder, r) for r in (0, 1, 2, 3, 5, 8, 9)] == [1, 1, 2, 4, 8, 8, 8]
    assert chunks(ladder, 5) == [(0, 5, 8)]
    assert chunks(ladder, 8) == [(0, 8, 8)]
    assert chunks(ladder, 19) == [(0, 8, 8), (8, 16, 8), (16, 19, 4)]
    assert chunks(ladder, 0) == [(0, 0, 1)]


def test_pad_rows_repeats_the_last_row_and_take_rows_slices_back() -> None:
    x = np.arange(6, dtype=np.int64).reshape(3, 2)
    padded = pad_rows({"x": x}, 5)["x"]
    assert padded.tolist() == [[0, 1], [2, 3], [4, 5], [4, 5], [4, 5]] and padded.flags.c_contiguous
    assert pad_rows({"x": x}, 3)["x"] is x  # a full bucket is not copied
    assert pad_rows({"x": x[:0]}, 2)["x"].tolist() == [[0, 0], [0, 0]]  # an empty batch: zeros
    with pytest.raises(BucketError, match=r"^input 'x' has 3 rows; bucket 2 holds at most 2$"):
        pad_rows({"x": x}, 2)
    assert take_rows({"y": padded}, 3, 5)["y"].tolist() == x.tolist()
    with pytest.raises(BucketError) as caught:
        take_rows({"y": padded, "s": np.float32(1.0)}, 3, 5)
    assert str(caught.value) == ("output 's' has shape []; a run of 5 rows needs 5 as its first dimension to be "
                                 "sliced back")


# onnxruntime's CPU kernels (MLAS) split a Conv or MatMul over rows and output channels, never over the summed
# axis, so a row's sums run in the same order whatever the batch size: padded runs give each row's outputs bit
# for bit, and this test asks for that, not a tolerance.
def test_padded_runs_equal_unpadded_runs_bitwise() -> None:
    plain, bucketed = Predictor(MODEL, "cpu"), Predictor(MODEL, "cpu", buckets=(1, 2, 4, 8))
    assert bucketed.buckets == (1, 2, 4, 8) and not bucketed.graphs and bucketed.executor is not None
    for rows in (1, 2, 3, 5, 7, 8, 9, 19):  # 9 and 19: chunks of 8, then a padded remainder
        x = _images(rows, seed=rows)
        expected, got = plain({"x": x})["p"], bucketed({"x": x})["p"]
        assert got.shape == (rows, 10) and got.dtype == np.float32
        assert np.array_equal(got, expected), rows
    for predictor in (plain, bucketed):  # no rows: refused by both, as the server refuses it (docs/sequences.md)
        with pytest.raises(InputError, match=r"^input 'x': received batch size 0 \(shape \[0, 8, 8, 4\]\), expected at "
                                             r"least 1 row$"):
            predictor({"x": _images(0, seed=0)})
    assert [bucketed.bucket_for(r) for r in (1, 3, 8, 40)] == [1, 4, 8, 8]
    assert plain.bucket_for(3) == 3  # no buckets: a batch runs as it is


def test_outputs_are_copies_made_before_the_slot_runs_again() -> None:
    session = ort.InferenceSession(MODEL, providers=[CPU])
    slot = Slot(session, 4, {"x": ((8, 8, 4), np.float32)}, {"p": ((10,), np.float32)}, "cpu")
    first = slot.run({"x": _images(4, seed=1)})["p"]
    kept = first.copy()
    second = slot.run({"x": _images(4, seed=2)})["p"]
    assert np.array_equal(first, kept) and not np.array_equal(first, second)
    # the bound buffer now holds the second run; the first outputs are not a view of it
    assert not np.shares_memory(first, slot.outputs["p"].numpy())
    assert np.array_equal(slot.outputs["p"].numpy(), second)


def test_a_slot_runs_only_under_its_lock() -> None:
    session = ort.InferenceSession(MODEL, providers=[CPU])
    slot = Slot(session, 2, {"x": ((8, 8, 4), np.float32)}, {"p": ((10,), np.float32)}, "cpu")
    done = threading.Event()
    slot.lock.acquire()  # as another caller would hold it from copy-in to copy-out
    worker = threading.Thread(target=lambda: (slot.run({"x": _images(2)}), done.set()))
    worker.start()
    assert not done.wait(0.3)  # blocked on the lock, not run
    slot.lock.release()
    worker.join(10)
    assert done.is_set()


def test_calls_from_many_threads_and_from_the_bucket_thread() -> None:
    plain, bucketed = Predictor(MODEL, "cpu"), Predictor(MODEL, "cpu", buckets=(2, 4, 8))
    batches = [_images(rows, seed=rows) for rows in (1, 2, 3, 4, 5, 6, 7, 8, 11, 16) * 3]
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(lambda x: bucketed({"x": x})["p"], batches))
    for x, got in zip(batches, results, strict=True):
        assert np.array_equal(got, plain({"x": x})["p"])
    # the server's batcher may run its batches on the Predictor's own thread: no hand-over, no deadlock
    assert bucketed.executor is not None
    got = bucketed.executor.submit(bucketed, {"x": batches[2]}).result(timeout=30)["p"]
    assert np.array_equal(got, plain({"x": batches[2]})["p"])
    bucketed.close()
    assert bucketed.executor is None and np.array_equal(bucketed({"x": batches[4]})["p"], plain({"x": batches[4]})["p"])


def test_buckets_need_fixed_example_sizes_and_batch_first_outputs() -> None:
    with pytest.raises(InputError) as caught:
        Predictor(_model(side="height"), "cpu", buckets=(1, 2))
    assert str(caught.value) == ("batch buckets cannot be used: input 'x' has shape ['batch', 'height', 8, 4]: each "
                                 "bucket needs fixed sizes besides the batch")
    with pytest.raises(InputError) as caught:
        Predictor(_model(extra_output="total"), "cpu", buckets=(1, 2))
    assert str(caught.value) == ("batch buckets cannot be used: output 'total' has shape [] for a batch of 2: not "
                                 "batch-first, so a padded batch cannot be sliced back")


def test_session_options_for_the_cuda_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ort, "get_available_providers", lambda: [CUDA, CPU])
    monkeypatch.setattr(predictor_module, "has_cuda_driver", lambda: True)
    assert session_providers("cuda") == [(CUDA, {"prefer_nhwc": "1"}), CPU]
    assert session_providers("auto", cuda_graphs=True) == [(CUDA, {"prefer_nhwc": "1", "enable_cuda_graph": "1"}), CPU]
    assert session_providers("cuda", cuda_graphs=False, nhwc=False) == [CUDA, CPU]  # today's Predictor
    assert session_providers("cpu", cuda_graphs=True) == [CPU]  # CPU options stay onnxruntime's defaults
    monkeypatch.setattr(predictor_module, "has_cuda_driver", lambda: False)
    assert session_providers("auto", cuda_graphs=True) == [CPU]


def test_what_the_predictor_hands_onnxruntime(monkeypatch: pytest.MonkeyPatch) -> None:
    """The providers argument, recorded on the way to onnxruntime's real session (which, without a driver,
    starts on the CPU, as on this machine): CUDA graphs then say why they are not used."""
    seen: list[object] = []
    real = ort.InferenceSession

    def recording(source: object, options: object, providers: list[object]) -> ort.InferenceSession:
        seen.append(providers)
        return real(source, options, providers=[CPU])

    monkeypatch.setattr(ort, "InferenceSession", recording)
    monkeypatch.setattr(ort, "get_available_providers", lambda: [CUDA, CPU])
    monkeypatch.setattr(predictor_module, "has_cuda_driver", lambda: True)
    predictor = Predictor(MODEL, "auto", cuda_graphs=True, max_batch_size=16)
    assert seen == [[(CUDA, {"prefer_nhwc": "1", "enable_cuda_graph": "1"}), CPU]]
    assert predictor.provider == CPU and predictor.fell_back and not predictor.graphs
    assert predictor.graph_note == "CUDA graphs need the CUDA provider; CPUExecutionProvider runs this model"
    assert predictor.buckets is None and predictor.executor is None and predictor.bucket_for(5) == 5
    x = _images(3)
    assert np.array_equal(predictor({"x": x})["p"], Predictor(MODEL, "cpu")({"x": x})["p"])


def test_captures_exclude_every_other_cuda_call() -> None:
    """CUDA_WORK's order: a capture waits for the runs in flight, runs that come later wait behind it."""
    lock, events = CaptureLock(), []
    first_run, capture_waiting = threading.Event(), threading.Event()

    def run(name: str, hold: threading.Event | None = None) -> None:
        with lock.shared():
            events.append(f"{name} start")
            if hold is not None:
                hold.set()
                capture_waiting.wait(10)
            events.append(f"{name} end")

    def capture() -> None:
        first_run.wait(10)
        threading.Timer(0.2, capture_waiting.set).start()  # let the later run queue up behind the capture
        with lock.exclusive():
            events.append("capture")

    threads = [threading.Thread(target=run, args=("run1", first_run)), threading.Thread(target=capture)]
    for thread in threads:
        thread.start()
    first_run.wait(10)
    while not lock._waiting:  # the capture is queued
        threading.Event().wait(0.01)
    later = threading.Thread(target=run, args=("run2",))
    later.start()
    for thread in (*threads, later):
        thread.join(10)
    assert events == ["run1 start", "run1 end", "capture", "run2 start", "run2 end"]
