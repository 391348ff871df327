"""`specgen serve REPO`: a Triton-layout model repository over the Open Inference Protocol (docs/serve.md)."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable

from specgen.commands.common import InputPath

MAX_PORT = 65535  # serve/options.py holds the same bound; importing it would load the server for every command
# Connections at once: each holds a file descriptor, and gRPC's connection quota must stay below 2**31 - 1 (it
# aborts the process at that value).
MAX_CONNECTIONS = 1_000_000
MAX_THREADS = 1024  # onnxruntime intra-op threads: its option is an int32, and each thread is a real one


def positive_seconds(text: str) -> float:
    """A positive finite number of seconds: nan would stop the poll task at its first sleep and inf never wake it,
    so either would leave the repository unpolled, silently."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive finite number of seconds")
    return value


def timeout_seconds(text: str) -> float:
    """A connection deadline: positive and finite (nan would make every timer raise, 0 or less refuse every request)
    and at most serve/options.py MAX_TIMEOUT_SECONDS (imported here, when serve's arguments are read: at module
    level it would load the server for every command)."""
    from specgen.serve.options import MAX_TIMEOUT_SECONDS

    value = positive_seconds(text)
    if value > MAX_TIMEOUT_SECONDS:
        raise argparse.ArgumentTypeError(f"{text!r} is more than {MAX_TIMEOUT_SECONDS:,.0f} seconds (a day), the "
                                         "longest a request's headers or body may take here")
    return value


def worker_timeout(text: str) -> float:
    """--worker-timeout: run_server's bounds (serve/options.py MIN_WORKER_TIMEOUT says why 10 s at least)."""
    from specgen.serve.options import WORKER_TIMEOUT_RANGE, worker_timeout_valid

    value = positive_seconds(text)
    if not worker_timeout_valid(value):
        raise argparse.ArgumentTypeError(f"received {text!r}; expected {WORKER_TIMEOUT_RANGE}")
    return value


def port(text: str) -> int:
    """A TCP port, 0..65535 (0: any free port): the system would take 70000 as 70000 mod 65536, another port than
    the one the log names."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"received {text!r}; expected a port number from 0 to {MAX_PORT} "
                                         "(0: any free port)")
    return value


def count(low: int, high: int | None, what: str) -> Callable[[str], int]:
    """An integer from `low` to `high` (None: no bound): `what` says what it counts, in the refusal."""
    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low or (high is not None and value > high):
            bounds = f"from {low:,} to {high:,}" if high is not None else f"of {low} or more"
            raise argparse.ArgumentTypeError(f"received {text!r}; expected a whole number {bounds} ({what})")
        return value

    return check


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("repo", action=InputPath, help="REPO/<model>/config.pbtxt and REPO/<model>/<version>/model.onnx")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=port, default=8000, help="HTTP port, 0..65535 (0: any free port)")
    parser.add_argument("--provider", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument("--queue-size", type=count(1, None, "requests that may wait per model"), metavar="N",
                        help="waiting requests per model before 503 (default: the config's "
                        "default_queue_policy.max_queue_size, else 4 x max_batch_size)")
    parser.add_argument("--no-batching", action="store_true", help="run every request alone (no dynamic batching)")
    parser.add_argument("--threads", type=count(0, MAX_THREADS, "onnxruntime intra-op threads; 0: its default"),
                        default=0, help="onnxruntime intra-op threads (0: its default)")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default="info")
    parser.add_argument("--header-timeout", type=timeout_seconds, default=10.0, metavar="S",
                        help="seconds a request's headers may take to arrive (408 after)")
    parser.add_argument("--body-timeout", type=timeout_seconds, default=30.0, metavar="S",
                        help="seconds a request's body may take to arrive (408 after)")
    parser.add_argument("--max-connections", type=count(1, MAX_CONNECTIONS, "open connections at most"), default=1000,
                        metavar="N", help="open connections at most (lowered to what ulimit -n allows)")
    parser.add_argument("--grpc-port", type=port, metavar="N",
                        help="also serve the Open Inference Protocol over gRPC on this port (same host)")
    parser.add_argument("--model-control", choices=["none", "poll", "explicit"], default="none",
                        help="none: the models found at start; poll: rescan the repository every --poll-seconds; "
                        "explicit: load and unload through the repository API")
    parser.add_argument("--poll-seconds", type=positive_seconds, default=15.0, metavar="S",
                        help="seconds between scans with --model-control poll")
    parser.add_argument("--workers", type=count(1, None, "server processes"), default=1, metavar="N",
                        help="server processes on the same ports, onnxruntime's threads split between them (default 1)")
    parser.add_argument("--worker-timeout", type=worker_timeout, default=30.0, metavar="S",
                        help="with --workers above 1: seconds a worker's heartbeat may be silent before the parent "
                             "kills and restarts it: from 10 (a response is encoded on a worker's event loop, "
                             "which sends no heartbeat meanwhile) to a day (default 30, gunicorn's)")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="on the CUDA provider, capture one CUDA graph per batch bucket (1, 2, 4, ... "
                             "max_batch_size); batches are padded up to their bucket (docs/serve.md)")
    # The server never loads TensorFlow, so cli.py leaves its stderr alone (native_logs.quiet): a pipe read by a
    # thread of the parent would lose what --workers' processes log once the parent is killed (kill -9).
    parser.set_defaults(native_logs=False)


def run(args: argparse.Namespace) -> int:
    from specgen.extras import need


    # every package the server imports (the serve extra, which brings the runtime's onnxruntime): one line
    need("specgen serve", "onnxruntime", "starlette", "uvicorn", "httptools", "prometheus_client", "tritonclient", "grpc")
    from specgen.serve import run_server
    from specgen.serve.options import EXPLICIT_NEEDS_ONE_WORKER

    if args.workers > 1 and args.model_control == "explicit":  # two flags that do not go together: a usage error
        print(f"specgen serve: error: {EXPLICIT_NEEDS_ONE_WORKER}", file=sys.stderr)
        return 2

    return run_server(args.repo, args.host, args.port, args.provider, queue_size=args.queue_size,
                      batching=not args.no_batching, threads=args.threads, log_level=args.log_level,
                      header_timeout=args.header_timeout, body_timeout=args.body_timeout,
                      max_connections=args.max_connections, grpc_port=args.grpc_port,
                      model_control=args.model_control, poll_seconds=args.poll_seconds, workers=args.workers,
                      cuda_graphs=args.cuda_graphs, worker_timeout=args.worker_timeout)
