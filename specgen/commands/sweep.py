"""`specgen sweep SPEC [-o DIR] [--trials N] [--parallel P] [--storage URL]` and `--emit katib` (specgen/sweep/)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from specgen.commands.common import InputPath, OutputFolder, positive_int

# At most this many trials at a time in one process: each is a `specgen train` process with TensorFlow (hundreds of
# MB and a thread pool of its own), so more outruns any one machine; more machines share a study (--storage).
MAX_PARALLEL = 64
MAX_TRIALS = 100_000  # sweep.trials' bound (sweep/spec.py, not imported: every command's flags load at start)


def _at_most(limit: int, why: str) -> Callable[[str], int]:  # a positive integer up to `limit`: one usage line past it
    def check(text: str) -> int:
        value = positive_int(text)
        if value > limit:
            raise argparse.ArgumentTypeError(f"received {text!r}; expected at most {limit:,} ({why})")
        return value

    return check


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", action=InputPath)
    parser.add_argument("-o", "--output", action=OutputFolder, help="the sweep folder (default: the spec's run folder with "
                        "-sweep added); with --emit katib: the manifest (default: stdout)")
    parser.add_argument("--trials", type=_at_most(MAX_TRIALS, "the bound of sweep.trials"), metavar="N",
                        help=f"trials in all, at most {MAX_TRIALS:,} (default: sweep.trials)")
    parser.add_argument("--parallel", type=_at_most(MAX_PARALLEL, "each is a TensorFlow process"), default=1,
                        metavar="P", help=f"trials at a time, each its own `specgen train` process, at most "
                        f"{MAX_PARALLEL} (default 1)")
    parser.add_argument("--storage", metavar="URL", help="the Optuna storage: an RDB URL (sqlite:///study.db, "
                        "postgresql://...) or journal:PATH; processes that share it share the study (default: "
                        "SQLite in the sweep folder)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a spec value in every trial (repeatable)")
    parser.add_argument("--track", metavar="mlflow:URI", help="log every trial to MLflow at URI, each trial a run "
                        "(docs/tracking.md)")
    katib = parser.add_argument_group("--emit katib", "write a Kubeflow Katib Experiment for the sweep instead of "
                                      "running it; each trial is the TFJob of `specgen train --emit tfjob`")
    katib.add_argument("--emit", choices=["katib"])
    katib.add_argument("--image", help="container image holding specgen, TensorFlow and the spec")
    katib.add_argument("--workers", type=positive_int, metavar="N",
                       help="Worker replicas of each trial's TFJob, pods each running the trial (default 1)")
    katib.add_argument("--cpu", help="CPU per worker, a Kubernetes quantity (4, 500m)")
    katib.add_argument("--memory", help="memory per worker, a Kubernetes quantity (16Gi)")
    katib.add_argument("--gpus", type=int, help="GPUs per worker (nvidia.com/gpu)")
    katib.add_argument("--namespace", help="the Experiment's namespace (default: kubectl's)")


def run(args: argparse.Namespace) -> int:
    from specgen.sweep.command import cmd_sweep

    return cmd_sweep(args)
