"""`specgen sweep SPEC [-o DIR] [--trials N] [--parallel P] [--storage URL] [--set KEY=VALUE]...` and
`specgen sweep SPEC --emit katib --image IMAGE [...] [-o FILE]` (specgen/commands/sweep.py holds the flags).

Everything a user can get wrong is checked before the sweep folder is made or a trial starts, in this order:
the spec (with the sweep's own `--set`s), its `sweep` section, the searched keys and values (space.py), that
the spec trains and logs the metric, the flags, and the storage. Then the study is opened (made on first use)
and, when trials are tracked, the MLflow store and experiment (once, here: _prepare_tracking); then the trials run.
A sweep that was stopped continues where it stopped when the same command runs again. Ctrl-C and SIGTERM stop it
alike (driver.py): the summary, then one line on stderr naming the signal, and exit status 130 or 143.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
from pathlib import Path
from typing import Any

from specgen.diagnostics import Diagnostic, SpecError
from specgen.runtime.interrupt import exit_status
from specgen.spec.load import LoadedSpec
from specgen.sweep.errors import SweepUsageError, need_optuna

KATIB_FLAGS = ("image", "workers", "cpu", "memory", "gpus", "namespace")
# A namespace is an RFC 1123 label (Kubernetes' validation of metadata.namespace): kubectl refuses any other at apply.
NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def cmd_sweep(args: argparse.Namespace) -> int:
    from specgen.ir.resolve import build_ir
    from specgen.spec.overrides import load_with_overrides
    from specgen.sweep.space import check_metric, parameters

    _check_flags(args)  # a command-line mistake first, as argparse's own: before the spec is read
    loaded = load_with_overrides(args.spec, args.set)
    sweep = loaded.spec.sweep
    if sweep is None:
        raise SpecError([Diagnostic(loaded.display, None, "the spec has no 'sweep' section; expected one naming "
                                    "the metric, the direction and the space to search (docs/sweeps.md)")])
    params = parameters(loaded, list(args.set))
    ir = build_ir(loaded)
    training = ir.training
    if training is None or not training.can_train or "train" not in training.data:
        raise SpecError([Diagnostic(loaded.display, None, "a sweep trains the spec: it needs the 'loss', "
                                    "'optimizers', 'train' and 'data.train' sections")])
    check_metric(loaded, sweep, ir)
    if args.emit == "katib":
        from specgen.sweep.katib import emit

        return emit(args, loaded, ir, params)
    return _run(args, loaded, params)


def _check_flags(args: argparse.Namespace) -> None:
    """Flags that do not go together: one usage line, exit 2 (SweepUsageError is a UsageError)."""
    if args.emit == "katib":
        if args.image is None:
            raise SweepUsageError("--emit katib: --image is required: the container image that holds specgen, "
                                  "TensorFlow and the spec (e.g. --image registry/train:1.0)")
        if args.track is not None:
            raise SweepUsageError("--track goes with a local sweep; a Katib trial runs in its pod: track it with "
                                  "train.tracking.mlflow in the spec (docs/tracking.md)")
        if args.storage is not None:  # Katib keeps its own trials: a storage given here would be ignored
            raise SweepUsageError("--storage goes with a local sweep; Katib keeps the trials of its Experiment "
                                  "itself")
        if args.namespace is not None and not NAMESPACE.fullmatch(args.namespace):
            raise SweepUsageError(f"--namespace {args.namespace!r}: expected a Kubernetes namespace: 1 to 63 lower-case "
                                  "letters, digits and '-', starting and ending with a letter or digit (RFC 1123); "
                                  "leave the flag out for kubectl's own")
        return
    for flag in KATIB_FLAGS:
        if getattr(args, flag) is not None:
            raise SweepUsageError(f"--{flag} goes with --emit katib; a local sweep takes -o, --trials, "
                                  "--parallel, --storage, --track and --set")


def _run(args: argparse.Namespace, loaded: LoadedSpec, params: list[Any]) -> int:
    from specgen.ir.training.build import run_folder
    from specgen.sweep import storage as stores
    from specgen.sweep.claim import ownerless_grace
    from specgen.sweep.driver import Runner
    from specgen.sweep.membership import check_folder, check_study
    from specgen.sweep.plan import Plan
    from specgen.sweep.study import check_own_folder, open_study, quiet_optuna, retry, sweep_folder
    from specgen.sweep.summary import hparams_config, lines, render, rows

    track = None
    if args.track is not None:
        from specgen.tracking import parse_track

        track = parse_track(args.track)  # one line naming the flag, before any trial
    from specgen.tracking import check_target

    check_target(loaded, track)
    need_optuna()
    ownerless_grace()  # a bad SPECGEN_SWEEP_OWNERLESS: one line before the sweep folder is made
    quiet_optuna()
    sweep = loaded.spec.sweep
    assert sweep is not None
    given = args.output if args.output is not None else Path(f"{run_folder(loaded)}-sweep")
    folder = sweep_folder(given)
    url = stores.checked_url(args.storage, folder)
    trials = args.trials if args.trials is not None else sweep.trials
    plan = Plan(loaded, sweep, params, folder, url, trials, args.parallel or 1, list(args.set), track, given)
    plan.data  # noqa: B018  (hashed here: a data file that cannot be read is one line before anything is written)
    from specgen.atomic import checked_folder

    if args.storage is not None:  # a storage elsewhere opens, and its study is checked, before the folder is made
        checked_folder(given.parent, given, create=False)  # not a link: its own study.db is read first
        check_own_folder(plan)
        storage = stores.open_storage(url, retry)
        check_study(plan, storage)
        check_folder(plan, storage, url)
    checked_folder(given.parent, given, create=True)  # a link or a file there is refused, not followed
    if args.storage is None:  # in the folder: a study there is checked as it opens, and the folder existed then
        storage = stores.open_storage(url, retry)
        check_folder(plan, storage, url)
    notes: list[str] = []
    study = open_study(plan, storage, notes.append)
    print(_header(plan, len(study.get_trials(deepcopy=False))), *notes, sep="\n")
    _prepare_tracking(loaded, track)
    hparams_config(plan, folder)
    runner = Runner(plan, storage, print)
    finished = runner.sweep(study)
    found = rows(study)
    text = "\n".join(lines(plan, found))
    _write(folder / "summary.txt", text + "\n")  # before printing: a reader gone (EPIPE) still leaves them
    drawn = _has_matplotlib()
    if drawn:
        _write(folder / "sweep.svg", render(plan, found))
    if runner.failure is not None and runner.gone:  # cli.py exits 141, quietly, as for every command
        raise runner.failure
    print(text)
    if drawn:
        print(f"wrote {plan.shown(folder / 'summary.txt')} and {plan.shown(folder / 'sweep.svg')}")
    if runner.failure is not None:  # a worker's error: its trials were stopped and queued again
        raise _stopped_by(runner.failure, plan)
    if not finished:
        signum = runner.signum or signal.SIGINT
        how = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
        print(f"specgen sweep: {how}; the trials it stopped run again when the same command continues the "
              f"sweep (study '{plan.study_name}' in {stores.masked(url)})", file=sys.stderr)
        return exit_status(signum)
    return 0 if any(r.state == "finished" for r in found) else 1


def _stopped_by(exc: BaseException, plan: Any) -> BaseException:
    """What a worker's error ends the sweep with: an environment problem (a trial's log that cannot be opened, a
    process that cannot start) as one line saying the stopped trials run again; standard output's own error, a
    specgen error and a bug (seen whole) as they are."""
    from specgen.atomic import describe
    from specgen.errors import SpecgenError
    from specgen.sweep import storage as stores

    if not isinstance(exc, OSError) or getattr(exc, "specgen_stdout", False):
        return exc
    if isinstance(exc.filename, str):
        exc.filename = plan.shown(exc.filename)
    return SpecgenError(f"sweep: stopped by an error: {describe(exc)}; the trials it stopped run again when the "
                        f"same command continues the sweep (study '{plan.study_name}' in {stores.masked(plan.url)})")


def _prepare_tracking(loaded: LoadedSpec, track: str | None) -> None:
    """Open the MLflow store and the trials' experiment here, once, before any trial: parallel trials that each
    opened a new SQLite store would run MLflow's migrations at the same moment and break each other. The trials
    take the same target: `name` and `train.tracking` cannot be searched (space.py RESERVED)."""
    from specgen.tracking import shown_uri, target

    where = target(loaded, track)
    if where is None:
        return
    from specgen.tracking.mlflow import prepare

    problem = prepare(where)
    if problem is not None:  # tracking never stops a run: each trial tries again, and the sweep shows its warning
        print(f"specgen sweep: warning: MLflow tracking at {shown_uri(where.uri)} failed ({problem}); the trials "
              "try it again, each on its own", file=sys.stderr)


def _header(plan: Any, existing: int) -> str:
    from specgen.sweep import storage as stores

    sweep = plan.sweep
    pruner = sweep.pruner if isinstance(sweep.pruner, str) else sweep.pruner.kind
    where = f"study '{plan.study_name}' in {stores.masked(plan.url)}"
    so_far = f" ({existing} trial(s) there already)" if existing else ""
    return (f"sweep {plan.study_name}: {plan.budget()} trials of {sweep.metric} ({sweep.direction}), {sweep.sampler} "
            f"sampler, pruner {pruner}, {plan.parallel} at a time, into {plan.shown(plan.folder)}; {where}{so_far}")


def _write(path: Path, content: str | bytes) -> None:
    from specgen.atomic import write_atomic

    write_atomic(path, content, fsync=False)


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True
