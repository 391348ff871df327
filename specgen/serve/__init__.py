"""`specgen serve`: exported models over the Open Inference Protocol (KServe v2), with dynamic batching.

    from specgen.serve import run_server
    run_server(Path("runs/digits_cnn/export"), "127.0.0.1", 8000, "auto")

Modules: `repository` (the Triton-layout folder; config.pbtxt read into Triton's ModelConfig
message; version_policy), `models` (onnxruntime sessions through Predictor, checked against the
configs and warmed), `registry` (the served versions, swapped without failing a request), `control`
(--model-control none|poll|explicit), `protocol` and `values` (HTTP requests in, responses out),
`grpc_protocol` and `grpc_server` (the same over gRPC), `stats` (Triton's statistics extension),
`limits` (body bounds, budget, deadline), `batcher` (dynamic batching in a worker thread), `metrics`
(Prometheus), `logs` (JSON lines), `app` (the Starlette application), `server` (uvicorn plus gRPC;
the header deadline and connection limit), `connection` (uvicorn's protocol with the memory of a
connection bounded: parse-ahead, header bytes, unread answers). Needs the `serve` extra (starlette,
uvicorn, prometheus_client, tritonclient[grpc] with grpcio) and onnxruntime. See docs/serve.md.

`serve(ServerSettings(...))` is the whole start of one server process (load, check, warm, bind, run
until a signal); `run_server` builds the settings from keyword arguments.
"""

from __future__ import annotations

import sys
from pathlib import Path

from specgen.serve.options import MAX_PORT, WORKER_TIMEOUT_RANGE, worker_timeout_valid
from specgen.serve.process import WORKER_TIMEOUT, ServerSettings, serve


def run_server(repo: Path, host: str = "127.0.0.1", port: int = 8000, provider: str = "auto", *,
               queue_size: int | None = None, batching: bool = True, threads: int = 0, log_level: str = "info",
               graceful_timeout: float | None = 30.0, header_timeout: float = 10.0, body_timeout: float = 30.0,
               max_connections: int = 1000, send_timeout: float = 10.0, grpc_port: int | None = None,
               model_control: str = "none", poll_seconds: float = 15.0, workers: int = 1,
               cuda_graphs: bool = False, worker_timeout: float = WORKER_TIMEOUT) -> int:
    """Serve every model of the Triton-layout repository `repo` until SIGTERM / SIGINT; the exit status.

    0 after a graceful shutdown (in-flight requests answered, batchers drained); 1 when the
    repository cannot be served or an address cannot be bound. `queue_size` bounds each
    model's waiting requests (default: the config's default_queue_policy.max_queue_size, else
    4 x max_batch_size); `batching=False` runs every request alone; `threads` is onnxruntime's
    intra-op thread count (0: its default); `graceful_timeout` caps the wait for in-flight
    requests on shutdown (None: no cap). `header_timeout` / `body_timeout`: seconds a request's
    headers / body may take to arrive (408 after); `max_connections`: open connections at most
    (lowered to what `ulimit -n` allows); `send_timeout`: seconds a client may leave its answers unread
    before it is disconnected. `grpc_port`: also serve gRPC there (on `host`); `model_control`: none, poll
    (rescan the repository every `poll_seconds`) or explicit (Triton's repository load / unload). `workers`:
    server processes on the same ports (workers.py), onnxruntime's threads split between them. `cuda_graphs`:
    on the CUDA provider, one captured CUDA graph per batch bucket (runtime/predictor.py). `worker_timeout`: with
    `workers` above 1, a worker whose event loop has sent no heartbeat for this many seconds (frozen) is killed and
    restarted (workers.py).
    """
    from specgen.serve.options import ServeOptions

    try:  # the command line refuses these first (commands/serve.py); a caller from Python gets one line too
        options = ServeOptions(queue_size=queue_size, batching=batching, header_timeout=header_timeout,
                               body_timeout=body_timeout, max_connections=max_connections, send_timeout=send_timeout,
                               grpc_port=grpc_port, grpc_host=host, model_control=model_control,
                               poll_seconds=poll_seconds, graceful_timeout=graceful_timeout)
    except ValueError as exc:
        print(f"specgen serve: {exc}", file=sys.stderr)
        return 1
    if problems := _refusals(port, threads, workers, worker_timeout):
        print(f"specgen serve: {problems[0]}", file=sys.stderr)
        return 1
    settings = ServerSettings(Path(repo), host, port, provider, threads, log_level, graceful_timeout, options,
                              cuda_graphs=cuda_graphs, worker_timeout=worker_timeout)
    if workers == 1:
        return serve(settings)
    from specgen.serve.workers import run_workers

    return run_workers(settings, workers)


def _refusals(port: int, threads: int, workers: int, worker_timeout: float = WORKER_TIMEOUT) -> list[str]:
    """What is wrong with the settings ServeOptions does not hold (the command line refuses them first)."""
    problems = []
    if not 0 <= port <= MAX_PORT:
        problems.append(f"port must be 0 to {MAX_PORT} (0: any free port), got {port}")
    if threads < 0:
        problems.append(f"threads must be 0 (onnxruntime's default) or more, got {threads}")
    if workers < 1:
        problems.append(f"workers must be 1 or more, got {workers}")
    if not worker_timeout_valid(worker_timeout):  # the command line's bounds (commands/serve.py worker_timeout)
        problems.append(f"worker_timeout: received {worker_timeout!r}; expected {WORKER_TIMEOUT_RANGE}")
    return problems


__all__ = ["ServerSettings", "run_server", "serve"]
