"""`specgen curves`: a run's TensorBoard scalars as one picture, one panel per scalar, runs overlaid.

The events are read with TensorBoard's own pure-Python record reader and protos (its TensorFlow stub):
`tensorboard.backend`'s loaders would import TensorFlow (tens of seconds) to read a few hundred numbers.
matplotlib draws (Agg, no display); the SVG is deterministic: a fixed hash salt (the ids matplotlib
makes up for clip paths) and no date in its metadata, so the same events give the same bytes.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specgen.diagnostics import Diagnostic, SpecError
from specgen.paths import shown

if TYPE_CHECKING:
    from matplotlib.figure import Figure

LR_PREFIX = "learning_rate/"  # one scalar per optimizer (specgen train): drawn together in one panel
LR_PANEL = "learning rate"
EVAL = "eval"
# No date, no matplotlib version (Creator, Software) and no RDF block: the bytes depend on the events only.
_NO_METADATA = {"svg": {"Date": None, "Creator": None, "Format": None, "Type": None}, "png": {"Software": None}}


@dataclass(frozen=True)
class Series:
    """One scalar of one stage of one run: its (step, value) points in step order."""

    run: str
    stage: str
    tag: str
    steps: tuple[int, ...]
    values: tuple[float, ...]


def _missing(path: Path, what: str) -> SpecError:
    return SpecError([Diagnostic(shown(path), None, f"{what}; expected a run folder of `specgen train` holding "
                                 "tensorboard/<stage>/events.out.tfevents.* (train the spec first)")])


def _records(path: Path) -> list[bytes]:
    """The records of one event file. A run still writing may end in a partial record: reading stops there."""
    from tensorboard.compat.tensorflow_stub import errors
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New

    reader, out = PyRecordReader_New(str(path)), []
    while True:
        try:
            reader.GetNext()
        except (errors.OutOfRangeError, errors.DataLossError):
            return out
        out.append(reader.record())


def _stage_points(files: list[Path]) -> dict[str, dict[int, float]]:
    """tag -> step -> value over a stage's event files, oldest file first: after a resume from an older
    checkpoint the steps it runs again take the newer values."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.util.tensor_util import make_ndarray

    points: dict[str, dict[int, float]] = {}
    for path in files:
        for record in _records(path):
            event = Event.FromString(record)
            for value in event.summary.value:
                number = float(make_ndarray(value.tensor)) if value.HasField("tensor") else value.simple_value
                points.setdefault(value.tag, {})[int(event.step)] = number
    return points


def read_run(run: Path) -> list[Series]:
    """Every scalar of `run`, by stage folder and tag, in name order."""
    board = run / "tensorboard"
    if not run.is_dir():
        raise _missing(run, "not a folder")
    stages = sorted(p for p in board.iterdir() if p.is_dir()) if board.is_dir() else []
    series = []
    for stage in stages:
        # File names start events.out.tfevents.<seconds>: name order is the order they were written in.
        points = _stage_points(sorted(stage.glob("events.out.tfevents.*")))
        terms = [t for t in points if t.startswith("loss/")]
        for tag in sorted(points):
            if len(terms) == 1 and tag == terms[0] and "loss" in points:
                continue  # a lone loss term is the loss itself (runtime/hooks.loss_scalars): drawn once
            steps = sorted(points[tag])
            series.append(Series(run.name or str(run), stage.name, tag, tuple(steps),
                                 tuple(points[tag][s] for s in steps)))
    if not series:
        raise _missing(run, "no TensorBoard scalars")
    return series


def panel_of(series: Series) -> str:
    return LR_PANEL if series.tag.startswith(LR_PREFIX) else series.tag


def label_of(series: Series, runs: int) -> str:
    """The legend entry: the stage (or optimizer, in the learning-rate panel), after the run when several."""
    what = series.tag[len(LR_PREFIX):] if series.tag.startswith(LR_PREFIX) else series.stage
    return f"{series.run}: {what}" if runs > 1 else what


def figure(runs: Sequence[list[Series]]) -> Figure:
    """One panel per scalar (the learning rates share one), two panels a row; eval points marked."""
    from matplotlib.figure import Figure  # no pyplot: no global state, no display backend chosen

    every = [s for run in runs for s in run]
    panels = sorted({panel_of(s) for s in every}, key=lambda p: (p != "loss", p == LR_PANEL, p))
    cols = 1 if len(panels) == 1 else 2
    rows = -(-len(panels) // cols)
    fig = Figure(figsize=(5.2 * cols, 3.2 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    # One colour per legend entry across panels: "train" is the same colour in every panel.
    # Stages first (train before eval), then the optimizers of the learning-rate panel.
    stages = sorted({label_of(s, len(runs)) for s in every if panel_of(s) != LR_PANEL},
                    key=lambda label: (label.endswith(EVAL), label))
    labels = stages + sorted({label_of(s, len(runs)) for s in every} - set(stages))
    for ax, panel in zip(axes, panels, strict=False):
        for s in (s for s in every if panel_of(s) == panel):
            label = label_of(s, len(runs))
            marker = dict(marker="o", markersize=4) if s.stage == EVAL else {}
            ax.plot(s.steps, s.values, label=label, color=f"C{labels.index(label) % 10}", linewidth=1.4, **marker)
        ax.set_title(panel, fontsize=11)
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    return fig


def render(runs: Sequence[list[Series]], fmt: str = "svg") -> bytes:
    """The picture's bytes: SVG (deterministic) or PNG."""
    import matplotlib

    fig, buffer = figure(runs), io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "specgen", "svg.fonttype": "path"}):
        fig.savefig(buffer, format=fmt, metadata=_NO_METADATA[fmt])
    return buffer.getvalue()
