"""This process's place in a multi-worker run, from TF_CONFIG as TensorFlow reads it (no TensorFlow import)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from specgen.diagnostics import Diagnostic, SpecError


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


def read_role(environ: dict[str, str] | None = None) -> Role:
    """TF_CONFIG as TensorFlow reads it: a `chief` task, if named, is the chief; otherwise worker 0 is."""
    text = (environ if environ is not None else os.environ).get("TF_CONFIG", "")
    if not text.strip():
        return Role()
    try:
        config = json.loads(text)
        cluster, task = config["cluster"], config["task"]
        task_type, task_id = str(task["type"]), int(task["index"])
        workers = len(cluster.get("worker", [])) + len(cluster.get("chief", []))
    except (ValueError, KeyError, TypeError) as exc:
        raise SpecError([Diagnostic("TF_CONFIG", None, f"not the JSON TensorFlow expects ({type(exc).__name__}: {exc}); "
                                    'expected {"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", '
                                    '"index": 0}}')]) from None
    if task_type not in ("worker", "chief"):
        raise SpecError([Diagnostic("TF_CONFIG", None, f"task type {task_type!r}: specgen trains with "
                                    "MultiWorkerMirroredStrategy, whose tasks are 'worker' and an optional 'chief' "
                                    "(no parameter servers or evaluators)")])
    chief = task_type == "chief" or (task_type == "worker" and task_id == 0 and not cluster.get("chief"))
    return Role(task_type, task_id, workers, chief)
