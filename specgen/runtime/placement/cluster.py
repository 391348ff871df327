"""This process's place in a multi-worker run, from TF_CONFIG as TensorFlow reads it (no TensorFlow import).

TF_CONFIG is validated whole before TensorFlow sees it (TensorFlow's own reader ends in tracebacks on a
list for `cluster`, a string for a job, an index out of range, or crashes later on an address it cannot
parse): a pydantic model of the shape MultiWorkerMirroredStrategy needs, parsed by pydantic's JSON
reader (jiter: no Python recursion, a nesting limit, so 20,000 nested `[` is one error like any other).
Any problem is one line naming TF_CONFIG, what was received and what was expected.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
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
    return Role(task.type, task.index, sum(len(cluster.get(job, [])) for job in TRAINING_JOBS), chief)


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
        message = (f"train.batch_size {batch} is the global batch, which splits evenly among the {count} "
                   f"replicas of the {strategy} strategy; use {fits}")
        raise SpecError([loaded.diagnostic(("train", "batch_size"), message)])
