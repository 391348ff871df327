"""A multi_worker worker whose peers do not come (rt11 dist F1-F3, F5): it says what it waits for, a stop signal
ends it at once with the stop line and 143 / 130, a batch that cannot split, a port in use and a different cluster
on another worker are refused before the wait, and a killed worker's temporary folder is removed by the next one.

The waits are in Python (placement/cluster.py's `rendezvous`); before, TensorFlow's start held the main thread in
C++ with its own SIGTERM handler, and only SIGKILL ended such a worker.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from port_helpers import reserved_ports

from specgen.diagnostics import SpecError
from specgen.runtime.placement.cluster import HELLO, read_role, rendezvous

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"
SPEC = f"""\
specgen: 1
name: mlp
inputs: {{image: {{shape: [8, 8, 1]}}}}
outputs: {{logits: out}}
layers:
  - {{name: flat, op: flatten}}
  - {{name: out, op: dense, units: 10}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers:
  all: {{variables: ["*"], kind: sgd, learning_rate: 0.05}}
train: {{batch_size: 32, metrics: [accuracy], seed: 1}}
checkpoint: {{dir: run, every_steps: 10}}
data:
  train: {{npz: {DIGITS}, features: {{image: x_train}}, labels: {{label: y_train}}}}
"""
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)}


def tf_config(addresses: list[str], index: int = 0) -> str:
    return json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}})


def lone_worker(tmp_path: Path, workers: int) -> tuple[subprocess.Popen[str], list[str], Path]:
    """Worker 0 of a `workers`-worker TF_CONFIG on loopback, started alone (the others never come)."""
    (tmp_path / "spec.yaml").write_text(SPEC)
    addresses = [f"127.0.0.1:{port}" for port in reserved_ports(workers)]
    process = subprocess.Popen([sys.executable, "-m", "specgen", "train", str(tmp_path / "spec.yaml"), "--quiet",
                                "--strategy", "multi_worker", "--steps", "5"], text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, cwd=tmp_path, env={**ENV, "TF_CONFIG": tf_config(addresses)})
    return process, addresses, tmp_path / "run"


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_worker_waiting_for_its_peers_says_so_and_stops_at_a_signal(tmp_path: Path, signum: int) -> None:
    process, addresses, run = lone_worker(tmp_path, 2)
    assert process.stdout is not None
    try:
        waiting = process.stdout.readline()  # blocks until the worker waits (imports and the build take seconds)
        time.sleep(1.0)  # well inside the wait
        sent = time.monotonic()
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=30)
        elapsed = time.monotonic() - sent
    finally:
        process.kill()
    assert waiting == (f"multi_worker: worker 0 is waiting for 1 of the 2 workers of TF_CONFIG's cluster "
                       f"({', '.join(addresses)}) to start: {addresses[1]}\n")
    assert process.returncode == 128 + signum
    how = "stopped by SIGTERM" if signum == signal.SIGTERM else "interrupted"
    assert stderr.splitlines()[-1] == (f"specgen train: {how} before training started; no checkpoint was saved yet: "
                                       f"start the run again with specgen train {tmp_path / 'spec.yaml'} "
                                       "(without --resume)")
    assert elapsed < 3.0  # was: never (only SIGKILL ended it)
    assert not run.exists()


@pytest.mark.slow
def test_a_batch_that_cannot_split_among_the_workers_is_refused_before_waiting(tmp_path: Path) -> None:
    process, _, run = lone_worker(tmp_path, 3)
    stdout, stderr = process.communicate(timeout=120)  # was: waited for the 2 other workers forever
    assert process.returncode == 1
    assert stdout == ""
    assert stderr.splitlines()[-2:] == [
        "spec.yaml:11:21: error: train.batch_size 32 is the global batch and must split evenly among "
        "the 3 replicas of the multi_worker strategy; use 30 or 33", "1 error found"]
    assert not run.exists()


@pytest.mark.slow
def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as other:  # what listens there is any other process's
        (tmp_path / "spec.yaml").write_text(SPEC)
        busy = f"127.0.0.1:{other.getsockname()[1]}"
        addresses = [busy, f"127.0.0.1:{reserved_ports(1)[0]}"]
        done = subprocess.run([sys.executable, "-m", "specgen", "train", "spec.yaml", "--quiet", "--strategy",
                               "multi_worker"], text=True, capture_output=True, cwd=tmp_path, timeout=120,
                              env={**ENV, "TF_CONFIG": tf_config(addresses)})
    assert done.returncode == 1
    assert done.stderr.splitlines()[-2:] == [
        f"TF_CONFIG: error: cluster.worker.0: received {busy}, whose port cannot be bound on this machine (Address "
        "already in use: another process listens there); expected a free port for worker 0: stop that process, or "
        "give this task another port in every worker's TF_CONFIG", "1 error found"]  # was: a traceback
    assert not (tmp_path / "run").exists()


def test_a_peer_with_another_cluster_is_refused_while_waiting() -> None:
    ports = reserved_ports(3)
    mine, theirs = [f"127.0.0.1:{p}" for p in ports[:2]], [f"127.0.0.1:{p}" for p in ports]
    peer = socket.create_server(("127.0.0.1", ports[1]))

    def answer() -> None:  # worker 1, waiting too, with a 3-worker cluster
        connection, _ = peer.accept()
        with connection:
            connection.sendall(HELLO + json.dumps(theirs).encode() + b"\n")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        with pytest.raises(SpecError) as raised:
            rendezvous(read_role({"TF_CONFIG": tf_config(mine)}))
    finally:
        thread.join(5)
        peer.close()
    assert str(raised.value.diagnostics[0]) == (
        f"TF_CONFIG: error: cluster: received 2 training tasks here ({', '.join(mine)}), while the task at {mine[1]} "
        f"lists 3 ({', '.join(theirs)}); expected the same cluster in every worker's TF_CONFIG: give every worker "
        "the same one")


def test_the_next_worker_removes_a_killed_workers_temporary_folder(tmp_path: Path) -> None:
    from specgen.runtime.placement.replicas import remove_stale_folders

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # reaped: its pid names no process now
    killed = tmp_path / f"specgen-worker-1-0123abcd-{dead.pid}-x1y2"
    alive = tmp_path / f"specgen-worker-1-0123abcd-{os.getpid()}-z3"
    other_run = tmp_path / f"specgen-worker-1-99999999-{dead.pid}-q"
    for folder in (killed, alive, other_run):
        (folder / "tensorboard").mkdir(parents=True)
    assert remove_stale_folders("0123abcd", tmp_path) == [killed]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([alive.name, other_run.name])


def test_a_waiting_worker_refuses_a_peer_that_connects_with_another_cluster() -> None:
    ports = reserved_ports(3)
    mine, theirs = [f"127.0.0.1:{p}" for p in ports[:2]], [f"127.0.0.1:{p}" for p in ports]
    raised: list[BaseException] = []

    def worker_0() -> None:
        try:
            rendezvous(read_role({"TF_CONFIG": tf_config(mine)}))
        except BaseException as exc:  # the test reads it
            raised.append(exc)

    thread = threading.Thread(target=worker_0, daemon=True)
    thread.start()
    for _ in range(50):  # worker 1 with a 3-worker cluster connects to worker 0's port once it listens
        try:
            with socket.create_connection(("127.0.0.1", ports[0]), timeout=1.0) as peer:
                peer.sendall(HELLO + json.dumps(theirs).encode() + b"\n")
                peer.recv(4096)
            break
        except OSError:
            time.sleep(0.1)
    thread.join(10)
    assert len(raised) == 1 and isinstance(raised[0], SpecError)
    assert str(raised[0].diagnostics[0]) == (
        f"TF_CONFIG: error: cluster: received 2 training tasks here ({', '.join(mine)}), while the task at "
        f"127.0.0.1 (connecting to this one) lists 3 ({', '.join(theirs)}); expected the same cluster in every "
        "worker's TF_CONFIG: give every worker the same one")
