"""`specgen curves`: a run's TensorBoard scalars as one picture, one panel per scalar, runs overlaid.

The events are read by specgen/pictures/events.py (its own framing, TensorBoard's protos, no TensorFlow:
`tensorboard.backend`'s loaders would import it, tens of seconds, to read a few hundred numbers), as untrusted
input: scalars only, every skipped record or value counted in one note line, each bound below refused in one.
matplotlib draws (Agg, no display); the SVG is deterministic: a fixed hash salt (the ids matplotlib
makes up for clip paths) and no date in its metadata, so the same events give the same bytes.
"""

from __future__ import annotations

import bisect
import io
import math
import os
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specgen.pictures.events import Scalars

from specgen.diagnostics import Diagnostic, SpecError
from specgen.paths import shown
from specgen.pictures.labels import distinct_suffixes
from specgen.text import printable

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.typing import RcKeyType

LR_PREFIX = "learning_rate/"  # one scalar per optimizer (specgen train): drawn together in one panel
LR_PANEL = "learning rate"
EVAL = "eval"
# Bounds of one run: each scalar is a panel (about 0.1 s to draw) or a line in one; a point costs about 150 bytes
# read and drawn. A specgen run logs about 20 scalars; a million steps logged every 20 with 20 scalars fit.
MAX_SERIES = 64
MAX_POINTS = 1_000_000
MAX_LABEL = 80  # characters of a tag or name as drawn; the rest is cut with an ellipsis
# The largest magnitude drawn: matplotlib's autoscale adds margins to the data's span and ticks it, and a span
# near float64's limit (1e307 and -1e307) overflows there (a traceback). A value beyond is a gap, like inf.
MAX_DRAWN = 1e300
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


def _stage_points(files: list[Path], run: Path, scan: RunScan) -> Scalars:
    """tag -> step -> value over a stage's event files, oldest file first: after a resume from an older
    checkpoint the steps it runs again take the newer values (and _drop_abandoned the older ones beyond)."""
    from specgen.pictures.events import FileReading, Scalars, read_scalars

    into = Scalars()
    for path in files:
        reading = FileReading(path)
        for _ in read_scalars(path, into, reading):  # checked at each new point: memory stays within the bounds
            scan.points += 1
            if scan.points > MAX_POINTS:
                raise _over(run, f"more than {MAX_POINTS:,} scalar points (stage, tag and step)",
                            f"at most {MAX_POINTS:,}: every point is drawn")
            if scan.tags + len(into.points) > MAX_SERIES:
                raise _over(run, f"more than {MAX_SERIES} scalars (stage and tag pairs)",
                            f"at most {MAX_SERIES}: each is a panel, or a line in one")
        scan.notes += reading.notes()
        scan.files += 1
    scan.values += into.values
    scan.tags += len(into.points)
    scan.skipped.update(into.skipped)
    return into


def _drop_abandoned(stages: dict[str, Scalars]) -> list[int]:
    """Leaves out, in place, the points of an abandoned continuation; returns their steps. A file that starts at
    step S supersedes what the same stage's older files logged at S and after (a resume from an older checkpoint
    runs those steps again, and what followed them is no longer the run); a point any other stage's file
    started after, at a step beyond that file's first, was logged before that resume (TensorBoard's
    purge_orphaned_data, made for this; the wall time also catches a stage the resumed run has not logged yet)."""
    begun = [(start, name) for name, into in stages.items() for start in into.starts if start is not None]
    dropped = []
    for name, into in stages.items():
        later = _least_from([math.inf if start is None else start[1] for start in into.starts])  # by file order
        other = sorted(start for start, stage in begun if stage != name)
        walls, after = [wall for wall, _ in other], _least_from([step for _, step in other])  # by wall time
        for tag, written in into.written.items():
            gone = [step for step, (file, wall) in written.items()
                    if step >= later[file + 1] or step > after[bisect.bisect_right(walls, wall)]]
            for step in gone:
                del into.points[tag][step]
            dropped += gone
    return dropped


def _least_from(steps: list[float]) -> list[float]:
    """min(steps[i:]) for each i from 0 to len(steps) (inf there): the earliest start among the files from i on."""
    least = [math.inf] * (len(steps) + 1)
    for i in range(len(steps) - 1, -1, -1):
        least[i] = min(least[i + 1], steps[i])
    return least


def _over(run: Path, received: str, expected: str) -> SpecError:
    return SpecError([Diagnostic(shown(run), None, f"received {received}; expected {expected} "
                                 "(TensorBoard reads larger runs)")])


@dataclass
class RunScan:
    """A run's scalars and what reading them had to say: one line per damaged or cut file, one for what was
    skipped."""

    series: list[Series] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)  # (a run or file as shown, what to say)
    skipped: Counter[tuple[str, str]] = field(default_factory=Counter)  # (record or summary value, why) -> count
    files: int = 0
    values: int = 0  # scalar values read (a step logged twice counts twice)
    points: int = 0  # distinct (stage, tag, step) points
    tags: int = 0  # distinct (stage, tag) pairs

    def lines(self) -> list[str]:
        """The note lines to print (standard error): one per damaged or cut file, one for what was skipped."""
        return [f"{where}: note: {text}" for where, text in self.notes]


def read_run(run: Path) -> list[Series]:
    """Every scalar of `run`, by stage folder and tag, in name order."""
    return scan_run(run).series


def scan_run(run: Path) -> RunScan:
    """Every scalar of `run`, by stage folder and tag, in name order, with the run's note lines."""
    board = run / "tensorboard"
    if not run.is_dir():
        raise _missing(run, "not a folder")
    stages = sorted(p for p in board.iterdir() if p.is_dir()) if board.is_dir() else []
    scan = RunScan()
    # File names start events.out.tfevents.<seconds>: name order is the order they were written in.
    read = {stage.name: _stage_points(sorted(stage.glob("events.out.tfevents.*")), run, scan) for stage in stages}
    dropped = _drop_abandoned(read)
    for stage in stages:
        points = {tag: steps for tag, steps in read[stage.name].points.items() if steps}
        terms = [t for t in points if t.startswith("loss/")]
        for tag in sorted(points):
            if len(terms) == 1 and tag == terms[0] and "loss" in points:
                continue  # a lone loss term is the loss itself (runtime/hooks.loss_scalars): drawn once
            steps = sorted(points[tag])
            scan.series.append(Series(run.name or str(run), stage.name, tag, tuple(steps),
                                      tuple(points[tag][s] for s in steps)))
    if dropped:
        scan.notes.append((shown(run), _abandoned(dropped)))
    if scan.skipped:
        scan.notes.append((shown(run), _skipped(scan)))
    if not scan.series:  # what was skipped or cut short is part of the one line
        said = "; ".join(text if where == shown(run) else f"{where}: {text}" for where, text in scan.notes)
        raise _missing(run, "no TensorBoard scalars" + (f" ({said})" if said else ""))
    return scan


def scan_runs(folders: Sequence[Path]) -> tuple[list[RunScan], list[str]]:
    """Each run folder's scalars, read once, its lines named by the shortest end of its path that tells it from
    the others (`a/run`, `b/run`: two runs kept under one folder name must not read as one legend entry); and a
    note line for each folder named again (through any path: drawn twice, its lines would hide each other)."""
    named: dict[Path, list[Path]] = {}  # the folder -> the paths that name it, in command-line order
    for folder in folders:
        named.setdefault(_identity(folder), []).append(folder)
    notes = [_named_again(paths) for paths in named.values() if len(paths) > 1]
    unique = [paths[0] for paths in named.values()]
    names = distinct_suffixes([PurePosixPath(os.path.abspath(f)) for f in unique])
    scans = [scan_run(f) for f in unique]
    for scan, name in zip(scans, names, strict=True):
        scan.series = [replace(s, run=name) for s in scan.series]
    return scans, notes


def _abandoned(steps: list[int]) -> str:
    count = len(steps)
    return (f"left out {count:,} point{'s' * (count != 1)} at steps {min(steps):,} to {max(steps):,} logged before the run "
            "was resumed from an earlier step (a continuation it no longer holds); drawn: the run as it stands")


def _named_again(paths: list[Path]) -> str:
    others = [text for text in dict.fromkeys(shown(p) for p in paths[1:]) if text != shown(paths[0])]
    also = f" (also as {', '.join(others)})" if others else ""
    return f"{shown(paths[0])}: note: named {len(paths)} times{also}; read and drawn once"


def _identity(folder: Path) -> Path:
    """The folder itself, whatever path names it (links resolved); a link loop is left to scan_run to refuse."""
    try:
        return folder.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a link loop, before Python 3.13
        return Path(os.path.abspath(folder))


def _skipped(scan: RunScan) -> str:
    """How many of what were skipped, and why."""
    what = [f"{count:,} {noun}{'s' * (count != 1)} ({why})" for (noun, why), count in sorted(scan.skipped.items())]
    listed = ", ".join(what[:-1]) + " and " + what[-1] if len(what) > 1 else what[0]
    return (f"read {scan.values:,} scalar value{'s' * (scan.values != 1)} from {scan.files} event "
            f"file{'s' * (scan.files != 1)}; skipped {listed}")


def panel_of(series: Series) -> str:
    return LR_PANEL if series.tag.startswith(LR_PREFIX) else series.tag


def label_of(series: Series, runs: int) -> str:
    """The legend entry: the stage (or optimizer, in the learning-rate panel), after the run when several."""
    what = series.tag[len(LR_PREFIX):] if series.tag.startswith(LR_PREFIX) else series.stage
    return f"{series.run}: {what}" if runs > 1 else what


def drawn(text: str) -> str:
    """A tag or name as the picture shows it: plain text (with parse_math off, `$x$` is not mathtext), control
    characters and bidi overrides escaped (a NUL makes an SVG that is not XML), at most MAX_LABEL characters;
    a leading `_` (matplotlib's mark of an entry left out of the legend) after a space."""
    text = printable(text)
    text = text if len(text) <= MAX_LABEL else text[:MAX_LABEL - 1] + "…"
    return " " + text if text.startswith("_") else text


def figure(runs: Sequence[list[Series]]) -> Figure:
    """One panel per scalar (the learning rates share one), two panels a row; eval points marked.
    Every text from the run folder is drawn with parse_math off: a tag is never mathtext (nor TeX)."""
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
            colour = f"C{labels.index(label) % 10}"
            marker = dict(marker="o", markersize=4) if s.stage == EVAL else {}
            values = [v if abs(v) <= MAX_DRAWN else math.nan for v in s.values]  # inf too: a gap either way
            ax.plot(s.steps, values, label=drawn(label + _non_finite(s)), color=colour, linewidth=1.4, **marker)
            alone = isolated(values)
            if alone and s.stage != EVAL:  # a line needs two finite neighbours: a point without one is a marker
                ax.plot([s.steps[i] for i in alone], [values[i] for i in alone], linestyle="none", marker="o",
                        markersize=4, color=colour)
        ax.set_title(drawn(panel), fontsize=11, parse_math=False)
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
        for text in ax.legend(fontsize=8).get_texts():
            text.set_parse_math(False)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    return fig


def isolated(values: Sequence[float]) -> list[int]:
    """The finite points with no finite neighbour (a series of one point, a value between nan/inf ones): a line
    joins a point to its neighbours, so these would be drawn as nothing."""
    finite = [math.isfinite(v) for v in values]
    return [i for i, ok in enumerate(finite)
            if ok and not (i > 0 and finite[i - 1]) and not (i + 1 < len(finite) and finite[i + 1])]


def _non_finite(s: Series) -> str:
    """The legend's note for the values a picture cannot show (nan, inf, beyond ±MAX_DRAWN): a diverged run looks
    like one that stopped."""
    bad = [(step, v) for step, v in zip(s.steps, s.values, strict=True) if not abs(v) <= MAX_DRAWN]
    if not bad:
        return ""
    kinds = {"nan/inf" if not math.isfinite(v) else "beyond ±1e300" for _, v in bad}  # MAX_DRAWN
    return f" ({' or '.join(sorted(kinds, reverse=True))} at {len(bad)} step{'s' if len(bad) > 1 else ''}, first {bad[0][0]})"


# usetex off whatever the user's matplotlibrc says: a tag must never reach LaTeX.
_RC: dict[RcKeyType, Any] = {"svg.hashsalt": "specgen", "svg.fonttype": "path", "text.usetex": False}


def render(runs: Sequence[list[Series]], fmt: str = "svg") -> bytes:
    """The picture's bytes: SVG (deterministic) or PNG. matplotlib's warnings about the run's own text and
    numbers (a glyph the font lacks, an overflow while scaling values near ±1e300) are not the user's to read: silenced."""
    import matplotlib
    import numpy as np

    buffer = io.BytesIO()
    with matplotlib.rc_context(_RC), warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        figure(runs).savefig(buffer, format=fmt, metadata=_NO_METADATA[fmt])
    return buffer.getvalue()
