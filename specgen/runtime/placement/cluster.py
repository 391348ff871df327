"""This process's place in a multi-worker run, from TF_CONFIG as TensorFlow reads it (no TensorFlow import).

TF_CONFIG is validated whole before TensorFlow sees it (TensorFlow's own reader ends in tracebacks on a
list for `cluster`, a string for a job, an index out of range, or crashes later on an address it cannot
parse): a pydantic model of the shape MultiWorkerMirroredStrategy needs, parsed by pydantic's JSON
reader (jiter: no Python recursion, a nesting limit, so 20,000 nested `[` is one error like any other).
Any problem is one line naming TF_CONFIG, what was received and what was expected.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import select
import socket
import time
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, StrictInt, StrictStr, ValidationError

from specgen.diagnostics import Diagnostic, SpecError, describe, one_of, safe_repr
from specgen.ir.model import ModelIR
from specgen.kinds import compat
from specgen.kinds.features import distribute
from specgen.spec.load import LoadedSpec

# Linux refuses a single environment string over MAX_ARG_STRLEN (32 pages, 128 KiB) at exec, so no
# launcher can hand a longer TF_CONFIG to a worker; a longer one in os.environ is refused before parsing.
MAX_TF_CONFIG = 128 * 1024
# The jobs of a MultiWorkerMirroredStrategy cluster: tasks that train (`worker`, at most one `chief`) and
# an `evaluator` that Vertex AI may list (it trains nothing and joins no collective). No `ps`: that is
# ParameterServerStrategy's.
JOBS = ("chief", "worker", "evaluator")
TRAINING_JOBS = ("chief", "worker")
EXAMPLE = '{"cluster": {"worker": ["host0:12345", "host1:12345"]}, "task": {"type": "worker", "index": 0}}'
# A DNS name (RFC 1123 labels; `_` too, which Docker Compose service names use) or an IPv4 address.
# Hand-written: neither the standard library nor pydantic parses "host:port" without a URL scheme.
HOST = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}"
                  r"[A-Za-z0-9_])?)*$")


def _address(text: str) -> str:
    """`host:port` as gRPC takes it: a DNS name, an IPv4 address or `[IPv6]`, and a port from 1 to 65535."""
    host, colon, port = text.rpartition(":")
    if not colon or not host:
        raise ValueError("host:port")
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and 1 <= int(port) <= 65535):
        raise ValueError("a port from 1 to 65535 after the last ':'")
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise ValueError("an IPv6 address between [ and ]") from None
    elif not HOST.match(host):
        raise ValueError("a host name, an IPv4 address or [an IPv6 address] before the port")
    return text


Address = Annotated[StrictStr, AfterValidator(_address)]


class Task(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)  # launchers add their own keys (Vertex AI: `trial`)

    type: StrictStr
    index: StrictInt  # never true, 1.5 or "1": TensorFlow would read those as another task


class TfConfig(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)  # `environment`, `rpc_layer`, Vertex AI's `job`

    cluster: dict[StrictStr, list[Address]]
    task: Task


@dataclass(frozen=True)
class Role:
    """This process's place in a TF_CONFIG cluster (one worker without TF_CONFIG)."""

    task_type: str = "worker"
    task_id: int = 0
    workers: int = 1  # tasks that train: workers plus the chief
    chief: bool = True  # writes the run folder
    # Where the tasks listen, for messages and the port check (not part of the role's identity):
    addresses: tuple[str, ...] = field(default=(), compare=False)  # the training tasks', chief first
    address: str = field(default="", compare=False)  # this task's own `host:port`, which TensorFlow's server binds
    where: str = field(default="", compare=False)  # where that address is in TF_CONFIG (`cluster.worker.0`)

    def waiting(self, missing: list[str]) -> str:
        """The line a worker prints once when other workers have not come yet."""
        return (f"multi_worker: {self.name} is waiting for {len(missing)} of the {self.workers} workers of "
                f"TF_CONFIG's cluster ({', '.join(self.addresses)}) to start: {', '.join(missing)}")

    @property
    def name(self) -> str:
        return f"{self.task_type} {self.task_id}"


def refused(what: str, received: str, expected: str) -> SpecError:
    """One line: TF_CONFIG, where in it, what was received and what was expected."""
    return SpecError([Diagnostic("TF_CONFIG", None, f"{what}: received {received}; expected {expected}")])


def read_role(environ: dict[str, str] | None = None) -> Role:
    """TF_CONFIG as TensorFlow reads it: a `chief` task, if named, is the chief; otherwise worker 0 is."""
    text = (environ if environ is not None else os.environ).get("TF_CONFIG")
    if text is None:
        return Role()
    config = parse(text)
    cluster, task = config.cluster, config.task
    chief = task.type == "chief" or (task.index == 0 and not cluster.get("chief"))
    addresses = tuple(address for job in TRAINING_JOBS for address in cluster.get(job, []))
    return Role(task.type, task.index, len(addresses), chief, addresses, cluster[task.type][task.index],
                f"cluster.{task.type}.{task.index}")


def parse(text: str) -> TfConfig:
    """TF_CONFIG checked whole: its JSON, its shape, every address, and the task against the cluster."""
    if not text.strip():  # set but empty: TensorFlow's reader fails on it (json.loads(""))
        raise refused("the whole value", f"{text!r} (set, but empty)", "no TF_CONFIG at all for one worker, or a JSON "
                      "object such as " + EXAMPLE)
    if len(text) > MAX_TF_CONFIG:
        raise refused("the whole value", f"{len(text)} characters", f"at most {MAX_TF_CONFIG} (Linux passes no "
                      "longer environment string to a program), shaped like " + EXAMPLE)
    try:
        config = TfConfig.model_validate_json(text)
    except ValidationError as exc:
        raise _first(exc) from None
    _check(config)
    return config


def _first(exc: ValidationError) -> SpecError:
    """The first problem pydantic found, in specgen's words (and how many more there are)."""
    errors = exc.errors(include_url=False)
    error, more = errors[0], f" ({len(errors) - 1} more problem(s) after this one)" if len(errors) > 1 else ""
    loc = [str(part) for part in error["loc"]]
    where = ".".join(loc) or "the whole value"
    if error["type"] == "json_invalid":
        return refused("the whole value", f"text that is not JSON ({error['msg'].removeprefix('Invalid JSON: ')})",
                       "a JSON object such as " + EXAMPLE)
    if error["type"] == "missing":
        return refused(where, "nothing (the key is missing)", _EXPECTED.get(loc[-1], "the key") + more)
    return refused(where, describe(error.get("input")), _expected(loc, error) + more)


_EXPECTED = {
    "cluster": 'an object of job name to a list of "host:port" addresses, such as {"worker": ["host0:12345"]}',
    "task": 'an object such as {"type": "worker", "index": 0}',
    "type": "a job name of the cluster (a string)",
    "index": "an integer, the task's position in its job's list (from 0)",
}


def _expected(loc: list[str], error: Any) -> str:
    if error["type"] == "value_error":  # an address: the validator says which part is wrong
        return str(error["ctx"]["error"])
    if len(loc) >= 2 and loc[0] == "cluster":
        return 'a list of "host:port" addresses' if len(loc) == 2 else 'a "host:port" address (a string)'
    return _EXPECTED.get(loc[-1] if loc else "", "a JSON object such as " + EXAMPLE)


def _check(config: TfConfig) -> None:
    """What one field cannot say alone: known jobs, one chief, unique addresses, the task inside its job."""
    cluster, task = config.cluster, config.task
    if unknown := [job for job in cluster if job not in JOBS]:
        raise refused("cluster", f"the job {safe_repr(unknown[0])}", f"the jobs of MultiWorkerMirroredStrategy, "
                      f"{one_of(JOBS)} (specgen trains no parameter servers)")
    for job in ("chief", "evaluator"):
        if len(cluster.get(job, [])) > 1:
            raise refused(f"cluster.{job}", f"{len(cluster[job])} addresses", "at most one (TensorFlow's rule)")
    seen: set[str] = set()
    for job, addresses in cluster.items():
        for index, address in enumerate(addresses):
            if address in seen:
                raise refused(f"cluster.{job}.{index}", safe_repr(address), "an address no other task has (two "
                              "tasks cannot listen on one port)")
            seen.add(address)
    if task.type not in TRAINING_JOBS:
        raise refused("task.type", safe_repr(task.type), "'worker' or 'chief': specgen trains with "
                      "MultiWorkerMirroredStrategy, whose tasks are workers and an optional chief (no parameter "
                      "servers or evaluators)")
    tasks = cluster.get(task.type, [])
    if not tasks:
        raise refused("task.type", safe_repr(task.type), f"a job the cluster lists ({one_of(cluster) or 'none'} "
                      "there)")
    if not 0 <= task.index < len(tasks):
        raise refused("task.index", safe_repr(task.index), f"an index from 0 to {len(tasks) - 1} (the "
                      f"{task.type!r} job lists {len(tasks)} address(es))")


def check_port(role: Role) -> None:
    """This task's port must be free here: TensorFlow's gRPC server binds it on every interface when the strategy
    starts, and a port in use ended in a traceback ("Could not start gRPC server") after TensorFlow started.
    SO_REUSEADDR, as gRPC sets it: a port in TIME_WAIT (a worker just relaunched) is free, a listening one is not."""
    port = int(role.address.rpartition(":")[2]) if role.address else 0
    if not port:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError as exc:
            raise port_in_use(role, os.strerror(exc.errno) if exc.errno else str(exc)) from None


PEER_POLL = 0.5  # seconds between two looks at the workers that have not come yet
HELLO = b"specgen-cluster "  # what a waiting worker answers on its port: this, then its cluster's addresses (JSON)


def rendezvous(role: Role) -> None:
    """Wait, in Python, until every other training task's port answers, before TensorFlow's start blocks in C++.

    MultiWorkerMirroredStrategy's start waits for every worker inside C++ (the GIL held, its own SIGTERM handler
    installed): a worker whose peers never came could only be killed. Here each worker listens on its own port
    (which checks that it is free) and connects to the others' until all answer, so the wait is where a stop
    signal is acted on (interrupt.stoppable) and one line says what it waits for. A peer still waiting answers
    with its cluster: a different one is refused here (TensorFlow would fail at the first collective instead).
    """
    if role.workers < 2:
        check_port(role)
        return
    listener = _listen(role)
    waiting, said = [a for a in role.addresses if a != role.address], False
    try:
        while waiting:
            waiting = [address for address in waiting if not _answers(address, role)]
            if waiting and not said:
                print(role.waiting(waiting), flush=True)
                said = True
            _serve(listener, role, PEER_POLL if waiting else 2 * PEER_POLL)  # then a moment for the slower peers
    finally:
        listener.close()


def _listen(role: Role) -> socket.socket:
    port = int(role.address.rpartition(":")[2])
    try:  # SO_REUSEADDR, as gRPC: TIME_WAIT is free. On every interface, IPv6 too where the system has both, as
        # gRPC binds [::]: a TF_CONFIG naming a peer by an IPv6 address must reach this listener as it will gRPC's.
        if socket.has_dualstack_ipv6():
            listener = socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
        else:
            listener = socket.create_server(("0.0.0.0", port))
    except OSError as exc:
        raise port_in_use(role, os.strerror(exc.errno) if exc.errno else str(exc)) from None
    listener.setblocking(False)
    return listener


def _serve(listener: socket.socket, role: Role, seconds: float) -> None:
    """Answer the peers that connect during `seconds` with this worker's cluster, and check theirs."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if select.select([listener], [], [], left)[0]:
            try:
                peer, address = listener.accept()
                with peer:
                    host = address[0].removeprefix("::ffff:")  # an IPv4 peer on the dual-stack listener
                    _compare(_exchange(peer, role), f"{host} (connecting to this one)", role)
            except OSError:  # the peer went away meanwhile: it connects again
                continue


def _exchange(peer: socket.socket, role: Role) -> bytes:
    """Send this worker's cluster, read the other side's line (nothing from TensorFlow's server)."""
    peer.settimeout(1.0)
    text = b""
    with contextlib.suppress(OSError):
        peer.sendall(HELLO + json.dumps(list(role.addresses)).encode() + b"\n")
        while not text.endswith(b"\n") and len(text) < MAX_TF_CONFIG and (chunk := peer.recv(4096)):
            text += chunk
    return text


def _compare(text: bytes, address: str, role: Role) -> None:
    """Refused when the other side answered with a cluster other than this worker's."""
    if not text.startswith(HELLO):  # anything else: TensorFlow's server, already started
        return
    with contextlib.suppress(ValueError):
        theirs = json.loads(text[len(HELLO):])
        if theirs != list(role.addresses):
            raise refused("cluster", f"{len(role.addresses)} training tasks here ({', '.join(role.addresses)}), "
                          f"while the task at {address} lists {len(theirs)} ({', '.join(map(str, theirs))})",
                          "the same cluster in every worker's TF_CONFIG: give every worker the same one")


def _answers(address: str, role: Role) -> bool:
    """Whether the task at `address` listens (waiting here, or TensorFlow's server already); refused when it
    answers with a cluster other than this worker's."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0) as peer:
            text = _exchange(peer, role)
    except OSError:  # not listening yet, or its name does not resolve yet (a pod still starting)
        return False
    _compare(text, address, role)
    return True


def port_in_use(role: Role, why: str) -> SpecError:
    return refused(role.where, f"{role.address}, whose port cannot be bound on this machine ({why}: another "
                   "process listens there)", f"a free port for {role.name}: stop that process, or give this task "
                   "another port in every worker's TF_CONFIG")


def spec_strategy(ir: ModelIR) -> str:
    """The strategy the spec declares (train.distribute.strategy; default without a train section)."""
    training = ir.training
    train = training.train if training is not None else None
    return distribute.of(train).strategy if train is not None else "default"


def check_early(strategy: str) -> None:
    """TF_CONFIG read before TensorFlow starts, when the run is multi-worker: a refusal costs no TensorFlow
    start and happens before anything is written (`distribute.start` reads it again for the run)."""
    if strategy == "multi_worker":
        read_role()


def check_one_cpu_replica(loaded: LoadedSpec, ir: ModelIR) -> None:
    """multi_worker on machines without GPUs: TensorFlow's MultiWorkerMirroredStrategy runs one replica per worker
    on its CPU (its local devices are the GPUs, or the worker's one CPU device: no logical split is used), so
    `train.distribute.cpu_devices` cannot add replicas there. A split asked for is refused, not ignored: the global
    batch would split among fewer replicas than the spec says, and per-replica batch norm would see other slices."""
    training = ir.training
    if training is None or training.train is None or (devices := distribute.cpu_devices(training.train)) <= 1:
        return
    raise SpecError([loaded.diagnostic(("train", "distribute", "cpu_devices"), (
        f"cpu_devices {devices} splits the CPU for the mirrored strategy only: TensorFlow's multi_worker strategy "
        "runs one replica per worker on a machine without GPUs; expected 1 under multi_worker (more replicas: more "
        "workers), or --strategy mirrored"))])


def check_replicas(loaded: LoadedSpec, strategy: str, count: int, ir: ModelIR) -> None:
    """What a distributed run of the spec needs, checked without TensorFlow (by `specgen train` once its
    strategy knows `count`, and by `--emit tfjob` before it writes a job that could only fail)."""
    training = ir.training
    if training is None or training.train is None:
        return
    if (why := compat.refusal(ir, "distribute")) is not None:
        raise SpecError([loaded.diagnostic(("train", "distribute", "strategy"), why)])
    batch = training.train.batch_size
    if batch is None:
        raise SpecError([loaded.diagnostic(("train", "batch_size"), compat.message(
            "distribute", "full_batch", strategy=strategy, replicas=count))])
    if batch % count:
        lower, higher = batch // count * count, (batch // count + 1) * count
        fits = f"{lower} or {higher}" if lower else str(higher)
        message = (f"train.batch_size {batch} is the global batch and must split evenly among the {count} "
                   f"replicas of the {strategy} strategy; use {fits}")
        raise SpecError([loaded.diagnostic(("train", "batch_size"), message)])
