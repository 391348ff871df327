"""The commands that run models: `data`, `train`, `restore-plan`, `export`, `infer`, `serve` and `import`
(cli.py wires them).

Each maps its arguments onto the function that does the work (in `specgen.runtime.commands`,
`specgen.serve` or `specgen.importers.keras`; they take plain values, not an argparse namespace) and
prints the outcome. TensorFlow and onnxruntime are imported inside each
command, after the spec is read and checked, so a spec mistake is reported before TensorFlow starts and
`train --emit tfjob` imports no TensorFlow at all (tests/test_distributed_launch.py checks it).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from specgen.diagnostics import Diagnostic, SpecError
from specgen.paths import shown

if TYPE_CHECKING:
    from specgen.spec.load import LoadedSpec


def cmd_data(args: argparse.Namespace) -> int:
    from specgen.runtime.commands.data import run_data  # imports TensorFlow (it reads the data): only now

    return run_data(args.spec, args.stage)


def cmd_train(args: argparse.Namespace) -> int:
    from specgen.spec.overrides import load_with_overrides

    if args.probe and (args.epochs is not None or args.steps is not None or args.fresh):
        print("specgen train: error: --probe runs one batch and trains nothing: it takes no --epochs, --steps "
              "or --fresh", file=sys.stderr)
        return 2
    loaded = load_with_overrides(args.spec, args.set)
    if args.emit == "tfjob":
        return _emit_tfjob(args, loaded)
    if args.probe:
        from specgen.runtime.commands.probe import run_probe  # imports TensorFlow: only now

        return run_probe(loaded, args.resume, args.resume_from)
    from specgen.ir.resolve import build_ir
    from specgen.runtime.placement.cluster import check_early

    # The IR is built once for the command; with --strategy given, TF_CONFIG is checked before it (its errors first).
    ir = build_ir(loaded) if args.strategy is None else None
    check_early(loaded, args.strategy, ir)  # a bad TF_CONFIG is refused before TensorFlow starts
    from specgen.runtime.commands.train import Options, train  # imports TensorFlow: only now

    train(loaded, Options(epochs=args.epochs, steps=args.steps, resume=args.resume, resume_from=args.resume_from,
                          fresh=args.fresh, overrides=list(args.set), quiet=args.quiet,
                          strategy=args.strategy, resume_or_start=args.resume_or_start), ir)
    return 0


def _emit_tfjob(args: argparse.Namespace, loaded: LoadedSpec) -> int:
    """`specgen train --emit tfjob`: the Kubeflow manifest, to --output or stdout; nothing is trained.

    Nothing is written for a job that could only fail: the spec must validate (the errors of `specgen
    validate`) and its batch must split among the job's replicas (the error every worker would print).
    """
    from specgen.atomic import write_atomic
    from specgen.ir.resolve import build_ir
    from specgen.runtime.commands.tfjob import Job, check, render  # imports no TensorFlow
    from specgen.runtime.placement.cluster import check_replicas

    training = build_ir(loaded).training  # the spec validates first: the errors of `specgen validate`
    if training is None or not training.can_train or "train" not in training.data:  # what `specgen train` says
        raise SpecError([Diagnostic(loaded.display, None, "training needs the 'loss', 'optimizers', 'train' and "
                                    "'data.train' sections")])
    if args.image is None:
        raise SpecError([Diagnostic("specgen train --emit tfjob", None, "--image is required: the container image "
                                    "that holds specgen, TensorFlow and the spec (e.g. --image registry/train:1.0)")])
    job = Job(args.spec.as_posix(), args.image, args.workers, args.cpu, args.memory, args.gpus, args.volume,
              list(args.set))
    check(job)
    cpus = training.train.distribute.cpu_devices if training.train is not None else 1
    check_replicas(loaded, "multi_worker", args.workers * (args.gpus or cpus))  # a GPU per replica, else a CPU
    text = render(job, loaded.spec.name)
    if args.output is None:
        print(text, end="")
    else:
        write_atomic(args.output, text)
        print(f"wrote {shown(args.output)}: a TFJob of {args.workers} worker(s) for {loaded.spec.name}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from specgen.spec.load import load_spec

    loaded = load_spec(args.spec)
    from specgen.runtime.commands.export import export  # imports TensorFlow: only now
    from specgen.runtime.precision.step import PrecisionRequest

    request = PrecisionRequest(args.precision, args.calibration, args.force, args.provider)
    report = export(loaded, args.checkpoint, args.output, triton=args.triton, precision=request)
    nodes = sum(report["nodes"].values())
    if report["restore"] is None:
        print(f"exported {shown(args.output / 'model.onnx')}: {nodes} nodes, opset {report['opset']}, "
              f"{report['weights']} weights from {shown(report['checkpoint'])}")
    else:  # no --checkpoint: say where each variable came from, as `specgen train` does for a restore
        restore = report["restore"]
        left = [p for p, o in restore["variables"].items() if o == "initialized"]
        print(f"exported {shown(args.output / 'model.onnx')}: {nodes} nodes, opset {report['opset']}, "
              f"weights from the restore plan of {shown(args.spec)}")
        print(f"restore: {restore['summary']}" + (f"; initialized: {', '.join(left)}" if left else ""))
    from specgen.report.export_lines import export_lines

    print("\n".join(export_lines(report)))
    if report["precision"]["precision"] != "fp32":
        from specgen.report.export_lines import variant_lines

        print("\n".join(variant_lines(shown(args.output), report["precision"])))
    if "triton" in report:
        print(f"triton model repository: {shown(report['triton'])}")
    return 0


def cmd_restore_plan(args: argparse.Namespace) -> int:
    from specgen.runtime.commands.restore import run_restore_plan  # imports TensorFlow: only now

    return run_restore_plan(args.spec, args.from_)


def cmd_infer(args: argparse.Namespace) -> int:
    from specgen.runtime.commands.infer import infer

    return infer(args.model, args.input, args.output, args.provider, args.feed, args.labels)


def cmd_serve(args: argparse.Namespace) -> int:
    from specgen.serve import run_server

    return run_server(args.repo, args.host, args.port, args.provider, queue_size=args.queue_size,
                      batching=not args.no_batching, threads=args.threads, log_level=args.log_level,
                      header_timeout=args.header_timeout, body_timeout=args.body_timeout,
                      max_connections=args.max_connections, grpc_port=args.grpc_port,
                      model_control=args.model_control, poll_seconds=args.poll_seconds, workers=args.workers,
                      cuda_graphs=args.cuda_graphs)


def cmd_import(args: argparse.Namespace) -> int:
    from specgen.importers.keras import import_keras  # TensorFlow only for constructor names

    result = import_keras(args.source, args.output, weights=args.weights, input_shape=args.input_shape,
                          classes=args.classes, collections=args.collections)
    if result.weights_written is not None:
        print(f"wrote {shown(result.weights_written)} (weights drawn by Keras with seed 0)")
    print(f"wrote {shown(result.spec)}: {result.layers} layers, {result.variables} variables, restored from "
          f"{shown(result.weights)} ({result.mapped} map entries, {result.renamed} renames, "
          f"{result.dropped} dropped training-only arguments, listed in its header)")
    return 0
