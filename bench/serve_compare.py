"""Side by side: `specgen serve` (1 and 2 workers) and KServe's Python model server, driven by tritonclient.

Run through `bench/serve_load.py --compare` (the flags below are its own). For each repetition the
servers are started in turn (interleaved), and each is driven, one cell after the other, by
tritonclient's asyncio clients in this process: HTTP with JSON tensors, HTTP with binary tensors
(the binary_data extension) and gRPC (raw_input_contents), each at 1, 8 and 32 concurrent clients
(one client object, hence one connection or channel, per concurrent client; each sends its next request
when the previous is answered). Per cell: `--warmup` s untimed, `--seconds` s timed; req/s, p50 and
p99 of the answered requests, failures, and the 1-minute load average at the end. Medians over the
repetitions are printed at the end.

KServe runs from its own virtualenv (`--kserve-python`, default .kserve-venv/bin/python, made with
`python3 -m venv .kserve-venv && .kserve-venv/bin/pip install kserve onnxruntime`; never in the project's):
a `kserve.Model` whose `predict` runs the same
model.onnx in onnxruntime with the options specgen's Predictor uses (an `InferenceSession` with
`intra_op_num_threads` = `--threads`, 0: onnxruntime's default, and the CPU provider), one request per run
(KServe's model server has no dynamic batching of its own), one process. specgen serves with its defaults
(dynamic batching, max batch 64, 1 ms queue delay from config.pbtxt) at log level warning, and KServe at its
log level warning too, so neither writes a line per request.

Client and servers share the machine's CPUs: on a small machine the figures are for that setting, and the
load generator's own CPU (printed) bounds what any server can show.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from ports import reserved_ports

ROOT = Path(__file__).resolve().parents[1]
KSERVE_PYTHON = ROOT / ".kserve-venv" / "bin" / "python"  # the checkout's, whatever the working directory
KSERVE_SETUP = "python3 -m venv .kserve-venv && .kserve-venv/bin/pip install kserve onnxruntime"
PROTOCOLS = ("http-json", "http-binary", "grpc")

KSERVE_SERVER = r'''
import logging, sys
import numpy as np, onnxruntime as ort, kserve
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer

class OnnxModel(Model):
    def __init__(self, name, path, threads):
        super().__init__(name)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads  # as specgen's Predictor
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.ready = True

    def predict(self, payload, headers=None):
        tensor = payload.inputs[0]
        y = self.session.run(None, {tensor.name: tensor.as_numpy()})[0]
        wanted = payload.request_outputs or []
        binary = payload.use_binary_outputs or any(o.binary_data for o in wanted)
        out = InferOutput(name="logits", shape=list(y.shape), datatype="FP32")
        out.set_data_from_numpy(y, binary_data=binary)
        return InferResponse(model_name=self.name, infer_outputs=[out], response_id=payload.id or "",
                             from_grpc=payload.from_grpc, use_binary_outputs=binary, requested_outputs=wanted or None)

name, path, threads, http_port, grpc_port = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
model = OnnxModel(name, path, threads)
logging.getLogger().setLevel(logging.WARNING)
ModelServer(http_port=http_port, grpc_port=grpc_port, enable_latency_logging=False, access_log_format=None,
            enable_docs_url=False).start([model])
'''


def start(kind: str, repo: Path, model: str, threads: int, kserve_python: str, log) -> tuple[subprocess.Popen, int, int]:
    http, grpc = reserved_ports(2)  # KServe takes its ports in advance; specgen is started the same way
    if kind == "kserve":
        command = [kserve_python, "-c", KSERVE_SERVER, model, str(repo / model / "1" / "model.onnx"), str(threads),
                   str(http), str(grpc)]
    else:
        workers = kind.split("-w")[1]
        command = [sys.executable, "-m", "specgen", "serve", str(repo), "--provider", "cpu", "--port", str(http),
                   "--grpc-port", str(grpc), "--workers", workers, "--threads", str(threads), "--log-level", "warning"]
    process = subprocess.Popen(command, stdout=log, stderr=log, start_new_session=True)
    import tritonclient.http as th

    deadline = time.monotonic() + 90
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{kind} exited with {process.returncode}; see its log")
        try:
            client = th.InferenceServerClient(f"127.0.0.1:{http}")
            ready = client.is_model_ready(model)
            client.close()
            if ready:
                return process, http, grpc
        except Exception:  # not listening yet
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{kind} did not become ready in 90 s")
        time.sleep(0.2)


def stop(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


async def cell(protocol: str, port: int, model: str, x: np.ndarray, clients: int, warmup: float, seconds: float) -> dict:
    """`clients` concurrent clients for warmup + seconds; latencies of the timed part."""
    if protocol == "grpc":
        import tritonclient.grpc.aio as tc
    else:
        import tritonclient.http.aio as tc
    binary = protocol != "http-json"
    # tritonclient sends JSON bodies with no Content-Type: KServe (0.21) then reads them as binary tensor data and
    # answers 400 ("the 'inference-header-content-length' header is missing"); specgen accepts either way.
    headers = {"Content-Type": "application/json"} if protocol == "http-json" else None
    latencies: list[float] = []
    failures = 0
    t_start = time.perf_counter() + warmup
    t_end = t_start + seconds

    async def one() -> None:
        nonlocal failures
        client = tc.InferenceServerClient(f"127.0.0.1:{port}")
        tensor = tc.InferInput("image", list(x.shape), "FP32")
        if protocol == "grpc":
            tensor.set_data_from_numpy(x)
            outputs = [tc.InferRequestedOutput("logits")]
        else:
            tensor.set_data_from_numpy(x, binary_data=binary)
            outputs = [tc.InferRequestedOutput("logits", binary_data=binary)]
        try:
            while True:
                t0 = time.perf_counter()
                if t0 >= t_end:
                    return
                try:
                    result = await client.infer(model, [tensor], outputs=outputs, headers=headers)
                    ok = result.as_numpy("logits").shape[0] == 1
                except Exception:
                    ok = False
                t1 = time.perf_counter()
                if t0 >= t_start and t1 <= t_end:
                    if ok:
                        latencies.append(t1 - t0)
                    else:
                        failures += 1
        finally:
            await client.close()

    cpu0 = time.process_time()
    await asyncio.gather(*(one() for _ in range(clients)))
    cpu = time.process_time() - cpu0
    latencies.sort()
    n = len(latencies)
    return {"rps": n / seconds, "p50": latencies[n // 2] * 1e3 if n else float("nan"),
            "p99": latencies[min(n - 1, int(n * 0.99))] * 1e3 if n else float("nan"), "failed": failures,
            "load": os.getloadavg()[0], "client_cpu_us": cpu / max(n, 1) * 1e6}


def compare(repo: Path, model: str, servers: list[str], protocols: list[str], clients: list[int], repeats: int,
            warmup: float, seconds: float, threads: int, kserve_python: str, log_path: Path,
            shape: tuple[int, ...] = (1, 8, 8, 1)) -> dict:
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    results: dict[tuple[str, str, int], list[dict]] = {}
    with log_path.open("ab") as log:
        for repeat in range(repeats):
            print(f"repetition {repeat + 1} of {repeats}", flush=True)
            for server in servers:
                process, http, grpc = start(server, repo, model, threads, kserve_python, log)
                try:
                    for protocol in protocols:
                        for c in clients:
                            r = asyncio.run(cell(protocol, grpc if protocol == "grpc" else http, model, x, c,
                                                 warmup, seconds))
                            results.setdefault((server, protocol, c), []).append(r)
                            print(f"  {server:>10} {protocol:>11} {c:>3} clients: {r['rps']:7.0f} req/s  "
                                  f"p50 {r['p50']:6.2f} ms  p99 {r['p99']:7.2f} ms  failed {r['failed']}  "
                                  f"load {r['load']:.2f}  client CPU {r['client_cpu_us']:.0f} us/req", flush=True)
                finally:
                    stop(process)
    print("medians over the repetitions (req/s, p50 ms, p99 ms, failed in all, load average):")
    print("| server | protocol | clients | req/s | p50 ms | p99 ms | failed | load avg |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (server, protocol, c), runs in results.items():
        print(f"| {server} | {protocol} | {c} | {statistics.median(r['rps'] for r in runs):.0f} | "
              f"{statistics.median(r['p50'] for r in runs):.2f} | {statistics.median(r['p99'] for r in runs):.2f} | "
              f"{sum(r['failed'] for r in runs)} | {statistics.median(r['load'] for r in runs):.2f} |")
    return {k: v for k, v in results.items()}


def kserve_missing(python: str) -> str | None:
    """Why KServe's interpreter cannot serve (one line), or None. Checked before anything is timed: it used to
    fail only when its turn came, minutes into the run, with a traceback and none of the figures measured."""
    if not Path(python).is_file():
        return (f"KServe's interpreter {python} not found; make it with `{KSERVE_SETUP}` in the checkout, pass "
                "--kserve-python PATH, or leave kserve out: --servers specgen-w1,specgen-w2")
    check = subprocess.run([python, "-c", "import kserve, onnxruntime, numpy"], capture_output=True, text=True)
    if check.returncode != 0:
        last = (check.stderr.strip().splitlines() or ["no message"])[-1]
        return f"{python} cannot import kserve and onnxruntime ({last}); install them there: `{KSERVE_SETUP}`"
    return None


def checked_lists(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[list[str], list[str], list[int]]:
    """--servers, --protocols and --clients as lists; a bad entry is a usage error before any work."""
    servers, protocols = args.servers.split(","), args.protocols.split(",")
    for server in servers:
        if server != "kserve" and not re.fullmatch(r"specgen-w[1-9][0-9]*", server):
            parser.error(f"--servers: unknown server {server!r}; expected kserve or specgen-wN (N workers)")
    for protocol in protocols:
        if protocol not in PROTOCOLS:
            parser.error(f"--protocols: unknown protocol {protocol!r}; expected some of {','.join(PROTOCOLS)}")
    try:
        clients = [int(c) for c in args.clients.split(",")]
    except ValueError:
        parser.error(f"--clients: expected whole numbers separated by commas, got {args.clients!r}")
    if any(c < 1 for c in clients):
        parser.error("--clients: each count must be at least 1")
    return servers, protocols, clients


def main(argv: list[str] | None = None) -> int:
    import tempfile

    parser = argparse.ArgumentParser(prog="serve_load.py --compare",
                                     description="specgen serve vs KServe, side by side (see bench/serve_compare.py)")
    parser.add_argument("--servers", default="specgen-w1,specgen-w2,kserve")
    parser.add_argument("--protocols", default="http-json,http-binary,grpc")
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--threads", type=int, default=0, help="onnxruntime intra-op threads of each server (0: default)")
    parser.add_argument("--kserve-python", default=str(KSERVE_PYTHON),
                        help="KServe's virtualenv interpreter (default: .kserve-venv in the checkout)")
    parser.add_argument("--model", default="cnn", choices=["cnn", "mlp", "mobilenet"],
                        help="mobilenet: examples/specs/mobilenet_v3_small.yaml at a 224x224x3 input")
    args = parser.parse_args(argv)
    servers, protocols, clients = checked_lists(parser, args)
    if "kserve" in servers and (why := kserve_missing(args.kserve_python)) is not None:
        print(f"bench/serve_compare.py: {why}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # serve_repo, when imported from elsewhere
    from serve_repo import SPECS, example_repo, mobilenet_repo

    with tempfile.TemporaryDirectory(prefix="serve_compare_") as temp:
        if args.model == "mobilenet":
            name, shape = "mobilenet_v3_small", (1, 224, 224, 3)
            repo = mobilenet_repo(Path(temp))
        else:
            name, shape = SPECS[args.model], (1, 8, 8, 1)
            repo = example_repo(Path(temp) / "repo", name)
        print(f"side by side: {name}, servers {args.servers}, {args.warmup:g} + {args.seconds:g} s per cell, "
              f"{os.cpu_count()} CPUs shared by clients and servers, onnxruntime threads {args.threads}", flush=True)
        compare(repo, name, servers, protocols, clients, args.repeats, args.warmup, args.seconds, args.threads,
                args.kserve_python, Path(temp) / "servers.log", shape)
    return 0


if __name__ == "__main__":
    sys.exit(main())
