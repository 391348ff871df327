"""Ports for servers the tests start in child processes, without the race of a port picked here and bound later.

A port picked by bind(0) here and closed for a child to bind seconds later (after its imports) can be taken by any
socket in between: the other xdist worker binds port 0 all the time, and connect() takes ephemeral ports too. Then
the child cannot start, or the test's readiness poll reaches another test's server on that port. So:

- a server that can listen on port 0 does, and the test reads the port it bound from what the server says:
  `bound_port` (HTTP, uvicorn's "running on" line) and `grpc_bound_port` (the `grpc_started` line);
- a process that needs its port chosen in advance (TensorFlow's workers in TF_CONFIG, `mlflow server`) gets
  `reserved_ports`: ports outside the kernel's ephemeral range, which no bind(0) or connect() is ever handed,
  in a block of their own for each xdist worker, so no other test of the run can take them either.

Light on purpose (no onnx, no TensorFlow): the quick tier's smoke test imports it.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path

BLOCK = 200  # ports per xdist worker
BLOCKS = 16  # workers with a block of their own (gw16 shares gw0's: more workers than a CI runner has)
_next = itertools.count()  # successive calls in one worker take successive ports of its block


def ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (bind(0) and connect() take ports from it)."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    return low, high


def worker_block() -> range:
    """This xdist worker's ports: BLOCK of them, below the ephemeral range (above it where there is no room below)."""
    found = re.fullmatch(r"gw(\d+)", os.environ.get("PYTEST_XDIST_WORKER", ""))
    index = int(found.group(1)) % BLOCKS if found else 0  # not under xdist: alone, so gw0's block
    low, high = ephemeral_range()
    if low - BLOCK * BLOCKS >= 1024:
        base = low - BLOCK * BLOCKS
    elif high + 1 + BLOCK * BLOCKS <= 65536:
        base = high + 1
    else:
        raise RuntimeError(f"no room outside the ephemeral port range {low}-{high} for the tests' reserved ports")
    return range(base + index * BLOCK, base + (index + 1) * BLOCK)


def _free(port: int) -> bool:
    # No SO_REUSEADDR: a port with connections left in TIME_WAIT by an earlier test's server is passed over too.
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def reserved_ports(count: int) -> list[int]:
    """`count` ports of this worker's block for a child to bind later. Only this worker hands them out, each once
    until the block wraps, and no ephemeral socket can be given one. A port found busy all the same (a process
    outside this test run holds it) is passed over for the next of the block: harness robustness, not a retry of
    the product (the test still fails if the child cannot bind the port it is given)."""
    block = worker_block()
    ports: list[int] = []
    for _ in range(len(block)):
        port = block[next(_next) % len(block)]
        if _free(port):
            ports.append(port)
            if len(ports) == count:
                return ports
    raise RuntimeError(f"fewer than {count} free ports in {block}")


def bound_port(process: subprocess.Popen[bytes], log: Path, deadline: float) -> int:
    """The port a server started with port 0 bound, from uvicorn's "running on" line in its JSON log (an info line:
    the server must log at info)."""
    while True:
        assert process.poll() is None, log.read_text()
        found = re.search(r'"message": "Uvicorn running on http://127\.0\.0\.1:(\d+) ', log.read_text())
        if found:
            return int(found.group(1))
        assert time.monotonic() < deadline, "the server did not say where it listens"
        time.sleep(0.05)


def grpc_bound_port(process: subprocess.Popen[bytes], log: Path, deadline: float) -> int:
    """The port a server started with `--grpc-port 0` bound, from its `grpc_started` log line (`address`, host:port;
    an info line: the server must log at info)."""
    while True:
        assert process.poll() is None, log.read_text()
        for line in log.read_text().splitlines():
            if '"grpc_started"' in line and line.endswith("}"):  # a line still being written is read again
                return int(json.loads(line)["address"].rsplit(":", 1)[1])
        assert time.monotonic() < deadline, "the server did not say where it serves gRPC"
        time.sleep(0.05)
