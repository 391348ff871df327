"""`specgen train --emit tfjob`: a Kubeflow TFJob manifest that runs the spec on N workers (no TensorFlow needed).

Kubeflow's training operator gives every pod of a TFJob a TF_CONFIG naming all workers, which is all
`specgen train --strategy multi_worker` needs (docs/distributed.md). Every worker runs the same command,
`--resume-or-start`, so that a job the operator restarts after a lost worker continues from the newest
checkpoint: the run folder (checkpoint.dir) must be on storage every worker sees, named by --volume.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from specgen import text
from specgen.errors import UsageError

# Kubernetes resource quantities: 4, 500m, 1.5, 16Gi, 512M.
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
# The training operator gives every worker a TF_CONFIG listing every worker's address,
# `<job>-worker-<i>.<namespace>.svc[.<cluster domain>]:<port>`: up to ~165 bytes with 63-character job and
# namespace names. One environment string is at most 128 KiB on Linux (and specgen refuses a longer
# TF_CONFIG), so about 790 workers is the most any TFJob could start; 512 stays clear of that whatever the
# names, and is more workers than one synchronous all-reduce job uses in practice.
MAX_WORKERS = 512
MAX_GPUS = 16  # per worker, i.e. per node: the largest GPU machines offer 8 or 16


@dataclass(frozen=True)
class Job:
    """What the flags of `specgen train --emit tfjob` say."""

    spec: str  # the spec's path as the container sees it (the working directory is the image's)
    image: str
    workers: int = 2
    cpu: str | None = None
    memory: str | None = None
    gpus: int = 0
    volume: str | None = None  # CLAIM:MOUNT_PATH, a PersistentVolumeClaim every worker mounts
    overrides: list[str] = field(default_factory=list)


def _name(spec_name: str, workers: int) -> str:
    """The TFJob's name from the spec name: the operator names each worker's Service `<name>-worker-<i>`, which
    must be an RFC 1035 label (63 characters at most, lower case, digits and '-', a letter first)."""
    room = 63 - len(f"-worker-{workers - 1}")  # a spec name starts with a letter (fields.base.Identifier)
    return re.sub(r"[^a-z0-9-]+", "-", spec_name.lower()).strip("-")[:room].rstrip("-") or "specgen"


def check(job: Job, command: str = "train") -> None:
    """Every flag checked, before the spec is read: a UsageError (exit 2, as argparse's own) naming the command
    the user ran (`train`, or `sweep` for --emit katib, whose trials are these TFJobs) and every flag that is
    wrong, in one line."""
    problems = []
    if not job.image.strip() or any(c.isspace() for c in job.image):
        problems.append(f"--image {job.image!r}: expected a container image reference such as registry/specgen:1.0")
    if not 1 <= job.workers <= MAX_WORKERS:
        problems.append(f"--workers {job.workers}: expected 1 to {MAX_WORKERS} (every worker's address goes into "
                        "each worker's TF_CONFIG, one environment string of at most 128 KiB)")
    if not 0 <= job.gpus <= MAX_GPUS:
        problems.append(f"--gpus {job.gpus}: expected 0 to {MAX_GPUS} (GPUs on one node)")
    for flag, value in (("--cpu", job.cpu), ("--memory", job.memory)):
        if value is not None and not QUANTITY.match(value):
            problems.append(f"{flag} {value!r}: expected a Kubernetes quantity such as 4, 500m or 16Gi")
    if job.volume is not None and not re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?:/\S*$", job.volume):
        problems.append(f"--volume {job.volume!r}: expected CLAIM:/mount/path (a PersistentVolumeClaim name and "
                        "where the workers mount it)")
    if problems:
        raise UsageError(command, "; ".join(problems))


def manifest(job: Job, spec_name: str) -> dict[str, Any]:
    """The TFJob as a mapping (key order as Kubernetes documents show it)."""
    check(job)
    command = ["specgen", "train", job.spec, "--strategy", "multi_worker", "--resume-or-start", "--quiet"]
    for override in job.overrides:
        command += ["--set", override]
    limits: dict[str, Any] = {}
    if job.cpu is not None:
        limits["cpu"] = job.cpu
    if job.memory is not None:
        limits["memory"] = job.memory
    if job.gpus:
        limits["nvidia.com/gpu"] = job.gpus
    container: dict[str, Any] = {"name": "tensorflow", "image": job.image, "command": command}  # the operator's name
    if limits:
        container["resources"] = {"limits": limits, "requests": dict(limits)}
    pod: dict[str, Any] = {"containers": [container]}
    if job.volume is not None:
        claim, mount = job.volume.split(":", 1)
        container["volumeMounts"] = [{"name": "runs", "mountPath": mount}]
        pod["volumes"] = [{"name": "runs", "persistentVolumeClaim": {"claimName": claim}}]
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": _name(spec_name, job.workers)},
        "spec": {
            # A lost worker fails every worker (one error line each); OnFailure restarts them, and
            # --resume-or-start continues from the newest checkpoint.
            "runPolicy": {"cleanPodPolicy": "None", "backoffLimit": 5},
            "tfReplicaSpecs": {
                "Worker": {"replicas": job.workers, "restartPolicy": "OnFailure", "template": {"spec": pod}},
            },
        },
    }


def render(job: Job, spec_name: str) -> str:
    """The manifest as YAML, deterministic (no timestamps), with a header saying how it was made."""
    manifest_text = yaml.safe_dump(manifest(job, spec_name), sort_keys=False, default_flow_style=False, width=120)
    # The spec path goes through the one header rule (text.header): a newline in it cannot start a YAML line.
    return (text.header(job.spec, "specgen train --emit tfjob") + "\n# Apply with `kubectl apply -f`. Worker 0 is "
            "the chief (TF_CONFIG, set by the training operator); checkpoint.dir must be on the volume.\n" + manifest_text)
