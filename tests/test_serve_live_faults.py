"""`specgen serve` with a live repository and hostile gRPC peers: files still being written are never served,
the change stamp sees a same-size same-mtime replacement, a load thrown away for a change while read and a folder
gone before it settled leave no trace, refusals of removed versions leave the index, gRPC clients that grant no
flow-control window or sit idle do not lock others out (and an idle client is not cut off at the handshake
timeout), `--poll-seconds` is checked, and a killed `--workers` parent's metrics folder is removed. Real servers
(serve_helpers.Served), real onnxruntime.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("uvicorn")
tg = pytest.importorskip("tritonclient.grpc")
th = pytest.importorskip("tritonclient.http")

from serve_helpers import Served, events, model_bytes  # noqa: E402
from tritonclient.grpc import service_pb2  # noqa: E402

from specgen.cli import main  # noqa: E402
from specgen.runtime.predictor import Predictor  # noqa: E402
from specgen.runtime.triton import write_repository  # noqa: E402
from specgen.serve.app import ServeOptions  # noqa: E402
from specgen.serve.control import ModelControl, ModelSource, snapshot  # noqa: E402
from specgen.serve.limits import ByteBudget  # noqa: E402
from specgen.serve.metrics import ServerMetrics  # noqa: E402
from specgen.serve.models import load_repository  # noqa: E402
from specgen.serve.registry import Registry  # noqa: E402

CNN = "digits_cnn"
X = np.random.default_rng(5).standard_normal((1, 8, 8, 1)).astype(np.float32)


@pytest.fixture(scope="module")
def versions() -> dict[int, tuple[Any, bytes]]:
    return {v: model_bytes(CNN, seed=v) for v in (1, 2)}


def logits(data: bytes) -> np.ndarray:
    return Predictor(data, provider="cpu")({"image": X})["logits"]


def infer(client: Any, version: str = "") -> tuple[str, np.ndarray]:
    tensor = th.InferInput("image", [1, 8, 8, 1], "FP32")
    tensor.set_data_from_numpy(X)
    result = client.infer(CNN, [tensor], model_version=version)
    return result.get_response()["model_version"], result.as_numpy("logits")


def wait_until(condition: Any, what: str, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


# files still being written

# The settle time of a polled change (stamps.SETTLE_SECONDS, 1 s), raised for the writers below, which pause 0.25 and
# 0.5 s between writes: a writer that pauses past it is read half-way by design, and a loaded machine can stall this
# test's writer (a slow infer or write) that long. 2.5 s keeps it 5-10x the pauses.
SETTLE = 2.5


def test_a_model_rewritten_in_place_is_served_only_once_written(tmp_path: Path, versions: dict[int, tuple[Any, bytes]],
                                                                caplog: pytest.LogCaptureFixture,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("specgen.serve.control.SETTLE_SECONDS", SETTLE)  # read by ModelControl when the server is made
    folder = write_repository(tmp_path, *versions[1])
    old, new = versions[1][1], versions[2][1]
    assert len(old) == len(new)  # a retrain of one spec: same size, so an in-place writer never truncates
    expected = {"old": logits(old), "new": logits(new)}
    answers: list[np.ndarray] = []
    options = ServeOptions(model_control="poll", poll_seconds=0.1)
    with caplog.at_level(logging.INFO), Served(load_repository(tmp_path, provider="cpu"), options, tmp_path) as served:
        client = th.InferenceServerClient(served.http)
        with open(folder / "1" / "model.onnx", "r+b") as target:  # dd conv=notrunc: 8 KiB, then a pause
            for start in range(0, len(new), 8192):
                target.write(new[start:start + 8192])
                target.flush()  # in the page cache: the stamps are stat()'s, and an fsync can stall on a busy disk
                deadline = time.monotonic() + 0.25  # more than two polls between writes
                while time.monotonic() < deadline:
                    answers.append(infer(client)[1])
        wait_until(lambda: events(caplog.records, "model_loaded"), "the rewritten model was never loaded")
        final = infer(client)[1]
        client.close()
    mixed = [a for a in answers if not any(np.array_equal(a, e) for e in expected.values())]
    assert len(answers) > 20 and mixed == []
    np.testing.assert_array_equal(final, expected["new"])
    assert [e["version"] for e in events(caplog.records, "model_loaded")] == [1]  # once: the whole file


def test_a_config_written_in_two_parts_is_read_only_whole(tmp_path: Path, versions: dict[int, tuple[Any, bytes]],
                                                          caplog: pytest.LogCaptureFixture,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("specgen.serve.control.SETTLE_SECONDS", SETTLE)
    for v in (1, 2):
        folder = write_repository(tmp_path, *versions[v], version=v)
    config = folder / "config.pbtxt"
    whole = config.read_text() + "version_policy { all { } }\n"
    config.write_text(whole)
    options = ServeOptions(model_control="poll", poll_seconds=0.1)
    with caplog.at_level(logging.INFO), Served(load_repository(tmp_path, provider="cpu"), options, tmp_path) as served:
        client = th.InferenceServerClient(served.http)
        with open(config, "r+") as out:  # truncate, the part before version_policy (a valid config: latest 1) ...
            out.truncate(0)
            out.write(whole[:whole.index("version_policy")])
            out.flush()
            deadline = time.monotonic() + 0.5
            served_v1 = []
            while time.monotonic() < deadline:
                served_v1.append(infer(client, "1")[0])
            out.write(whole[whole.index("version_policy"):])  # ... then the rest
        # the whole file held still and was read (the same config: nothing to log), not a fixed time that a loaded
        # machine may not give the poll
        wait_until(lambda: served.service.control.seen.get(CNN) == snapshot(folder), "the whole config was never read")
        served_v1.append(infer(client, "1")[0])
        client.close()
    assert set(served_v1) == {"1"} and len(served_v1) > 5  # version 1 was never unloaded
    assert events(caplog.records, "model_unloaded") == []


# the change stamp


def test_a_same_size_same_mtime_replacement_is_reloaded_by_an_explicit_load(
        tmp_path: Path, versions: dict[int, tuple[Any, bytes]], caplog: pytest.LogCaptureFixture) -> None:
    folder = write_repository(tmp_path, *versions[1])
    path = folder / "1" / "model.onnx"
    options = ServeOptions(model_control="explicit")
    with caplog.at_level(logging.INFO), Served(load_repository(tmp_path, provider="cpu"), options, tmp_path) as served:
        client = th.InferenceServerClient(served.http)
        client.load_model(CNN)  # nothing changed: nothing reloaded
        assert events(caplog.records, "model_loaded") == []
        before = path.stat()
        with open(path, "r+b") as out:  # cp -p: the same inode, the new bytes, the old mtime
            out.write(versions[2][1])
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        after = path.stat()
        assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
        client.load_model(CNN)
        answer = infer(client)[1]
        client.close()
    np.testing.assert_array_equal(answer, logits(versions[2][1]))
    assert [(e["version"], e["replaced"]) for e in events(caplog.records, "model_loaded")] == [(1, True)]


# loads thrown away


def control_of(repo: Path) -> ModelControl:
    """A polling ModelControl with nothing served, a 1-byte body budget (each Version raises it to its own bound),
    and no poll of its own: the test scans and loads."""
    registry = Registry(ServerMetrics(), None, True, 64 << 20, ByteBudget(1))
    return ModelControl(registry, ModelSource(repo, "cpu"), "poll", poll_seconds=3600)


def test_a_load_thrown_away_for_a_change_while_read_leaves_no_trace(
        tmp_path: Path, versions: dict[int, tuple[Any, bytes]], caplog: pytest.LogCaptureFixture) -> None:
    folder = write_repository(tmp_path, *versions[1])
    config = folder / "config.pbtxt"
    (folder / "7").mkdir()
    (folder / "7" / "model.onnx").write_bytes(b"not a model")
    control = control_of(tmp_path)
    budget = control.registry.budget

    async def run() -> None:
        control.start()
        try:
            assert (await control._load(CNN, folder, False, snapshot(folder)))[-1] == (
                "model 'digits_cnn' serves version(s) [1]")  # 7 refused, 1 served
            served, total = control.registry.models[CNN][1], budget.total
            assert list(control.refused) == [(CNN, 7)] and total > 1
            settled = snapshot(folder)  # what the poll saw hold still; then a writer: a larger batch, 7 removed
            config.write_text(config.read_text().replace("max_batch_size: 64", "max_batch_size: 128"))
            shutil.rmtree(folder / "7")
            caplog.clear()
            assert await control._load(CNN, folder, False, settled) is None
            await asyncio.sleep(0.3)  # a version closed in the background would log its unload by now
            assert control.registry.models == {CNN: {1: served}} and budget.total == total
            assert list(control.refused) == [(CNN, 7)]
            assert [r.fields for r in caplog.records] == [{
                "event": "model_load_discarded", "model": CNN,
                "retry": "at the next poll once the files hold still"}]
            assert await control._load(CNN, folder, False, snapshot(folder)) == []  # the retry: kept
            assert control.registry.models[CNN][1] is not served and budget.total > total and control.refused == {}
            assert [(e["version"], e["replaced"]) for e in events(caplog.records, "model_loaded")] == [(1, True)]
        finally:
            await control.stop()

    with caplog.at_level(logging.INFO, logger="specgen.serve"):
        asyncio.run(run())


def test_a_new_folder_gone_before_it_settled_is_not_pending(
        tmp_path: Path, versions: dict[int, tuple[Any, bytes]]) -> None:
    write_repository(tmp_path, *versions[1])
    control = control_of(tmp_path)

    async def run() -> tuple[list[str], list[str]]:
        control.start()
        try:
            await control.scan()  # new: stamped, loaded once it holds still
            first = list(control.pending)
            shutil.rmtree(tmp_path / CNN)
            await control.scan()
            return first, list(control.pending)
        finally:
            await control.stop()

    assert asyncio.run(run()) == ([CNN], [])
    assert control.seen == {} and control.registry.models == {}


# the index


def test_the_index_drops_a_refused_version_whose_folder_is_gone(
        tmp_path: Path, versions: dict[int, tuple[Any, bytes]]) -> None:
    folder = write_repository(tmp_path, *versions[1])
    options = ServeOptions(model_control="explicit")
    with Served(load_repository(tmp_path, provider="cpu"), options, tmp_path) as served:
        client = th.InferenceServerClient(served.http)
        (folder / "3").mkdir()
        (folder / "3" / "model.onnx").write_bytes(b"not a model")
        with pytest.raises(th.InferenceServerException, match=r"not an ONNX model \(it is a text file\)"):
            client.load_model(CNN)
        assert [(e["version"], e["state"]) for e in client.get_model_repository_index()] == [
            ("1", "READY"), ("3", "UNAVAILABLE")]
        shutil.rmtree(folder / "3")
        client.load_model(CNN)
        index = client.get_model_repository_index()
        client.close()
    assert index == [{"name": CNN, "version": "1", "state": "READY", "reason": ""}]


# gRPC peers that hold calls or connections


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def _literal(name: str, value: str) -> bytes:
    return b"\x00" + bytes([len(name)]) + name.encode() + bytes([len(value)]) + value.encode()


class Peer:
    """A raw HTTP/2 client: ACKs the server's SETTINGS and PINGs, opens no flow-control window (its initial window is
    `window`), and sends `calls` ModelInfer calls at once; `closed` is set when the server closes the connection."""

    def __init__(self, address: str, calls: int = 0, window: int = 65535):
        host, port = address.split(":")
        self.sock = socket.create_connection((host, int(port)), 5)
        self.closed = threading.Event()
        request = service_pb2.ModelInferRequest(model_name=CNN)
        request.inputs.add(name="image", datatype="FP32", shape=[1, 8, 8, 1])
        request.raw_input_contents.append(X.tobytes())
        message = request.SerializeToString()
        data = b"\x00" + struct.pack(">I", len(message)) + message
        headers = b"".join(_literal(*kv) for kv in (
            (":method", "POST"), (":scheme", "http"), (":path", "/inference.GRPCInferenceService/ModelInfer"),
            (":authority", "x"), ("content-type", "application/grpc"), ("te", "trailers")))
        out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, struct.pack(">HI", 4, window))
        out += b"".join(frame(1, 4, 2 * i + 1, headers) + frame(0, 1, 2 * i + 1, data) for i in range(calls))
        self.sock.sendall(out)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                self.closed.set()
                return
            buffer += chunk
            while len(buffer) >= 9 and len(buffer) >= 9 + int.from_bytes(buffer[:3], "big"):
                size, kind, flags = int.from_bytes(buffer[:3], "big"), buffer[3], buffer[4]
                payload, buffer = buffer[9:9 + size], buffer[9 + size:]
                try:
                    if kind == 4 and not flags & 1:
                        self.sock.sendall(frame(4, 1, 0, b""))
                    if kind == 6 and not flags & 1:
                        self.sock.sendall(frame(6, 1, 0, payload))
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


def grpc_probe(address: str) -> str:
    client = tg.InferenceServerClient(address)
    tensor = tg.InferInput("image", [1, 8, 8, 1], "FP32")
    tensor.set_data_from_numpy(X)
    try:
        client.infer(CNN, [tensor], client_timeout=3)
        return "ok"
    except tg.InferenceServerException as exc:
        return str(exc.status())
    finally:
        client.close()


@pytest.fixture
def small_grpc(tmp_path: Path, versions: dict[int, tuple[Any, bytes]]) -> Iterator[Served]:
    """8 gRPC calls at once, answers sent within 1 s, 12 connections, idle ones closed after 1 s."""
    write_repository(tmp_path, *versions[1])
    options = ServeOptions(grpc_port=0, grpc_max_rpcs=8, send_timeout=1.0, max_connections=12, header_timeout=1.0,
                           grpc_idle_timeout=1.0)
    with Served(load_repository(tmp_path, provider="cpu"), options) as served:
        yield served


def test_a_grpc_peer_that_opens_no_window_does_not_hold_every_call(small_grpc: Served) -> None:
    peer = Peer(small_grpc.grpc, calls=100, window=0)  # its answers cannot be sent: 8 calls held
    # Probe once the 8 calls have answered (their answers wait for a window), not after a fixed 0.3 s: their slots
    # stay held until gRPC closes the connection as idle, measured 2.0-2.2 s after it opened (grpc_idle_timeout 1 s).
    stats = small_grpc.service.statistics(CNN, None)[0]
    wait_until(lambda: stats.success.count >= 8, "the peer's 8 calls were not answered", seconds=10)
    assert grpc_probe(small_grpc.grpc) == "StatusCode.RESOURCE_EXHAUSTED"
    # past send_timeout the calls whose answers could not be sent are cancelled; the connection, left without a call,
    # is closed after grpc_idle_timeout, and its calls' slots freed
    wait_until(peer.closed.is_set, "the connection holding unsent answers was never closed", seconds=10)
    wait_until(lambda: grpc_probe(small_grpc.grpc) == "ok", "other clients still refused", seconds=10)
    peer.close()


def test_idle_grpc_connections_are_closed_and_new_clients_served(small_grpc: Served) -> None:
    peers = [Peer(small_grpc.grpc) for _ in range(12)]  # handshake done, pings answered, no call: --max-connections
    wait_until(lambda: all(p.closed.is_set() for p in peers), "idle gRPC connections were never closed", seconds=5)
    assert grpc_probe(small_grpc.grpc) == "ok"
    for peer in peers:
        peer.close()


def test_an_idle_grpc_client_is_not_closed_at_the_handshake_timeout(
        tmp_path: Path, versions: dict[int, tuple[Any, bytes]]) -> None:
    write_repository(tmp_path, *versions[1])
    options = ServeOptions(grpc_port=0, header_timeout=0.3)  # grpc_idle_timeout: 300 s
    with Served(load_repository(tmp_path, provider="cpu"), options) as served:
        peer = Peer(served.grpc)  # finishes its handshake, then sends no call
        time.sleep(1.5)
        assert not peer.closed.is_set()  # a call it sent now would not race a GOAWAY
        peer.close()


# flags and folders


@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "0", "-1"])
def test_poll_seconds_must_be_positive_and_finite(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["serve", "repo", "--model-control", "poll", "--poll-seconds", value])
    assert caught.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"specgen serve: error: argument --poll-seconds: '{value}' is not a positive finite number of seconds")


def test_stale_metrics_folders_of_dead_parents_are_removed(tmp_path: Path) -> None:
    from specgen.serve.metrics import remove_stale_metrics

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()
    for name in (f"specgen-metrics-{dead}-abc", f"specgen-metrics-{os.getpid()}-def", "specgen-metrics-xyz", "other"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "counter_1.db").write_bytes(b"x")
    assert remove_stale_metrics(tmp_path) == [tmp_path / f"specgen-metrics-{dead}-abc"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "other", f"specgen-metrics-{os.getpid()}-def", "specgen-metrics-xyz"]
