"""`specgen serve`'s live repository against the checker's round 12 (rt12/serve), with real clients (tritonclient over
HTTP and gRPC) and, for the workers, a real `specgen serve --workers 2` process:

- F1: a refusal recorded under an older config.pbtxt stayed in the repository index after the config was put back
  (the row blamed `dims: [ 64 ]` that no file held): a refusal now leaves once its config or files are gone.
- F2: a worker the parent restarted applied the start-up rule (every folder loads, else exit 1) to a repository the
  live workers had refused part of at their poll, and died at every restart: it now loads what loads, refuses the
  rest as they did, and fails (one JSON `start_failed` line, tried again) only where it cannot serve what they serve.
- F3: under poll, removing a model's only version folder left that version served from memory (READY): it is now
  unloaded, as Triton's poll does, once its in-flight requests are answered.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("uvicorn")
tg = pytest.importorskip("tritonclient.grpc")
th = pytest.importorskip("tritonclient.http")

from serve_helpers import Gate, Served, events, gated, model_bytes  # noqa: E402

from specgen.paths import shown  # noqa: E402
from specgen.runtime.triton import write_repository  # noqa: E402
from specgen.serve.app import ServeOptions  # noqa: E402
from specgen.serve.models import load_repository  # noqa: E402

MLP = "digits_mlp"
X = np.full((1, 8, 8, 1), 0.5, np.float32)
POLL = ServeOptions(grpc_port=0, model_control="poll", poll_seconds=0.1)


def wait_until(condition: Callable[[], Any], what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def http_index(address: str) -> list[dict[str, str]]:
    return list(th.InferenceServerClient(address).get_model_repository_index())


def grpc_index(address: str) -> list[dict[str, str]]:
    """The gRPC RepositoryIndex as the HTTP rows (an empty version and reason are left out of the message)."""
    models = tg.InferenceServerClient(address).get_model_repository_index(as_json=True).get("models", [])
    return [{"name": m["name"], "version": m.get("version", ""), "state": m["state"], "reason": m.get("reason", "")}
            for m in models]


def http_infer(address: str, version: str = "") -> str:
    """The version that answered, or 'STATUS: message' (a fresh connection each call)."""
    tensor = th.InferInput("image", list(X.shape), "FP32")
    tensor.set_data_from_numpy(X)
    try:
        return str(th.InferenceServerClient(address).infer(MLP, [tensor], model_version=version)
                   .get_response()["model_version"])
    except th.InferenceServerException as exc:
        return f"{exc.status()}: {exc.message()}"


def grpc_infer(address: str, version: str = "") -> str:
    tensor = tg.InferInput("image", list(X.shape), "FP32")
    tensor.set_data_from_numpy(X)
    try:
        return str(tg.InferenceServerClient(address).infer(MLP, [tensor], model_version=version)
                   .get_response().model_version)
    except tg.InferenceServerException as exc:
        return f"{exc.status()}: {exc.message()}"


# F1: a refusal under a config that is gone


def test_a_refusal_under_a_config_put_back_leaves_the_index(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Versions 1 and 2 served under `all`, both refused under `dims: [ 64 ]` (and kept serving), then the original
    config back (latest 1): version 1 was let go by the policy, and its row is `unloaded`, as its model_unloaded
    line says, not the refusal of a `dims: [ 64 ]` no file holds any more."""
    for version in (1, 2):
        folder = write_repository(tmp_path, *model_bytes(MLP, seed=version), version=version)
    config = folder / "config.pbtxt"
    original = config.read_text()
    with caplog.at_level(logging.INFO), Served(load_repository(tmp_path, provider="cpu"), POLL, tmp_path) as served:
        config.write_text(original + "version_policy { all { } }\n")
        wait_until(lambda: [r["state"] for r in http_index(served.http)] == ["READY", "READY"], "all never served")
        config.write_text(original.replace("dims: [ 8, 8, 1 ]", "dims: [ 64 ]") + "version_policy { all { } }\n")
        wait_until(lambda: len(events(caplog.records, "model_refused")) == 2, "dims [ 64 ] never refused")
        config.write_text(original)
        wait_until(lambda: http_index(served.http)[0]["state"] == "UNAVAILABLE", "latest 1 never loaded")
        expected = [{"name": MLP, "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"},
                    {"name": MLP, "version": "2", "state": "READY", "reason": ""}]
        assert http_index(served.http) == expected
        assert grpc_index(served.grpc) == expected
        assert (http_infer(served.http), grpc_infer(served.grpc)) == ("2", "2")
        unloaded = lambda: [e for e in events(caplog.records, "model_unloaded") if e["version"] == 1]  # noqa: E731
        wait_until(unloaded, "version 1 never unloaded")
    assert unloaded() == [{"event": "model_unloaded", "model": MLP, "version": 1,
                           "reason": "not chosen by version_policy"}]


def test_a_refusal_of_a_file_replaced_since_leaves_the_index(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Same class: version 2 refused (not ONNX) under `latest 1`, then version 3 added and version 2's file
    repaired: 3 serves, and version 2, which the policy no longer tries, does not keep the refusal of a file
    that is gone."""
    folder = write_repository(tmp_path, *model_bytes(MLP, seed=1), version=1)
    with caplog.at_level(logging.INFO), Served(load_repository(tmp_path, provider="cpu"), POLL, tmp_path) as served:
        (folder / "2").mkdir()
        (folder / "2" / "model.onnx").write_bytes(b"not onnx")
        wait_until(lambda: events(caplog.records, "model_refused"), "version 2 never refused")
        assert [r["version"] for r in http_index(served.http)] == ["1", "2"]
        write_repository(tmp_path, *model_bytes(MLP, seed=3), version=3)
        shutil.copy(folder / "1" / "model.onnx", folder / "2" / "model.onnx")
        wait_until(lambda: http_infer(served.http) == "3", "version 3 never served")
        expected = [{"name": MLP, "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"},
                    {"name": MLP, "version": "3", "state": "READY", "reason": ""}]
        assert http_index(served.http) == expected
        assert grpc_index(served.grpc) == expected


# F3: the last version folder removed


def test_removing_the_only_version_folder_unloads_it(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Triton's poll unloads a version whose folder is removed; with none left the model is not served. A request
    in flight on it (held inside the model) is answered by it first."""
    folder = write_repository(tmp_path, *model_bytes(MLP, seed=1), version=1)
    gate = Gate()
    models = [gated(m, gate) for m in load_repository(tmp_path, provider="cpu")]
    answers: queue.Queue[str] = queue.Queue()
    with caplog.at_level(logging.INFO), Served(models, POLL, tmp_path) as served:
        threading.Thread(target=lambda: answers.put(http_infer(served.http, "1")), daemon=True).start()
        assert gate.entered.wait(30)
        shutil.rmtree(folder / "1")
        wait_until(lambda: http_index(served.http)[0]["version"] == "", "version 1 never unloaded")
        why = (f"{shown(folder)}: no version folder holds model.onnx, or version_policy latest {{ num_versions: 1 }} "
               "selects none of []")
        expected = [{"name": MLP, "version": "", "state": "UNAVAILABLE", "reason": why}]
        assert http_index(served.http) == expected
        assert grpc_index(served.grpc) == expected
        unknown = f"unknown model '{MLP}'; this server serves []"
        assert http_infer(served.http) == f"404: {unknown}"
        assert grpc_infer(served.grpc) == f"StatusCode.NOT_FOUND: {unknown}"
        assert th.InferenceServerClient(served.http).is_model_ready(MLP, "1") is False
        assert tg.InferenceServerClient(served.grpc).is_model_ready(MLP, "1") is False
        assert events(caplog.records, "model_unloaded") == []  # its request is still in the model
        gate.set()
        assert answers.get(timeout=30) == "1"
        wait_until(lambda: events(caplog.records, "model_unloaded"), "no model_unloaded line")
    assert events(caplog.records, "model_unloaded") == [{"event": "model_unloaded", "model": MLP, "version": 1,
                                                         "reason": "removed from the repository"}]
    assert events(caplog.records, "model_refused") == [{"event": "model_refused", "model": MLP, "version": None,
                                                        "error": why}]


def test_removing_one_of_two_versions_keeps_the_other_when_nothing_loads(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    """Same class: versions 1 and 2 served under `all`; version 2's folder removed in the same change as a config
    that fits no version. Nothing new loads, so version 1 keeps serving, but version 2 is gone and unloaded."""
    for version in (1, 2):
        folder = write_repository(tmp_path, *model_bytes(MLP, seed=version), version=version)
    config = folder / "config.pbtxt"
    config.write_text(config.read_text() + "version_policy { all { } }\n")
    with caplog.at_level(logging.INFO), Served(load_repository(tmp_path, provider="cpu"), POLL, tmp_path) as served:
        config.write_text(config.read_text().replace("dims: [ 8, 8, 1 ]", "dims: [ 64 ]"))
        shutil.rmtree(folder / "2")
        wait_until(lambda: len(http_index(served.http)) == 1, "version 2 never unloaded")
        assert http_index(served.http) == [{"name": MLP, "version": "1", "state": "READY", "reason": ""}]
        assert (http_infer(served.http), http_infer(served.http, "2")) == (
            "1", f"404: model '{MLP}' has no version '2'; the served version is '1'")
        wait_until(lambda: events(caplog.records, "model_unloaded"), "no model_unloaded line")
    assert events(caplog.records, "model_unloaded") == [{"event": "model_unloaded", "model": MLP, "version": 2,
                                                         "reason": "removed from the repository"}]


# F2: a worker restarted while the repository holds what the live workers refused


class Log:
    """The JSON lines of a process's stderr, read by a thread; `wait(event, **fields)` returns the next such line."""

    def __init__(self, stream: Any):
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: Any) -> None:
        for raw in stream:
            try:
                self.lines.put(json.loads(raw))
            except ValueError:  # every line must be JSON: wait() fails on this one
                self.lines.put({"not_json": raw})
        self.lines.put({"eof": True})

    def wait(self, event: str, seconds: float = 60, **fields: Any) -> dict[str, Any]:
        deadline = time.monotonic() + seconds
        while True:
            line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            assert "eof" not in line, f"the process exited before a {event!r} line; its lines: {self.seen}"
            assert "not_json" not in line, f"a line that is not JSON: {line['not_json']!r}"
            self.seen.append(line)
            if line.get("event") == event and all(line.get(k) == v for k, v in fields.items()):
                return line


def fields(line: dict[str, Any]) -> dict[str, Any]:
    """A log line without its time."""
    return {k: v for k, v in line.items() if k != "time"}


def workers(repo: Path) -> tuple[subprocess.Popen[str], Log, dict[str, Any]]:
    command = [sys.executable, "-m", "specgen", "serve", str(repo), "--provider", "cpu", "--port", "0", "--grpc-port",
               "0", "--threads", "1", "--workers", "2", "--model-control", "poll", "--poll-seconds", "0.5"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    log = Log(process.stderr)
    return process, log, log.wait("workers")


def kill_worker(log: Log, pid: int) -> int:
    """SIGKILL worker 0 (`pid`); the pid of the worker that replaced it, once the parent says so."""
    os.kill(pid, signal.SIGKILL)
    exited = fields(log.wait("worker_exited", pid=pid))
    # restarted at once, or after 1 s when it died within 10 s of its start (a slow machine takes that long)
    assert exited == {"level": "warning", "logger": "specgen.serve", "message": "worker exited; restarting it",
                      "event": "worker_exited", "worker": 0, "pid": pid, "status": "SIGKILL",
                      "restart_in_s": exited["restart_in_s"]}
    assert exited["restart_in_s"] in (0.0, 1.0)
    return int(log.wait("worker_restarted", worker=0)["pid"])


def test_a_restarted_worker_serves_beside_what_the_live_workers_refused(tmp_path: Path) -> None:
    """A version folder that does not load and a model folder whose config.pbtxt does not read are refused by both
    workers at their poll; worker 0 is killed. Its replacement refused every restart (`wk2/broken/config.pbtxt:...`,
    exit 1, backing off to 30 s, plain-text lines): it now serves version 1 as worker 1 does, with its own
    model_refused lines for what the others refused."""
    folder = write_repository(tmp_path, *model_bytes(MLP, seed=1), version=1)
    (folder / "2").mkdir()
    process, log, started = workers(tmp_path)
    try:
        (folder / "2" / "model.onnx").write_bytes(b"not onnx")
        (tmp_path / "broken").mkdir()
        (tmp_path / "broken" / "config.pbtxt").write_text('name: "broken" }\n')
        refused = {(log.wait("model_refused", 30)["worker"], log.seen[-1]["model"]) for _ in range(4)}
        assert refused == {(0, MLP), (1, MLP), (0, "broken"), (1, "broken")}
        new = kill_worker(log, started["pids"][0])
        again = [fields(log.wait("model_refused", 60, worker=0)) for _ in range(2)]
        assert fields(log.wait("worker_ready", 60)) == {"level": "info", "logger": "specgen.serve",
                                                        "message": "worker ready", "event": "worker_ready",
                                                        "worker": 0, "pid": new}
        assert sorted(line["model"] for line in again) == ["broken", MLP]
        # every new connection, to either worker, is answered by version 1
        assert [http_infer(started["http"]) for _ in range(20)] == ["1"] * 20
        assert [grpc_infer(started["grpc"]) for _ in range(20)] == ["1"] * 20
        assert stop(process) == 0
    finally:
        process.kill()
        process.wait()


def test_a_restart_that_cannot_serve_what_the_others_serve_says_so_and_tries_again(tmp_path: Path) -> None:
    """The live workers serve version 1 under a config.pbtxt that no longer reads (they refused the edit and kept
    the config they had); no file holds that config, so a restarted worker cannot serve the model. It does not come
    up answering 404 for a model that is served: one JSON `start_failed` line, exit 1, tried again; once the config
    is mended it serves. Meanwhile the live worker serves every request and says it is ready."""
    folder = write_repository(tmp_path, *model_bytes(MLP, seed=1), version=1)
    config = folder / "config.pbtxt"
    original = config.read_text()
    process, log, started = workers(tmp_path)
    try:
        config.write_text(original.replace("max_batch_size: 64", "max_batch_size: 64 }"))
        for _ in range(2):
            log.wait("model_refused", 30)
        old = started["pids"][0]
        new = kill_worker(log, old)
        backoff = 2 if log.seen[-2]["restart_in_s"] else 1  # the backoff doubles from the kill's
        failed = fields(log.wait("start_failed", 60, worker=0))
        why = f"{shown(config)}:4:20: not a Triton model configuration: Expected identifier or number, got }}."
        assert failed == {"level": "error", "logger": "specgen.serve", "message": "worker could not start",
                          "worker": 0, "event": "start_failed",
                          "error": f"the other workers serve '{MLP}', which does not load from the repository as "
                                   f"it is now ({MLP}: {why}); this worker starts once the repository serves it "
                                   "again (or the other workers let it go)"}
        assert fields(log.wait("worker_exited", 30, pid=new)) == {
            "level": "warning", "logger": "specgen.serve", "message": "worker exited; restarting it",
            "event": "worker_exited", "worker": 0, "pid": new, "status": "1", "restart_in_s": 1.0 * backoff}
        assert [http_infer(started["http"]) for _ in range(10)] == ["1"] * 10
        assert th.InferenceServerClient(started["http"]).is_server_ready() is True
        config.write_text(original)
        assert log.wait("worker_ready", 60)["worker"] == 0
        assert [grpc_infer(started["grpc"]) for _ in range(10)] == ["1"] * 10
        assert stop(process) == 0
    finally:
        process.kill()
        process.wait()


def stop(process: subprocess.Popen[str], seconds: float = 30) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(seconds)
