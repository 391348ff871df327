"""Shared by the gRPC, versions and live-repository tests of `specgen serve`: models with random weights (no
TensorFlow) and the real server (HTTP and gRPC on one event loop) in a thread on free loopback ports."""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from port_helpers import bound_port as bound_port  # moved there; importers of serve_helpers keep it

from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.runtime.onnx_export import with_weights
from specgen.runtime.parity import random_weights
from specgen.serve.app import ServeOptions, create_app
from specgen.serve.control import ModelSource
from specgen.serve.models import ServedModel
from specgen.serve.server import Server, server_config
from specgen.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "examples" / "specs"


def model_bytes(name: str, seed: int = 0) -> tuple[Any, bytes]:
    """The spec's IR and its exported model.onnx with weights drawn from `seed` (another seed: another version)."""
    ir = build_ir(load_spec(SPECS / f"{name}.yaml"))
    weights = random_weights(ir, np.random.default_rng(seed))
    return ir, with_weights(onnx.load_from_string(render_files(ir)["model.onnx"]), ir, weights).SerializeToString()


class Served:
    """`specgen serve`'s Server (uvicorn + gRPC) in a thread: `http` and `grpc` are "127.0.0.1:PORT"."""

    def __init__(self, models: list[ServedModel], options: ServeOptions | None = None, repo: Path | None = None):
        options = options or ServeOptions(grpc_port=0)
        self.app = create_app(models, options, ModelSource(repo, "cpu") if repo is not None else None)
        self.service = self.app.state.service
        self.server = Server(server_config(self.app, "127.0.0.1", 0))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started or (self.service.options.grpc_port is not None and self.service.grpc is None):
            assert time.monotonic() < deadline and self.thread.is_alive(), "the server did not start"
            time.sleep(0.01)
        self.http = f"127.0.0.1:{self.server.servers[0].sockets[0].getsockname()[1]}"
        self.grpc = f"127.0.0.1:{self.service.grpc_port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def sample(text: str, name: str, **labels: str) -> float | None:
    """One sample of the Prometheus text exposition; None when the series does not exist."""
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            head, value = line.rsplit(" ", 1)
            found = dict(re.findall(r'(\w+)="([^"]*)"', head))
            if head.split("{")[0] == name and all(found.get(k) == v for k, v in labels.items()):
                return float(value)
    return None


def metric(text: str, name: str, **labels: str) -> float:
    """One sample of the Prometheus text exposition (0 when the series does not exist yet)."""
    found = sample(text, name, **labels)
    return 0.0 if found is None else found


def events(records: list[Any], event: str) -> list[dict[str, Any]]:
    """The `fields` of captured log records of one event (what the JSON log line carries)."""
    return [r.fields for r in records if isinstance(getattr(r, "fields", None), dict) and r.fields.get("event") == event]


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


class Gate(threading.Event):
    """Opened by the test; `entered` is set once a run is inside the model, holding its worker. The metrics cannot
    say that: in flight 1 and queue depth 0 also hold while the first request is still being parsed, and a second
    request sent then found the first in the queue and was refused (CI, under load)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()


def gated(model: ServedModel, gate: Gate) -> ServedModel:
    """The same model, each onnxruntime run held until `gate` opens: a model as slow as the test needs, with no
    race against a fixed delay on a loaded machine (a 1 s sleep let the first request finish before the second
    had been seen queued)."""
    def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        gate.entered.set()
        assert gate.wait(60), "the test never opened the gate"
        return model.run(inputs)

    return dataclasses.replace(model, run=run)
