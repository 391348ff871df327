"""A sweep's trials as people read them: a table, the best trial's run folder and `--set` line, and a picture.

The table lists every trial (its values, the metric, its state, its time); the best trial is the complete one
with the best metric (the first of equals); its line `specgen train SPEC --set ...` reproduces it bit for bit
(the trial ran exactly that, in its own run folder). The picture has the metric over the trials (the best so far
as a line) and the metric against each searched key, drawn by matplotlib as `specgen curves` draws: a
deterministic SVG (docs/pictures.md). The files are written into the sweep folder: `summary.txt`, `sweep.svg`
and, for TensorBoard's HParams dashboard, the experiment's definition (an event file at the folder's top).
"""

from __future__ import annotations

import io
import math
import shlex
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specgen.paths import shown
from specgen.sweep.space import value_text
from specgen.text import printable, table

if TYPE_CHECKING:
    import optuna
    from matplotlib.figure import Figure

    from specgen.sweep.plan import Plan

STATES = {"COMPLETE": "finished", "PRUNED": "pruned", "FAIL": "failed", "RUNNING": "running", "WAITING": "queued"}


@dataclass(frozen=True)
class Row:
    """One trial as the summary shows it."""

    number: int
    state: str  # finished, pruned, failed, interrupted, running, queued
    value: float | None  # the metric: a finished trial's last value, a pruned trial's last reported one
    seconds: float | None
    values: dict[str, Any]
    folder: str | None
    overrides: tuple[str, ...]
    note: str = ""  # why a trial failed, or which trial it runs again, or that MLflow did not track it
    untracked: bool = False  # its tracker failed (driver.py Runner.untracked): the run is missing from MLflow


def rows(study: optuna.Study) -> list[Row]:
    found = []
    for trial in study.get_trials(deepcopy=False):
        attrs = trial.user_attrs
        state = "interrupted" if "interrupted" in attrs else STATES.get(trial.state.name, trial.state.name.lower())
        value = trial.value if trial.state.name == "COMPLETE" else (
            trial.intermediate_values[max(trial.intermediate_values)] if trial.intermediate_values
            and trial.state.name == "PRUNED" else None)
        note = "; ".join(filter(None, [
            str(attrs.get("error", "")), f"runs trial {attrs['retry_of']} again" if "retry_of" in attrs else "",
            "not tracked: MLflow failed" if "untracked" in attrs else ""]))
        found.append(Row(trial.number, state, value, attrs.get("seconds"), dict(trial.params), attrs.get("folder"),
                         tuple(attrs.get("overrides", ())), note, "untracked" in attrs))
    return found


def best(plan: Plan, found: list[Row]) -> Row | None:
    done = [r for r in found if r.state == "finished" and r.value is not None and math.isfinite(r.value)]
    if not done:
        return None
    sign = -1 if plan.sweep.direction == "maximize" else 1
    return min(done, key=lambda r: (sign * float(r.value), r.number))  # type: ignore[arg-type]


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return printable(value_text(value)) if value is not None else ""


def trials_table(plan: Plan, found: list[Row]) -> str:
    keys = [p.key for p in plan.params]
    header = ["trial", "state", plan.sweep.metric, "seconds", *keys, "note"]
    body = [[str(r.number), r.state, "" if r.value is None else f"{r.value:.4f}",
             "" if r.seconds is None else f"{r.seconds:.1f}", *(_number(r.values.get(k)) for k in keys),
             printable(r.note)[:120]] for r in found]
    return table(header, body, right={0, 2, 3})


def command_line(plan: Plan, row: Row) -> str:
    """`specgen train SPEC --set ...`: the best trial's run, in the spec's own run folder."""
    words = ["specgen", "train", shown(plan.loaded.path)]
    for text in [*plan.base, *row.overrides]:
        words += ["--set", text]
    return shlex.join(words)


def lines(plan: Plan, found: list[Row]) -> list[str]:
    counts = {state: sum(1 for r in found if r.state == state) for state in dict.fromkeys(r.state for r in found)}
    said = ", ".join(f"{n} {state}" for state, n in counts.items()) or "no trials yet"
    out = [trials_table(plan, found), "", f"{len(found)} trial(s): {said}"]
    untracked = [str(r.number) for r in found if r.untracked]
    if untracked:
        out.append(f"not tracked in MLflow: trial(s) {', '.join(untracked)} (the tracker failed; see each trial's log)")
    top = best(plan, found)
    if top is None:
        out.append(f"no trial finished with a value of {plan.sweep.metric}")
        return out
    out += [f"best: trial {top.number}, {plan.sweep.metric} {top.value:.4f}, run folder "
            f"{plan.shown(top.folder or '')}", f"reproduce: {command_line(plan, top)}"]
    return out


# --- the picture ------------------------------------------------------------------------------------------------


def figure(plan: Plan, found: list[Row]) -> Figure:
    from matplotlib.figure import Figure

    from specgen.pictures.curves import drawn

    metric = plan.sweep.metric
    shown_rows = [r for r in found if r.value is not None and math.isfinite(r.value)]
    panels = 1 + len(plan.params)
    cols = 1 if panels == 1 else 2
    rows_ = -(-panels // cols)
    fig = Figure(figsize=(5.2 * cols, 3.2 * rows_), layout="constrained")
    axes = fig.subplots(rows_, cols, squeeze=False).ravel()
    done = [r for r in shown_rows if r.state == "finished"]
    pruned = [r for r in shown_rows if r.state == "pruned"]
    ax = axes[0]
    ax.scatter([r.number for r in done], [r.value for r in done], color="C0", label="finished", zorder=3)
    if pruned:
        ax.scatter([r.number for r in pruned], [r.value for r in pruned], color="C3", marker="x",
                   label="pruned (last value)", zorder=3)
    if done:
        pick = max if plan.sweep.direction == "maximize" else min
        steps: list[int] = []
        so_far: list[float] = []
        for number, value in sorted((r.number, r.value) for r in done if r.value is not None):  # Optuna: one each
            so_far.append(value if not so_far else pick(so_far[-1], value))
            steps.append(number)
        last = max(r.number for r in found)
        if steps and last > steps[-1]:  # the line runs on to the last trial, pruned or failed ones included
            steps, so_far = [*steps, last], [*so_far, so_far[-1]]
        ax.step(steps, so_far, where="post", color="C2", label="best so far")
    ax.set_title(drawn(f"{metric} over trials"), fontsize=11, parse_math=False)
    ax.set_xlabel("trial")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(True, alpha=0.3)
    if shown_rows:
        for text in ax.legend(fontsize=8).get_texts():
            text.set_parse_math(False)
    for ax, param in zip(axes[1:], plan.params, strict=False):
        _against(ax, param, done, pruned, metric)
    for ax in axes[panels:]:
        ax.set_visible(False)
    return fig


def _against(ax: Any, param: Any, done: list[Row], pruned: list[Row], metric: str) -> None:
    from specgen.pictures.curves import drawn

    choices = [value_text(v) for v in param.item.choice] if param.categorical else []
    for group, style in ((done, {"color": "C0"}), (pruned, {"color": "C3", "marker": "x"})):
        points = [(r.values[param.key], r.value) for r in group if param.key in r.values]
        if not points:
            continue
        xs = [choices.index(value_text(x)) if param.categorical else x for x, _ in points]
        ax.scatter(xs, [y for _, y in points], zorder=3, **style)
    if param.categorical:
        ax.set_xticks(range(len(choices)), [drawn(c) for c in choices])
        ax.set_xlim(-0.5, len(choices) - 0.5)
        for label in ax.get_xticklabels():
            label.set_parse_math(False)
    elif param.log:
        ax.set_xscale("log")
    ax.set_title(drawn(param.key), fontsize=11, parse_math=False)
    ax.set_ylabel(drawn(metric)).set_parse_math(False)
    ax.grid(True, alpha=0.3)


def render(plan: Plan, found: list[Row]) -> bytes:
    """The picture as a deterministic SVG (curves.py's settings: fixed hash salt, no date)."""
    import matplotlib
    import numpy as np

    from specgen.pictures.curves import _NO_METADATA, _RC

    buffer = io.BytesIO()
    with matplotlib.rc_context(_RC), warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        figure(plan, found).savefig(buffer, format="svg", metadata=_NO_METADATA["svg"])
    return buffer.getvalue()


# --- TensorBoard's HParams dashboard ------------------------------------------------------------------------------


def hparams_config(plan: Plan, folder: Path) -> None:
    """The experiment's definition for TensorBoard's HParams dashboard (`tensorboard --logdir SWEEP`): each
    searched key with its domain, and the metric; every trial writes its own values (runtime/hparams.py)."""
    from tensorboard.plugins.hparams import summary_v2 as hp

    from specgen.sweep.spec import ChoiceOf, IntRange, LogIntRange

    if any(folder.glob("events.out.tfevents.*")):  # written once: a resumed sweep has the same definition
        return
    hparams = []
    for param in plan.params:
        item = param.item
        if isinstance(item, ChoiceOf):
            values = list(item.choice)  # one type, or the values as their --set text
            same = all(type(v) is type(values[0]) for v in values)
            domain = hp.Discrete(values if same else [value_text(v) for v in values])
        elif isinstance(item, (IntRange, LogIntRange)):
            domain = hp.IntInterval(*map(int, param.bounds()))
        else:
            domain = hp.RealInterval(*map(float, param.bounds()))
        hparams.append(hp.HParam(param.key, domain))
    stage, tag = plan.sweep.metric.split("/", 1)
    summary = hp.hparams_config_pb(hparams=hparams, metrics=[hp.Metric(tag, group=stage, display_name=plan.sweep.metric)],
                                   time_created_secs=time.time())
    write_events(folder, [summary])


def write_events(folder: Path, summaries: list[Any]) -> Path:
    """An event file of `summaries` at step 0, framed by specgen/framing.py: tensorboard's own writer goes through
    `tf.io.gfile`, which imports TensorFlow whenever it is installed, and the sweep process never imports it."""
    import os
    import socket

    from tensorboard.compat.proto.event_pb2 import Event

    from specgen.framing import frame

    now = time.time()
    events = [Event(wall_time=now, file_version="brain.Event:2"),
              *(Event(wall_time=now, step=0, summary=summary) for summary in summaries)]
    records = b"".join(frame(event.SerializeToString()) for event in events)
    path = folder / f"events.out.tfevents.{int(now)}.{socket.gethostname()}.{os.getpid()}.0"
    from specgen.atomic import write_atomic

    write_atomic(path, records, fsync=False)
    return path


def report_parts(loaded: Any, folder: Path, storage_url: str | None = None) -> tuple[str, str, str]:
    """(the folder as shown, the summary, the picture) of the sweep in `folder`, for `specgen report --html
    --sweep`: read from its study (the SQLite file `specgen sweep` keeps there, or the storage `--storage` names when
    the sweep ran with one), drawn here, never taken from the folder's own files. Every mistake is a usage line of
    `specgen report` (exit 2): the command line names no sweep of this spec."""
    from specgen.sweep.errors import need_optuna
    from specgen.sweep.plan import Plan
    from specgen.sweep.space import parameters
    from specgen.sweep.study import quiet_optuna

    need_optuna()
    quiet_optuna()
    if loaded.spec.sweep is None:
        raise _usage(f"--sweep: {loaded.display} has no 'sweep' section; expected the spec the sweep ran")
    study, url = _load_study(loaded, folder, storage_url)
    base = list((study.user_attrs.get("specgen") or {}).get("base", []))
    plan = Plan(loaded, loaded.spec.sweep, parameters(loaded, base), folder, url, loaded.spec.sweep.trials, 1, base)
    found = rows(study)
    return shown(folder), "\n".join(lines(plan, found)), render(plan, found).decode()


def _usage(message: str) -> Exception:
    from specgen.sweep.errors import SweepUsageError

    return SweepUsageError(message, command="report")


def _load_study(loaded: Any, folder: Path, storage_url: str | None) -> tuple[Any, str]:
    """The sweep's study and its storage's URL. Only read: a SQLite or journal file that is not there is a usage
    line, not a new empty storage made by the report."""
    import optuna

    from specgen.sweep import storage as stores
    from specgen.sweep.study import retry

    if storage_url is None:
        if not (folder / "study.db").is_file():
            raise _usage(f"--sweep {shown(folder)}: no study.db there; a sweep keeps its study in its folder (its "
                         "-o) unless it ran with --storage: expected that folder, or --storage URL naming the "
                         "storage the sweep used")
        url = stores.default_url(folder)
    else:
        url = stores.checked_url(storage_url, folder, "report")
        for scheme in ("sqlite:///", "journal:"):
            if url.startswith(scheme) and not Path(url.removeprefix(scheme)).is_file():
                raise _usage(f"--storage {stores.masked(url)}: no such file; expected the storage the sweep ran "
                             "with (its --storage)")
    storage = stores.open_storage(url, retry, "report")
    if url != stores.default_url(folder):  # a storage of many sweeps: the one in `folder` must be this spec's
        _check_owner(storage, loaded, folder, url)
    try:
        return optuna.load_study(study_name=loaded.spec.name, storage=storage), url
    except KeyError:
        raise _usage(f"--sweep: {stores.masked(url)} holds no study '{loaded.spec.name}'; expected the storage "
                     "of this spec's sweep") from None


def _check_owner(storage: Any, loaded: Any, folder: Path, url: str) -> None:
    """Refuse a folder whose sweep is not the study of this spec (named after its `name`) in `storage`: the page
    titled with the folder drew that study's trials, of another folder. A sweep records its folder in the study
    (membership.folder_attr), and each trial its run folder in it."""
    from specgen.sweep import storage as stores
    from specgen.sweep.membership import owners as owners_of

    owners = owners_of(storage, folder.resolve())
    if loaded.spec.name in owners:
        return
    where = stores.masked(url)
    if owners:
        raise _usage(f"--sweep {shown(folder)}: that folder holds the sweep of the study '{owners[0]}' in {where}, "
                     f"not of '{loaded.spec.name}' (the study named after {loaded.display}'s 'name'); expected the "
                     f"spec that sweep ran (its 'name': {owners[0]}), or the folder of a sweep of {loaded.display}")
    raise _usage(f"--sweep {shown(folder)}: no study in {where} ran a sweep in that folder; expected the folder (-o) "
                 "of a sweep that used this storage")

