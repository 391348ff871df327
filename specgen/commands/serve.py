"""`specgen serve REPO`: a Triton-layout model repository over the Open Inference Protocol (docs/serve.md)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path


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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("repo", type=Path, help="REPO/<model>/config.pbtxt and REPO/<model>/<version>/model.onnx")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--provider", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument("--queue-size", type=int, metavar="N", help="waiting requests per model before 503 (default: "
                        "the config's default_queue_policy.max_queue_size, else 4 x max_batch_size)")
    parser.add_argument("--no-batching", action="store_true", help="run every request alone (no dynamic batching)")
    parser.add_argument("--threads", type=int, default=0, help="onnxruntime intra-op threads (0: its default)")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default="info")
    parser.add_argument("--header-timeout", type=float, default=10.0, metavar="S",
                        help="seconds a request's headers may take to arrive (408 after)")
    parser.add_argument("--body-timeout", type=float, default=30.0, metavar="S",
                        help="seconds a request's body may take to arrive (408 after)")
    parser.add_argument("--max-connections", type=int, default=1000, metavar="N",
                        help="open connections at most (lowered to what ulimit -n allows)")
    parser.add_argument("--grpc-port", type=int, metavar="N",
                        help="also serve the Open Inference Protocol over gRPC on this port (same host)")
    parser.add_argument("--model-control", choices=["none", "poll", "explicit"], default="none",
                        help="none: the models found at start; poll: rescan the repository every --poll-seconds; "
                        "explicit: load and unload through the repository API")
    parser.add_argument("--poll-seconds", type=positive_seconds, default=15.0, metavar="S",
                        help="seconds between scans with --model-control poll")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="server processes on the same ports, onnxruntime's threads split between them")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="on the CUDA provider, capture one CUDA graph per batch bucket (1, 2, 4, ... "
                             "max_batch_size); batches are padded up to their bucket (docs/serve.md)")


def run(args: argparse.Namespace) -> int:
    from specgen.extras import need

    # every package the server imports (the serve extra, which brings the runtime's onnxruntime): one line
    need("specgen serve", "onnxruntime", "starlette", "uvicorn", "httptools", "prometheus_client", "tritonclient", "grpc")
    from specgen.serve import run_server

    return run_server(args.repo, args.host, args.port, args.provider, queue_size=args.queue_size,
                      batching=not args.no_batching, threads=args.threads, log_level=args.log_level,
                      header_timeout=args.header_timeout, body_timeout=args.body_timeout,
                      max_connections=args.max_connections, grpc_port=args.grpc_port,
                      model_control=args.model_control, poll_seconds=args.poll_seconds, workers=args.workers,
                      cuda_graphs=args.cuda_graphs)
