"""The `specgen` command line: validate, build, schema, report, graph, curves, data, train, restore-plan, export,
infer, serve, import.

Spec mistakes print `path:line:col: error: message` lines and exit 1; they never
print a traceback. `validate`, `build`, `schema`, `report`, `graph` and `curves` never import TensorFlow.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from specgen import __version__
from specgen.config import load_config
from specgen.diagnostics import Diagnostic, SpecError, report_lines
from specgen.errors import SpecgenError
from specgen.paths import shown
from specgen.render.errors import RenderError

if TYPE_CHECKING:
    from specgen.spec.load import LoadedSpec

SPEC_SUFFIXES = (".yaml", ".yml")


def expand(paths: Sequence[Path]) -> list[Path]:
    """Files as given; folders contribute their *.yaml / *.yml files, sorted."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.suffix in SPEC_SUFFIXES and p.is_file())
        else:
            found.append(path)
    return found


def _spec_paths(args: argparse.Namespace) -> list[Path]:
    paths = expand(args.paths or load_config().specs)
    if not paths:
        raise SpecError([Diagnostic("specgen", None, "no spec files given; pass paths or set "
                                    "[tool.specgen] specs in pyproject.toml")])
    return paths


def cmd_validate(args: argparse.Namespace) -> int:
    from specgen.ir.lints import init_scale_warnings
    from specgen.ir.resolve import build_ir
    from specgen.spec.load import load_spec

    problems: list[Diagnostic] = []
    warnings: list[Diagnostic] = []
    for path in _spec_paths(args):
        try:
            loaded = load_spec(path)
            ir = build_ir(loaded)
        except SpecError as exc:
            problems += exc.diagnostics
            continue
        skipped = {*args.no_lint, *ir.skip_lints}  # the command line's, and the spec's own `lints.skip`
        found = [] if "init_scale" in skipped else init_scale_warnings(loaded, ir)
        warnings += found
        if not (found and args.strict):
            print(f"ok: {shown(path)} ({ir.name}: {ir.layer_count} layers, {len(ir.variables)} variables)")
    if args.strict:  # warnings become errors: reported with them, exit 1
        problems += [replace(w, severity="error") for w in warnings]
    elif warnings:  # never the exit status: validate fails on errors only
        for line in report_lines(sorted(warnings, key=Diagnostic.sort_key)):
            print(line, file=sys.stderr)
        print(f"{len(warnings)} warning{'s' if len(warnings) != 1 else ''} (--strict makes them errors)",
              file=sys.stderr)
    if problems:
        raise SpecError(problems)
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from specgen.render.build import check, render_all, write
    from specgen.schema import schema_text

    config = load_config()
    out = args.out or config.out
    # `pictures` belongs to the project's own output folder: a build elsewhere (--out) writes code only
    pictures = config.pictures and Path(os.path.realpath(out)) == Path(os.path.realpath(config.out))
    outputs = render_all(_spec_paths(args), pictures)
    if args.check:
        reports = check(outputs, out)
        if config.schema is not None and not args.paths:
            reports += _schema_drift(config.schema, schema_text())
        for report in reports:
            print(report.rstrip("\n"))
        unsafe = sum(r.startswith("unsafe: ") for r in reports)
        if unsafe:
            print(f"specgen build --check: {unsafe} unsafe path(s) in the output folder; specgen neither reads "
                  "nor replaces them: remove them, then run `specgen build`", file=sys.stderr)
            return 1
        if reports:
            print(f"specgen build --check: {len(reports)} file(s) out of date; run `specgen build`", file=sys.stderr)
            return 1
        print(f"ok: {sum(len(o.files) for o in outputs)} generated files in {shown(out)} are up to date")
        return 0
    written = write(outputs, out)
    for path in written:
        print(f"wrote {shown(path)}")
    print(f"built {len(outputs)} spec(s) into {shown(out)}: {len(written)} file(s) changed")
    return 0


def _schema_drift(target: Path, text: str) -> list[str]:
    """[] if `target` holds `text`; else one report line. Never reads through a link or a device."""
    from specgen.atomic import UnsafePathError, read_regular

    try:
        on_disk = read_regular(target)
    except UnsafePathError as exc:
        return [f"unsafe: {exc}"]
    return [] if on_disk == text.encode() else [f"drifted: {shown(target)} (run `specgen schema`)"]


def cmd_schema(args: argparse.Namespace) -> int:
    from specgen.atomic import write_atomic
    from specgen.schema import schema_text

    target = args.output or load_config().schema or Path("schemas/specgen.schema.json")
    text = schema_text()
    if args.check:
        drift = _schema_drift(target, text)
        for line in drift:
            print(line)
        if drift:
            return 1
        print(f"ok: {shown(target)} is up to date")
        return 0
    write_atomic(target, text)
    print(f"wrote {shown(target)}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from specgen.ir.resolve import build_ir
    from specgen.report import report
    from specgen.spec.load import load_spec

    if args.html or args.run_folder is not None or args.output is not None:
        from specgen.pictures.html_cli import run_html_report

        return run_html_report(args)
    paths = expand(args.paths)
    for path in paths:
        loaded = load_spec(path)
        ir = build_ir(loaded)
        measured = None
        if args.checkpoint is not None:  # only then TensorFlow (to read the checkpoint's masks)
            from specgen.runtime.pruning_state import checkpoint_sparsity

            measured = checkpoint_sparsity(loaded, ir, args.checkpoint, len(paths))
        print(report(ir, shown(path), loaded.spec.optimizers, measured))
    return 0


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
    from specgen.runtime.cluster import check_early

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
    from specgen.runtime.cluster import check_replicas
    from specgen.runtime.commands.tfjob import Job, check, render  # imports no TensorFlow

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


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1 (a count of examples)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"received {text!r}; expected a positive integer")
    return value


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
        from specgen.runtime.precision.step import summary_lines

        print("\n".join(summary_lines(shown(args.output), report["precision"])))
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
                      max_connections=args.max_connections)


def _shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.split(","))
    except ValueError:
        dims = ()
    if not dims or min(dims) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers joined by commas (96,96,3); received {text!r}")
    return dims


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


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="specgen", description="Declarative TensorFlow training specs.")
    top.add_argument("--version", action="version", version=f"specgen {__version__}")
    sub = top.add_subparsers(dest="command", required=True)
    validate = sub.add_parser("validate", help="check spec files and report every problem")
    validate.add_argument("paths", nargs="*", type=Path)
    validate.add_argument("--strict", action="store_true", help="treat warnings as errors (exit 1)")
    validate.add_argument("--no-lint", action="append", default=[], choices=["init_scale"],
                          help="skip a lint (docs/spec.md#lints); repeatable")
    validate.set_defaults(run=cmd_validate)
    build = sub.add_parser("build", help="render specs into generated/<name>/")
    build.add_argument("paths", nargs="*", type=Path)
    build.add_argument("--out", type=Path, help="output folder (default: generated/)")
    build.add_argument("--check", action="store_true", help="write nothing; print a diff and exit 1 on drift")
    build.set_defaults(run=cmd_build)
    schema = sub.add_parser("schema", help="write the JSON Schema for spec files")
    schema.add_argument("-o", "--output", type=Path)
    schema.add_argument("--check", action="store_true", help="exit 1 if the schema file is out of date")
    schema.set_defaults(run=cmd_schema)
    report = sub.add_parser("report", help="print variables, collections and FLOPs of specs")
    report.add_argument("paths", nargs="+", type=Path)
    report.add_argument("--checkpoint", type=Path, help="with one pruned spec: the sparsity of each mask in this "
                        "checkpoint (reads it with TensorFlow)")
    report.add_argument("--html", action="store_true", help="write one self-contained HTML page for one spec "
                        "(graph, tables, restore plan, curves, export lines) to -o")
    report.add_argument("--run", type=Path, metavar="RUN", dest="run_folder", help="with --html: the run folder whose curves and "
                        "export the page shows")
    report.add_argument("-o", "--output", type=Path, help="with --html: the page to write")
    report.set_defaults(run=cmd_report)
    data = sub.add_parser("data", help="print a spec's input pipeline as training runs it (reads the data)")
    data.add_argument("spec", type=Path)
    data.add_argument("--stage", choices=["train", "eval"], default="train", help="which data stage (default train)")
    data.set_defaults(run=cmd_data)
    train = sub.add_parser("train", help="train a spec with the generated TensorFlow code")
    train.add_argument("spec", type=Path)
    limit = train.add_mutually_exclusive_group()
    limit.add_argument("--epochs", type=int, help="run N more passes over the training data")
    limit.add_argument("--steps", type=int, help="run N more optimizer updates")
    start = train.add_mutually_exclusive_group()
    start.add_argument("--resume", action="store_true", help="continue from the newest checkpoint of the run folder")
    start.add_argument("--resume-from", type=Path, metavar="CKPT", help="continue from this ckpt-* folder")
    start.add_argument("--resume-or-start", action="store_true", help="continue from the newest checkpoint if the "
                       "run folder holds one, else start a new run (for launchers that restart workers)")
    start.add_argument("--fresh", action="store_true", help="start a new run even if the run folder holds one: "
                       "the old run is moved to <run>/previous-<n> (nothing is deleted)")
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a spec value, e.g. optimizers.head.learning_rate=1e-4 (repeatable)")
    train.add_argument("--quiet", action="store_true", help="no progress line")
    train.add_argument("--strategy", choices=["default", "mirrored", "multi_worker"],
                       help="run under this tf.distribute strategy (replaces train.distribute.strategy; docs/distributed.md)")
    emit = train.add_argument_group("--emit tfjob", "write a Kubeflow TFJob manifest for the spec instead of training")
    emit.add_argument("--emit", choices=["tfjob"])
    emit.add_argument("--image", help="container image holding specgen, TensorFlow and the spec")
    emit.add_argument("--workers", type=int, default=2, help="worker count (default 2)")
    emit.add_argument("--cpu", help="CPU per worker, a Kubernetes quantity (4, 500m)")
    emit.add_argument("--memory", help="memory per worker, a Kubernetes quantity (16Gi)")
    emit.add_argument("--gpus", type=int, default=0, help="GPUs per worker (nvidia.com/gpu)")
    emit.add_argument("--volume", metavar="CLAIM:PATH", help="a PersistentVolumeClaim every worker mounts at PATH "
                      "(the run folder must be on it)")
    emit.add_argument("-o", "--output", type=Path, help="write the manifest here (default: stdout)")
    train.add_argument("--probe", action="store_true", help="run one batch and print each variable's gradient "
                       "and first-update size and each layer's activation mean/std; trains and writes nothing")
    train.set_defaults(run=cmd_train)
    restore_plan = sub.add_parser("restore-plan", help="show where each model variable would be restored from")
    restore_plan.add_argument("spec", type=Path)
    restore_plan.add_argument("--from", dest="from_", type=Path, metavar="CKPT",
                              help="a checkpoint prefix, run folder or Keras weight file (.weights.h5, .keras, "
                              ".h5) to plan from, instead of the spec's checkpoint.restore")
    restore_plan.set_defaults(run=cmd_restore_plan)
    export = sub.add_parser("export", help="write model.onnx with trained weights from a checkpoint")
    export.add_argument("spec", type=Path)
    export.add_argument("--checkpoint", type=Path,
                        help="a run folder (its latest checkpoint), a ckpt-* folder or a checkpoint prefix; "
                        "without it, the spec's checkpoint.restore plan applied to fresh variables")
    export.add_argument("-o", "--output", type=Path, required=True, help="folder for model.onnx and export.json")
    export.add_argument("--triton", action="store_true", help="also write a Triton model repository there")
    export.add_argument("--precision", choices=["fp32", "fp16", "int8"],
                        help="also write model.fp16.onnx / model.int8.onnx, gated on accuracy and speed "
                             "(default: the spec's export.onnx.precision, fp32)")
    export.add_argument("--calibration", type=positive_int, metavar="N",
                        help="eval examples for int8 calibration (default 512, or the whole eval set when smaller)")
    export.add_argument("--force", action="store_true", help="write the variant even when it is not faster")
    export.add_argument("--provider", choices=["cpu", "cuda"], default="cpu",
                        help="where the variant is checked and timed: the provider that will run it")
    export.set_defaults(run=cmd_export)
    infer = sub.add_parser("infer", help="run an exported model with onnxruntime on arrays from an .npz")
    infer.add_argument("model", type=Path)
    infer.add_argument("--input", type=Path, required=True, help=".npz with one array per model input")
    infer.add_argument("--output", type=Path, help="write the outputs to this .npz")
    infer.add_argument("--provider", choices=["auto", "cuda", "cpu"], default="auto")
    infer.add_argument("--feed", action="append", default=[], metavar="INPUT=ARRAY",
                       help="take a model input from a differently named array (repeatable)")
    infer.add_argument("--labels", metavar="ARRAY", help="integer labels in the .npz: print the accuracy")
    infer.set_defaults(run=cmd_infer)
    serve = sub.add_parser("serve", help="serve a Triton-layout model repository over the Open Inference Protocol")
    serve.add_argument("repo", type=Path, help="REPO/<model>/config.pbtxt and REPO/<model>/<version>/model.onnx")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--provider", choices=["auto", "cuda", "cpu"], default="auto")
    serve.add_argument("--queue-size", type=int, metavar="N", help="waiting requests per model before 503 (default: the "
                       "config's default_queue_policy.max_queue_size, else 4 x max_batch_size)")
    serve.add_argument("--no-batching", action="store_true", help="run every request alone (no dynamic batching)")
    serve.add_argument("--threads", type=int, default=0, help="onnxruntime intra-op threads (0: its default)")
    serve.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default="info")
    serve.add_argument("--header-timeout", type=float, default=10.0, metavar="S",
                       help="seconds a request's headers may take to arrive (408 after)")
    serve.add_argument("--body-timeout", type=float, default=30.0, metavar="S",
                       help="seconds a request's body may take to arrive (408 after)")
    serve.add_argument("--max-connections", type=int, default=1000, metavar="N",
                       help="open connections at most (lowered to what ulimit -n allows)")
    serve.set_defaults(run=cmd_serve)
    imports = sub.add_parser("import", help="write a spec from another framework's model")
    frameworks = imports.add_subparsers(dest="framework", required=True)
    keras = frameworks.add_parser("keras", help="a .keras file, a legacy .h5 model file or a keras.applications name")
    keras.add_argument("source", help="model.keras, model.h5, or a constructor name such as ResNet50")
    keras.add_argument("-o", "--output", type=Path, required=True, help="the spec file to write")
    keras.add_argument("--weights", type=Path, help="restore from this weights file instead of the model's own")
    keras.add_argument("--input-shape", type=_shape, metavar="H,W,C", help="constructor input shape")
    keras.add_argument("--classes", type=int, metavar="N", help="constructor class count")
    keras.add_argument("--collections", choices=["stages"], help="add one collection per stage or nested model")
    keras.set_defaults(run=cmd_import)
    from specgen.pictures.curves_cli import add_parser as add_curves
    from specgen.pictures.graph_cli import add_parser as add_graph

    add_graph(sub)
    add_curves(sub)
    return top


def _quiet_broken_pipe() -> int:
    """stdout's reader went away (`specgen report | head`): exit quietly, the Python-docs way.

    Later writes (and the flush at exit) go to /dev/null instead of raising again; 141 is what
    a shell reports for a program stopped by SIGPIPE, so `set -o pipefail` scripts see it.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout without a file descriptor (tests capture it)
        pass
    return 141


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    gc.freeze()  # start-up objects are long-lived: keep full collections from rescanning them
    try:
        code = int(args.run(args))
        sys.stdout.flush()  # a closed pipe shows up here, inside the handlers, not at exit
        return code
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except (SpecgenError, OSError) as exc:  # the one place: every error meant for a person, never a traceback
        return _refused(exc)


def _refused(exc: SpecgenError | OSError) -> int:
    """Print why the command stopped, one line each; the exit status (3 for a specgen bug, else 1)."""
    if isinstance(exc, RenderError):
        print(f"specgen: internal error, nothing was written: {exc}\nPlease report it with the spec that "
              "caused it.", file=sys.stderr)
        return 3
    if isinstance(exc, SpecError):
        # Paths that runtime code resolved (run folders, checkpoints) print relative to the working directory.
        diagnostics = [replace(d, path=shown(d.path)) for d in exc.diagnostics]
        for line in report_lines(diagnostics):  # at most MAX_PER_FILE a file, then a count
            print(line, file=sys.stderr)
        count = len(exc.diagnostics)
        print(f"{count} error{'s' if count != 1 else ''} found", file=sys.stderr)
        return 1
    if isinstance(exc, OSError):
        # A user's environment (read-only or full disk, a link where a file goes, a missing
        # folder) is never a traceback: one line naming the file and what to do.
        from specgen.atomic import describe

        print(f"specgen: error: {describe(exc)}", file=sys.stderr)
        return 1
    print(f"specgen: error: {exc}", file=sys.stderr)  # one a command did not turn into a SpecError
    return 1


if __name__ == "__main__":
    sys.exit(main())
