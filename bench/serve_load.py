"""Load on `specgen serve`: N concurrent clients, 1% malformed requests, dynamic batching on vs off.

The script writes a model repository (the digits CNN or MLP of examples/specs with random
weights, seed 0, through `write_repository`, as `specgen export --triton` lays it out: max
batch 64, 1 ms queue delay) unless `--repo` names one, then for each mode starts the real
server in a subprocess (`run_server(..., batching=True|False)`) and drives it:

  - `--clients` concurrent clients (default 32), each a keep-alive HTTP/1.1 connection sending
    one request after the other: a valid one (one 8x8x1 image, JSON) or, with probability
    `--malformed` (default 1%), a malformed one (bad JSON, wrong shape, wrong datatype, wrong
    input name, in turn);
  - `--warmup` seconds untimed, then the server's RSS is read (/proc/PID/status), then
    `--seconds` timed, then the RSS again; then SIGTERM, and the exit status must be 0.

The clients are asyncio tasks in this one process with a minimal HTTP/1.1 client (request bytes
written by hand, responses read by Content-Length) so that as little CPU as possible goes to
the load generator: on a small machine client and server share the cores, and the figures
are for that setting. Every 20th valid answer is checked against onnxruntime on the same image
(max abs diff <= 1e-5).

Printed per mode and repetition (the modes interleave, `--repeats` times): throughput (valid
requests/s), p50 and p99 latency of valid requests, counts by status for valid and malformed
requests, the mean batch size from the server's /metrics, the server's and the clients' CPU
time per request (/proc and process_time: steadier than throughput on a shared machine), the
share of the machine's CPU time stolen by the hypervisor (/proc/stat `steal`: on a shared VM
the figures mean little when it is high), and the RSS after warm-up and at the end. Then
medians, and the throughput ratio batched / unbatched per repetition and its median.
Checks (exit 1 with --strict when one fails): no valid request fails, every malformed one
gets 400, RSS at the end within 10% of after warm-up, ratio >= 3.

`--scenarios` adds hostile clients next to the valid ones (batching on; each scenario a mode of
its own, interleaved with `none`, the valid clients alone), all against a server started under
`ulimit -n 1024` (`--nofile`), as the red team ran it:

  - `oversized`: 4 clients, each sending a 60 MB JSON body (Content-Length declared; half of them
    chunked instead) as fast as the server lets it, then reconnecting;
  - `slow`: 1,000 connections trickling request headers, one byte every 0.5 s, each reopened
    when the server closes it;
  - `pipeline`: 2 connections writing valid inference requests back to back as fast as the server
    takes them and never reading an answer, each reopened when the server closes it;
  - `headers`: 8 connections streaming 100-byte header lines every 10 ms, one sending 10,000 header
    fields, one sending an 8 MB header value, each reopened when the server closes it.

For these the server's RSS is also sampled every 0.1 s: its peak during the run and its value
1 s after the hostile clients stopped are printed. `--server-src DIR` runs the server from
another source tree (e.g. `git archive` of an older commit) to compare; `--rss-cap` kills a
server whose RSS passes it (the run is then marked), so an unbounded one cannot take the machine.

Printed for them: the hostile requests by answer (status, or `closed`), and the same figures
for the valid clients, whose throughput and p99 are the point.

    .venv/bin/python bench/serve_load.py                      # digits CNN, 32 clients, 3 x (3 + 10 s) per mode
    .venv/bin/python bench/serve_load.py --repeats 5 --seconds 20 --model mlp --strict
    .venv/bin/python bench/serve_load.py --modes on --scenarios none,oversized,slow   # hostile clients
    .venv/bin/python bench/serve_load.py --modes on --scenarios none,pipeline,headers --repeats 3

`--compare` (first argument) runs bench/serve_compare.py instead: tritonclient over HTTP (JSON and binary
tensors) and gRPC at 1, 8 and 32 clients against `specgen serve` with 1 and 2 workers and KServe's own
Python model server, interleaved repetitions, medians with the load average:

    .venv/bin/python bench/serve_load.py --compare --kserve-python .kserve-venv/bin/python
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from ports import reserved_ports
from serve_repo import SPECS, example_repo

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO, RSS_TOLERANCE, CHECK_EVERY = 3.0, 0.10, 20
OVERSIZED_BYTES, OVERSIZED_CLIENTS, SLOW_CONNECTIONS, SLOW_BYTE_EVERY = 60_000_000, 4, 1000, 0.5
PIPELINE_CLIENTS, HEADER_STREAMS, HEADER_LINE_EVERY, HUGE_HEADER_BYTES = 2, 8, 0.01, 8_000_000
SERVER = ("import sys; from pathlib import Path; from specgen.serve import run_server; "
          "sys.exit(run_server(Path(sys.argv[1]), '127.0.0.1', int(sys.argv[2]), sys.argv[3], batching=sys.argv[4] == 'on', "
          "threads=int(sys.argv[5]), log_level=sys.argv[6]))")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_ticks() -> tuple[int, int]:
    """Machine-wide (steal, total) CPU ticks from /proc/stat: steal is time the hypervisor gave to others."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return values[7] if len(values) > 7 else 0, sum(values[:8])


def request_bytes(path: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def malformed_bodies(valid: dict) -> list[bytes]:
    entry = valid["inputs"][0]
    return [
        json.dumps(valid).encode()[:-7],  # cut short: malformed JSON
        json.dumps({"inputs": [{**entry, "shape": [1, 8, 8]}]}).encode(),
        json.dumps({"inputs": [{**entry, "datatype": "INT64"}]}).encode(),
        json.dumps({"inputs": [{**entry, "name": "img"}]}).encode(),
    ]


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    valid: Counter[int] = field(default_factory=Counter)
    malformed: Counter[int] = field(default_factory=Counter)
    wrong_values: int = 0
    recording: bool = False
    hostile: Counter[str] = field(default_factory=Counter)


async def http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, payload: bytes) -> tuple[int, bytes]:
    writer.write(payload)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == b"content-length":
            length = int(value)
    return status, await reader.readexactly(length)


async def client(port: int, path: str, valid: list[tuple[bytes, np.ndarray]], bad: list[bytes], share: float,
                 seed: int, tally: Tally, stop: asyncio.Event) -> None:
    rng = random.Random(seed)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sent = 0
    try:
        while not stop.is_set():
            sent += 1
            malformed = rng.random() < share
            if malformed:
                body, expected = bad[sent % len(bad)], None
            else:
                body, expected = valid[rng.randrange(len(valid))]
            started = time.perf_counter()
            try:
                status, answer = await http(reader, writer, request_bytes(path, body))
            except (OSError, asyncio.IncompleteReadError):  # the server closed the connection: a failure, reconnect
                status, answer = 0, b""
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            elapsed = time.perf_counter() - started
            if not tally.recording:
                continue
            if malformed:
                tally.malformed[status] += 1
                continue
            tally.valid[status] += 1
            tally.latencies.append(elapsed)
            if status == 200 and expected is not None and sent % CHECK_EVERY == 0:
                out = json.loads(answer)["outputs"][0]["data"]
                if not np.max(np.abs(np.asarray(out, np.float32) - expected.reshape(-1))) <= 1e-5:  # NaN is wrong
                    tally.wrong_values += 1
    finally:
        writer.close()


async def oversized(port: int, path: str, chunked: bool, tally: Tally, stop: asyncio.Event) -> None:
    """60 MB bodies, one after the other: how far the server reads one before answering is its business."""
    piece = b"[" + b"0.123456789," * 87381 + b"0]"  # ~1 MB of JSON numbers
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {OVERSIZED_BYTES}"
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{framing}\r\n\r\n".encode()
    while not stop.is_set():
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        outcome = "closed"
        answer = asyncio.ensure_future(reader.readuntil(b"\r\n\r\n"))
        try:
            writer.write(head)
            sent = 0
            while sent < OVERSIZED_BYTES and not answer.done() and not stop.is_set():
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                await writer.drain()
                sent += len(piece)
            outcome = (await asyncio.wait_for(answer, 30))[9:12].decode()
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            pass
        finally:
            writer.close()
            answer.cancel()
            if answer.done() and not answer.cancelled():
                answer.exception()  # retrieved: a reset after the answer is expected here
        if tally.recording:
            tally.hostile[f"oversized {outcome}"] += 1


async def slow(port: int, tally: Tally, stop: asyncio.Event) -> None:
    """A connection trickling its request headers, a byte at a time, reopened whenever the server closes it."""
    header = b"GET /v2/health/live HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Slow: " + b"a" * 10_000
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(SLOW_BYTE_EVERY)
            continue
        try:
            for byte in header:
                if stop.is_set() or reader.at_eof():
                    break
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(SLOW_BYTE_EVERY)
        except OSError:
            pass
        finally:
            writer.close()
        if tally.recording:
            tally.hostile["slow closed by the server"] += 1


async def pipeline(port: int, path: str, body: bytes, tally: Tally, stop: asyncio.Event) -> None:
    """Valid requests written back to back, never an answer read; reconnects when the server closes the connection."""
    payload = request_bytes(path, body) * 64
    while not stop.is_set():
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        try:
            while not stop.is_set():
                writer.write(payload)
                await writer.drain()  # returns when the kernel took it: the server reading, or its buffers filling
                tally.hostile["pipelined requests written (from the start)"] += 64  # the kernel's buffers take ~7,000
        except OSError:
            pass
        finally:
            writer.close()
        if tally.recording and not stop.is_set():
            tally.hostile["pipelining connections closed by the server"] += 1


async def header_flood(port: int, kind: str, tally: Tally, stop: asyncio.Event) -> None:
    """Header lines streamed every 10 ms (`stream`), 10,000 fields (`fields`) or one 8 MB value (`value`)."""
    line = b"X-Line: " + b"b" * 90 + b"\r\n"
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        answer = asyncio.ensure_future(reader.read(12))
        outcome = "closed"
        try:
            writer.write(b"GET /v2/health/live HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            if kind == "fields":
                writer.write(b"".join(b"X-%d: 1\r\n" % k for k in range(10_000)) + b"\r\n")
            elif kind == "value":
                writer.write(b"X-Big: " + b"a" * HUGE_HEADER_BYTES + b"\r\n\r\n")
            while not answer.done() and not stop.is_set():
                if kind == "stream":
                    writer.write(line)
                await writer.drain()
                await asyncio.sleep(HEADER_LINE_EVERY)
            outcome = (await asyncio.wait_for(answer, 5))[9:12].decode() or "closed"
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            answer.cancel()
        if tally.recording and not stop.is_set():
            tally.hostile[f"headers {kind} {outcome}"] += 1


def hostile_tasks(scenario: str, port: int, path: str, body: bytes, tally: Tally, stop: asyncio.Event) -> list[asyncio.Task]:
    if scenario == "oversized":
        return [asyncio.create_task(oversized(port, path, k % 2 == 1, tally, stop)) for k in range(OVERSIZED_CLIENTS)]
    if scenario == "slow":
        return [asyncio.create_task(slow(port, tally, stop)) for _ in range(SLOW_CONNECTIONS)]
    if scenario == "pipeline":
        return [asyncio.create_task(pipeline(port, path, body, tally, stop)) for _ in range(PIPELINE_CLIENTS)]
    if scenario == "headers":
        kinds = ["stream"] * HEADER_STREAMS + ["fields", "value"]
        return [asyncio.create_task(header_flood(port, kind, tally, stop)) for kind in kinds]
    return []


async def sample_rss(pid: int, cap: float, peak: list[float], stop: asyncio.Event) -> None:
    """The server's peak RSS into peak[0], every 0.1 s; past `cap` MiB the server is killed (peak[1] = 1)."""
    while not stop.is_set():
        try:
            peak[0] = max(peak[0], rss_mib(pid))
        except (OSError, RuntimeError):
            return
        if cap and peak[0] > cap:
            os.kill(pid, signal.SIGKILL)
            peak[1] = 1
            return
        await asyncio.sleep(0.1)


def metric_sum(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


async def get(port: int, path: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        payload = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
        return await http(reader, writer, payload)
    finally:
        writer.close()


async def drive(args: argparse.Namespace, port: int, pid: int, model: str, valid: list[tuple[bytes, np.ndarray]],
                bad: list[bytes], scenario: str = "none") -> dict:
    tally, stop = Tally(), asyncio.Event()
    path = f"/v2/models/{model}/infer"
    tasks = [asyncio.create_task(client(port, path, valid, bad, args.malformed, k, tally, stop)) for k in range(args.clients)]
    await asyncio.sleep(1.0)  # the valid clients connect and send first, as clients already served would
    peak, sampling = [rss_mib(pid), 0.0], asyncio.Event()
    sampler = asyncio.create_task(sample_rss(pid, args.rss_cap, peak, sampling))
    attackers = hostile_tasks(scenario, port, path, valid[0][0], tally, stop)
    await asyncio.sleep(max(args.warmup - 1.0, 0.0))
    rss_warm = rss_mib(pid)
    _, before = await get(port, "/metrics")
    tally.recording = True
    started, server_cpu, client_cpu, ticks = time.perf_counter(), cpu_seconds(pid), time.process_time(), cpu_ticks()
    await asyncio.sleep(args.seconds)
    tally.recording = False
    elapsed = time.perf_counter() - started
    server_cpu, client_cpu = cpu_seconds(pid) - server_cpu, time.process_time() - client_cpu
    steal = [after - before for after, before in zip(cpu_ticks(), ticks, strict=True)]
    _, after = await get(port, "/metrics")
    stop.set()
    await asyncio.gather(*tasks)
    for attacker in attackers:
        attacker.cancel()
    await asyncio.gather(*attackers, return_exceptions=True)
    sampling.set()
    await sampler
    if peak[1]:
        raise RuntimeError(f"the server passed --rss-cap {args.rss_cap:g} MiB and was killed")
    await asyncio.sleep(1.0 if attackers else 0.0)  # what the server keeps once the hostile clients are gone
    rss_end = rss_mib(pid)
    runs = metric_sum(after.decode(), "specgen_batch_size_count") - metric_sum(before.decode(), "specgen_batch_size_count")
    rows = metric_sum(after.decode(), "specgen_batch_size_sum") - metric_sum(before.decode(), "specgen_batch_size_sum")
    latencies = sorted(tally.latencies)
    return {
        "throughput": tally.valid[200] / elapsed, "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        "valid": dict(tally.valid), "malformed": dict(tally.malformed), "wrong_values": tally.wrong_values,
        "mean_batch": rows / runs if runs else 0.0, "rss_warm": rss_warm, "rss_end": rss_end,
        "server_cpu_us": 1e6 * server_cpu / max(sum(tally.valid.values()) + sum(tally.malformed.values()), 1),
        "client_cpu_us": 1e6 * client_cpu / max(sum(tally.valid.values()) + sum(tally.malformed.values()), 1),
        "busy": (server_cpu + client_cpu) / elapsed, "steal": steal[0] / max(steal[1], 1),
        "hostile": dict(tally.hostile), "rss_peak": peak[0],
    }


def run_mode(args: argparse.Namespace, repo: Path, model: str, batching: bool, valid: list[tuple[bytes, np.ndarray]],
             bad: list[bytes], log: Path, scenario: str = "none") -> dict:
    [port] = reserved_ports(1)  # the server binds it after its imports (ports.py)
    nofile = args.nofile

    def limit_fds() -> None:  # the server's `ulimit -n`, as the red team ran it
        if nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, max(nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1])))

    with log.open("ab") as stderr:
        process = subprocess.Popen([sys.executable, "-c", SERVER, str(repo), str(port), args.provider,
                                    "on" if batching else "off", str(args.threads), args.log_level],
                                   stdout=subprocess.DEVNULL, stderr=stderr, cwd=args.server_src or ROOT,
                                   preexec_fn=limit_fds)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the server exited with {process.returncode}; see {log}")
            try:
                if asyncio.run(get(port, "/v2/health/ready"))[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not become ready in 60 s")
            time.sleep(0.1)
        result = asyncio.run(drive(args, port, process.pid, model, valid, bad, scenario))
        process.send_signal(signal.SIGTERM)
        result["exit"] = process.wait(timeout=60)
        return result
    finally:
        if process.poll() is None:
            process.kill()


def report(mode: str, r: dict) -> None:
    print(f"{mode:>10}: {r['throughput']:7.0f} valid req/s   p50 {r['p50_ms']:6.2f} ms   p99 {r['p99_ms']:7.2f} ms   "
          f"mean batch {r['mean_batch']:5.1f} rows   CPU per request: server {r['server_cpu_us']:4.0f} us, "
          f"clients {r['client_cpu_us']:3.0f} us ({r['busy']:.2f} of {os.cpu_count()} cores busy, {r['steal']:.0%} steal)")
    print(f"{'':>10}  valid by status {r['valid']}   malformed by status {r['malformed']}   "
          f"wrong values {r['wrong_values']}   RSS {r['rss_warm']:.1f} -> {r['rss_end']:.1f} MiB "
          f"({100 * (r['rss_end'] / r['rss_warm'] - 1):+.1f}%)   exit {r['exit']}")
    if r["hostile"]:
        print(f"{'':>10}  hostile clients by answer {r['hostile']}   server RSS peak {r['rss_peak']:.1f} MiB, "
              f"{r['rss_end']:.1f} MiB 1 s after they stopped")


def checks(r: dict) -> list[str]:
    failed = []
    if set(r["valid"]) != {200} or r["wrong_values"]:
        failed.append(f"valid requests failed or gave wrong values: {r['valid']}, {r['wrong_values']} wrong")
    if set(r["malformed"]) - {400}:
        failed.append(f"malformed requests not all 400: {r['malformed']}")
    if abs(r["rss_end"] / r["rss_warm"] - 1) > RSS_TOLERANCE:
        failed.append(f"RSS moved more than {RSS_TOLERANCE:.0%}: {r['rss_warm']:.1f} -> {r['rss_end']:.1f} MiB")
    if r["exit"] != 0:
        failed.append(f"the server exited with {r['exit']} after SIGTERM")
    return failed


def main() -> int:
    if "--compare" in sys.argv[1:]:  # side by side with KServe and with --workers 2: bench/serve_compare.py
        from serve_compare import main as compare

        return compare([a for a in sys.argv[1:] if a != "--compare"])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--compare", action="store_true",
                        help="instead: specgen serve (1 and 2 workers) side by side with KServe, bench/serve_compare.py; "
                        "its own flags (--servers, --protocols, --kserve-python, --model mobilenet...): --compare --help")
    parser.add_argument("--model", choices=sorted(SPECS), default="cnn")
    parser.add_argument("--repo", type=Path, help="serve this repository (default: a fresh one with random weights)")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0, help="timed seconds per mode")
    parser.add_argument("--warmup", type=float, default=3.0, help="untimed seconds per mode before the RSS reading")
    parser.add_argument("--malformed", type=float, default=0.01, help="share of malformed requests")
    parser.add_argument("--provider", default="cpu", choices=["auto", "cuda", "cpu"])
    parser.add_argument("--threads", type=int, default=0, help="onnxruntime intra-op threads (0: its default)")
    parser.add_argument("--log-level", default="info", help="server log level (info: one JSON line per request)")
    parser.add_argument("--modes", default="on,off", help="dynamic batching modes to run, in order")
    parser.add_argument("--repeats", type=int, default=3, help="repetitions of the modes, interleaved; medians reported")
    parser.add_argument("--scenarios", default="none", help="hostile clients beside the valid ones, each a mode of its "
                        "own run with batching on: none, oversized, slow (comma-separated, interleaved)")
    parser.add_argument("--nofile", type=int, default=1024, help="the server's ulimit -n (0: inherit)")
    parser.add_argument("--server-src", type=Path, help="run the server from this source tree (default: this one)")
    parser.add_argument("--rss-cap", type=float, default=4096, help="kill the server past this RSS in MiB (0: never)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a check or the target fails")
    args = parser.parse_args()

    from specgen.runtime.predictor import Predictor

    name = SPECS[args.model]
    with tempfile.TemporaryDirectory(prefix="serve_load_") as temp:
        repo = args.repo or example_repo(Path(temp) / "repo", name)
        predictor = Predictor(repo / name / "1" / "model.onnx", provider="cpu")
        rng = np.random.default_rng(1)
        valid = []
        for _ in range(64):
            x = rng.standard_normal((1, 8, 8, 1)).astype(np.float32)
            body = {"inputs": [{"name": "image", "shape": [1, 8, 8, 1], "datatype": "FP32", "data": x.reshape(-1).tolist()}]}
            valid.append((json.dumps(body).encode(), predictor({"image": x})["logits"]))
        bad = malformed_bodies(json.loads(valid[0][0]))
        log = Path(temp) / "server.log"
        print(f"specgen serve load: {name}, {args.clients} clients, {args.warmup:g} s warm-up + {args.seconds:g} s per mode, "
              f"{args.malformed:.0%} malformed, provider {args.provider}, onnxruntime threads {args.threads}, "
              f"log level {args.log_level}; {os.cpu_count()} CPUs shared by the clients and the server")
        results: dict[str, list[dict]] = {}
        failed: list[str] = []
        names = {"on": "batching", "off": "no batch", "on+oversized": "+oversize", "on+slow": "+slow",
                 "on+pipeline": "+pipeline", "on+headers": "+headers"}
        runs = [(mode, "none") for mode in args.modes.split(",")]
        runs = [(m, sc) for m, scenario in runs for sc in (args.scenarios.split(",") if m == "on" else [scenario])]
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # the slow scenario holds 1,000 sockets here
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
        for repeat in range(args.repeats):
            print(f"repetition {repeat + 1} of {args.repeats}")
            for mode, scenario in runs:
                key = mode if scenario == "none" else f"{mode}+{scenario}"
                result = run_mode(args, repo, name, mode == "on", valid, bad, log, scenario)
                results.setdefault(key, []).append(result)
                report(names[key], result)
                failed += [f"{key}, repetition {repeat + 1}: {f}" for f in checks(result)]
        print("medians over the repetitions:")
        for mode, runs in results.items():
            print(f"{names[mode]:>10}: {statistics.median(r['throughput'] for r in runs):7.0f} valid req/s   "
                  f"p50 {statistics.median(r['p50_ms'] for r in runs):6.2f} ms   "
                  f"p99 {statistics.median(r['p99_ms'] for r in runs):7.2f} ms   "
                  f"server CPU {statistics.median(r['server_cpu_us'] for r in runs):4.0f} us per request   "
                  f"RSS peak {max(r['rss_peak'] for r in runs):.0f} MiB, end {max(r['rss_end'] for r in runs):.0f} MiB")
        if {"on", "off"} <= set(results):
            ratios = [on["throughput"] / off["throughput"] for on, off in zip(results["on"], results["off"], strict=True)]
            cpu = statistics.median(off["server_cpu_us"] / on["server_cpu_us"]
                                    for on, off in zip(results["on"], results["off"], strict=True))
            ratio = statistics.median(ratios)
            met = ratio >= TARGET_RATIO
            print(f"throughput ratio dynamic batching / one request per run: median {ratio:.2f}x "
                  f"(per repetition {', '.join(f'{r:.2f}' for r in ratios)}; target >= {TARGET_RATIO:g}x: "
                  f"{'met' if met else 'NOT met'}); server CPU per request, no batch / batching: {cpu:.2f}x")
            if not met:
                failed.append(f"median ratio {ratio:.2f} below {TARGET_RATIO:g}")
    for problem in failed:
        print(f"check failed: {problem}")
    if not failed:
        print("checks: every valid request answered 200 with the right values, every malformed one 400, RSS within 10%")
    return 1 if failed and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
