"""The `specgen` command line: validate, build, schema, report, graph, curves, data, train, sweep, restore-plan,
export, infer, serve, import.

Spec mistakes print `path:line:col: error: message` lines and exit 1; they never
print a traceback. `validate`, `build`, `schema`, `report`, `graph` and `curves` never import TensorFlow.
This module is the parser and the dispatch; the commands live in `spec_cli` (validate, build, schema,
report), `run_cli` (data, train, restore-plan, export, infer, serve, import), `specgen.sweep.command` (sweep) and
`specgen.pictures` (graph, curves).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from specgen import __version__, native_logs
from specgen.diagnostics import SpecError, one_line, report_lines
from specgen.errors import SpecgenError
from specgen.paths import shown
from specgen.render.errors import RenderError
from specgen.review.command import cmd_diff, parse_gates
from specgen.run_cli import cmd_data, cmd_export, cmd_import, cmd_infer, cmd_restore_plan, cmd_serve, cmd_train
from specgen.spec_cli import cmd_build, cmd_explain, cmd_report, cmd_schema, cmd_validate
from specgen.sweep.command import cmd_sweep


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1 (a count of examples)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"received {text!r}; expected a positive integer")
    return value


def _shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.split(","))
    except ValueError:
        dims = ()
    if not dims or min(dims) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers joined by commas (96,96,3); received {text!r}")
    return dims


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="specgen", description="Declarative TensorFlow training specs.")
    top.add_argument("--version", action="version", version=f"specgen {__version__}")
    top.add_argument("--verbose", action="store_true",
                     help="show TensorFlow's own start-up and INFO logs (hidden by default; so does setting "
                          "TF_CPP_MIN_LOG_LEVEL yourself)")
    sub = top.add_subparsers(dest="command", required=True)
    validate = sub.add_parser("validate", help="check spec files and report every problem")
    validate.add_argument("paths", nargs="*", type=Path)
    validate.add_argument("--strict", action="store_true", help="treat warnings as errors (exit 1)")
    validate.add_argument("--no-lint", action="append", default=[], choices=["init_scale"],
                          help="skip a lint (docs/spec.md#lints); repeatable")
    validate.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                          help="override a value of the merged spec, as train does (repeatable)")
    validate.add_argument("--resolved", action="store_true",
                          help="print the merged spec as YAML with the origin of every value (file:line:col, "
                               "--set or default)")
    validate.set_defaults(run=cmd_validate)
    explain = sub.add_parser("explain", help="print a key's final value and every place that set it")
    explain.add_argument("spec", type=Path)
    explain.add_argument("key", help="as in --set, with [NAME] for a named list item: layers[head/out].units")
    explain.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    explain.set_defaults(run=cmd_explain)
    diff = sub.add_parser("diff", help="what a change to a spec breaks and changes (no TensorFlow)")
    diff.add_argument("old", help="a spec file, REV:PATH (read through git) or a run folder")
    diff.add_argument("new", help="a spec file, REV:PATH or a run folder")
    diff.add_argument("--format", choices=["text", "json"], default="text")
    diff.add_argument("--map", action="store_true",
                      help="print the checkpoint map entries that make OLD's checkpoints restore into NEW")
    diff.add_argument("--fail-on", type=parse_gates, default=(), metavar="interface,checkpoint",
                      help="exit 1 when the change breaks served clients (interface) or old checkpoints (checkpoint)")
    diff.set_defaults(run=cmd_diff)
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
    report.add_argument("--sweep", type=Path, metavar="DIR", help="with --html: a folder of `specgen sweep` whose "
                        "trials the page lists and draws")
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
    sweep = sub.add_parser("sweep", help="search the spec's sweep space with Optuna, each trial an ordinary run "
                           "(docs/sweeps.md)")
    sweep.add_argument("spec", type=Path)
    sweep.add_argument("-o", "--output", type=Path, help="the sweep folder (default: the spec's run folder with "
                       "-sweep added); with --emit katib: the manifest (default: stdout)")
    sweep.add_argument("--trials", type=positive_int, metavar="N", help="trials in all (default: sweep.trials)")
    sweep.add_argument("--parallel", type=positive_int, default=1, metavar="P",
                       help="trials at a time, each its own `specgen train` process (default 1)")
    sweep.add_argument("--storage", metavar="URL", help="the Optuna storage: an RDB URL (sqlite:///study.db, "
                       "postgresql://...) or journal:PATH; processes that share it share the study (default: "
                       "SQLite in the sweep folder)")
    sweep.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a spec value in every trial (repeatable)")
    katib = sweep.add_argument_group("--emit katib", "write a Kubeflow Katib Experiment for the sweep instead of "
                                     "running it; each trial is the TFJob of `specgen train --emit tfjob`")
    katib.add_argument("--emit", choices=["katib"])
    katib.add_argument("--image", help="container image holding specgen, TensorFlow and the spec")
    katib.add_argument("--workers", type=positive_int, help="workers of each trial's TFJob (default 1)")
    katib.add_argument("--cpu", help="CPU per worker, a Kubernetes quantity (4, 500m)")
    katib.add_argument("--memory", help="memory per worker, a Kubernetes quantity (16Gi)")
    katib.add_argument("--gpus", type=int, help="GPUs per worker (nvidia.com/gpu)")
    katib.add_argument("--namespace", help="the Experiment's namespace (default: kubectl's)")
    sweep.set_defaults(run=cmd_sweep)
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
    export.add_argument("--force", action="store_true",
                        help="write the variant even when it is not faster, or unverified where its provider "
                             "cannot check it here (fp16 without CUDA): `specgen serve` then gates it at load")
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
    serve.add_argument("--grpc-port", type=int, metavar="N",
                       help="also serve the Open Inference Protocol over gRPC on this port (same host)")
    serve.add_argument("--model-control", choices=["none", "poll", "explicit"], default="none",
                       help="none: the models found at start; poll: rescan the repository every --poll-seconds; "
                       "explicit: load and unload through the repository API")
    serve.add_argument("--poll-seconds", type=float, default=15.0, metavar="S",
                       help="seconds between scans with --model-control poll")
    serve.add_argument("--workers", type=int, default=1, metavar="N",
                       help="server processes on the same ports, onnxruntime's threads split between them")
    serve.add_argument("--cuda-graphs", action="store_true",
                       help="on the CUDA provider, capture one CUDA graph per batch bucket (1, 2, 4, ... max_batch_size); "
                            "batches are padded up to their bucket (docs/serve.md)")
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
        with native_logs.quiet(args.verbose):
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

        print(f"specgen: error: {one_line(describe(exc))}", file=sys.stderr)
        return 1
    # One a command did not turn into a SpecError. one_line: a file name or a record's text inside the
    # message must not bring a line break, a terminal escape or a bidi override to the user's terminal.
    # A message of several problems (a repository's) keeps one line per problem.
    for line in str(exc).split("\n"):
        print(f"specgen: error: {one_line(line)}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
