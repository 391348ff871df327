"""`specgen train SPEC [--epochs N | --steps N] [--resume ...] [--set K=V]...`, `--probe`, and `--emit tfjob`.

TensorFlow is imported only once the spec has been read and checked; `--emit tfjob` imports none at all.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from specgen.commands.common import InputPath, OutputFile, nonnegative_int
from specgen.diagnostics import Diagnostic, SpecError
from specgen.errors import UsageError
from specgen.extras import need
from specgen.paths import shown

if TYPE_CHECKING:
    from specgen.runtime.commands.tfjob import Job
    from specgen.spec.load import LoadedSpec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", action=InputPath)
    limit = parser.add_mutually_exclusive_group()
    limit.add_argument("--epochs", type=nonnegative_int, help="run N more passes over the training data")
    limit.add_argument("--steps", type=nonnegative_int, help="run N more optimizer updates")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--resume", action="store_true", help="continue from the newest checkpoint of the run folder")
    start.add_argument("--resume-from", action=InputPath, metavar="CKPT", help="continue from this ckpt-* folder")
    start.add_argument("--resume-or-start", action="store_true", help="continue from the newest checkpoint if the "
                       "run folder holds one, else start a new run (for launchers that restart workers)")
    start.add_argument("--fresh", action="store_true", help="start a new run even if the run folder holds one: "
                       "the old run is moved to <run>/previous-<n> (nothing is deleted)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a spec value, e.g. optimizers.head.learning_rate=1e-4 (repeatable)")
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    parser.add_argument("--strategy", choices=["default", "mirrored", "multi_worker"],
                        help="run under this tf.distribute strategy (replaces train.distribute.strategy; "
                             "docs/distributed.md)")
    parser.add_argument("--track", metavar="mlflow:URI", help="log params, metrics and exports to MLflow at URI "
                        "(replaces train.tracking.mlflow.uri; docs/tracking.md)")
    emit = parser.add_argument_group("--emit tfjob", "write a Kubeflow TFJob manifest for the spec instead of training")
    emit.add_argument("--emit", choices=["tfjob"])
    emit.add_argument("--image", help="container image holding specgen, TensorFlow and the spec")
    emit.add_argument("--workers", type=int, default=2, metavar="N",
                      help="the TFJob's Worker replicas, pods each running `specgen train SPEC` (default 2)")
    emit.add_argument("--cpu", help="CPU per worker, a Kubernetes quantity (4, 500m)")
    emit.add_argument("--memory", help="memory per worker, a Kubernetes quantity (16Gi)")
    emit.add_argument("--gpus", type=int, default=0, help="GPUs per worker (nvidia.com/gpu)")
    emit.add_argument("--volume", metavar="CLAIM:PATH", help="a PersistentVolumeClaim every worker mounts at PATH "
                      "(the run folder must be on it)")
    emit.add_argument("-o", "--output", action=OutputFile, help="write the manifest here (default: stdout)")
    parser.add_argument("--probe", action="store_true", help="run one batch and print each variable's gradient "
                        "and first-update size and each layer's activation mean/std; trains and writes nothing")


def run(args: argparse.Namespace) -> int:
    from specgen.spec.overrides import load_with_overrides

    if args.probe and (args.epochs is not None or args.steps is not None or args.fresh):
        print("specgen train: error: --probe runs one batch and trains nothing: it takes no --epochs, --steps "
              "or --fresh", file=sys.stderr)
        return 2
    track = None
    if args.emit == "tfjob":
        _check_tfjob_flags(args)  # command-line mistakes (exit 2) before the spec is read
    if args.track is not None:
        from specgen.tracking import parse_track

        track = parse_track(args.track)  # one line naming the flag, before the spec is read
    loaded = load_with_overrides(args.spec, args.set)
    if args.emit == "tfjob":
        return _emit_tfjob(args, loaded)
    need("specgen train", "tensorflow")  # one line naming the extra, not an ImportError's traceback after the build
    from specgen.tracking import check_target

    check_target(loaded, track)  # a store MLflow refuses whatever happens: one line, before TensorFlow starts
    from specgen.pipeline import build

    if args.probe:
        from specgen.runtime.commands.probe import checked_resume_from, run_probe  # imports TensorFlow: only now

        checkpoint = checked_resume_from(args.resume_from)  # its error before the spec's IR errors
        return run_probe(build(loaded), args.resume, checkpoint)
    from specgen.runtime.placement.cluster import check_early, spec_strategy

    # A bad TF_CONFIG is refused before TensorFlow starts; with --strategy given, before the spec's IR errors too.
    if args.strategy is not None:
        check_early(args.strategy)
    built = build(loaded)  # spec -> IR -> generated code, once for the command
    if args.strategy is None:
        check_early(spec_strategy(built.ir))
    from specgen.runtime.commands.train import Options, train  # imports TensorFlow: only now

    train(built, Options(epochs=args.epochs, steps=args.steps, resume=args.resume, resume_from=args.resume_from,
                         fresh=args.fresh, overrides=list(args.set), quiet=args.quiet,
                         strategy=args.strategy, resume_or_start=args.resume_or_start, track=track))
    return 0


def _job(args: argparse.Namespace) -> Job:
    from specgen.runtime.commands.tfjob import Job  # imports no TensorFlow

    assert args.image is not None  # _check_tfjob_flags
    return Job(args.spec.as_posix(), args.image, args.workers, args.cpu, args.memory, args.gpus, args.volume,
               list(args.set))


def _check_tfjob_flags(args: argparse.Namespace) -> None:
    """--emit tfjob's flags, as argparse checks its own: one `specgen train: error:` line, exit 2."""
    if args.track is not None:  # the manifest's workers run `specgen train SPEC`
        raise UsageError("train", f"--track {args.track}: --emit tfjob writes the workers' command, which takes no "
                                  "--track: put train.tracking.mlflow in the spec (docs/tracking.md)")
    if args.image is None:
        raise UsageError("train", "--emit tfjob: --image is required: the container image that holds specgen, TensorFlow "
                                  "and the spec (e.g. --image registry/train:1.0)")
    from specgen.runtime.commands.tfjob import check

    check(_job(args), "train")


def _emit_tfjob(args: argparse.Namespace, loaded: LoadedSpec) -> int:
    """`specgen train --emit tfjob`: the Kubeflow manifest, to --output or stdout; nothing is trained.

    Nothing is written for a job that could only fail: the spec must validate (the errors of `specgen
    validate`) and its batch must split among the job's replicas (the error every worker would print).
    """
    from specgen.atomic import write_atomic
    from specgen.ir.resolve import build_ir
    from specgen.runtime.commands.tfjob import render  # imports no TensorFlow
    from specgen.runtime.placement.cluster import check_one_cpu_replica, check_replicas

    ir = build_ir(loaded)  # the spec validates first: the errors of `specgen validate`
    training = ir.training
    if training is None or not training.can_train or "train" not in training.data:  # what `specgen train` says
        raise SpecError([Diagnostic(loaded.display, None, "training needs the 'loss', 'optimizers', 'train' and "
                                    "'data.train' sections")])
    job = _job(args)
    if not args.gpus:  # one replica per worker on its CPU: cluster.check_one_cpu_replica
        check_one_cpu_replica(loaded, ir)
    check_replicas(loaded, "multi_worker", args.workers * (args.gpus or 1), ir)  # a GPU per replica, else the CPU
    text = render(job, loaded.spec.name)
    if args.output is None:
        print(text, end="")
    else:
        write_atomic(args.output, text)
        print(f"wrote {shown(args.output)}: a TFJob of {args.workers} worker(s) for {loaded.spec.name}")
    return 0
