"""Ports for the servers and workers the benchmarks start as child processes, chosen in advance.

A port picked by bind(0) and closed for a child to bind after its imports (seconds) can be taken meanwhile by any
socket the machine opens (bind(0) and connect() both take ephemeral ports). These are outside the kernel's
ephemeral range, which no such socket is handed; one found busy (a process that chose it too) is passed over.
tests/port_helpers.py does the same for the test suite, with a block of ports per xdist worker.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

SPAN = 2000  # ports a benchmark may take
BELOW = 4000  # they end this far below the ephemeral range: clear of tests/port_helpers.py's 3,200 ports there


def reserved_ports(count: int) -> list[int]:
    """`count` free ports below the ephemeral range (above it where there is no room below), starting at a place of
    this process's own so two benchmarks started together rarely look at the same ports."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    base = low - BELOW - SPAN if low - BELOW - SPAN >= 1024 else high + 1 + BELOW
    if base + SPAN > 65536:
        raise RuntimeError(f"no room outside the ephemeral port range {low}-{high}")
    start, ports = os.getpid() % SPAN, []
    for offset in range(SPAN):
        port = base + (start + offset) % SPAN
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
        if len(ports) == count:
            return ports
    raise RuntimeError(f"fewer than {count} free ports in {base}-{base + SPAN - 1}")
