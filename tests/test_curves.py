"""`specgen curves`: the plotted points are the logged scalars, the SVG bytes repeat, mistakes are one line.

The events are written with known numbers in tf.summary's form, so the test knows what every panel must
show without training.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specgen.cli import main
from specgen.pictures.curves import figure, read_run, render

TRAIN = {"loss": [2.5, 1.25, 0.625], "loss/logits": [2.5, 1.25, 0.625], "accuracy": [0.25, 0.5, 0.75],
         "learning_rate/body": [0.05, 0.04, 0.03], "learning_rate/head": [0.001, 0.001, 0.001]}
EVAL = {"accuracy": [0.375, 0.875]}
TRAIN_STEPS, EVAL_STEPS = [20, 40, 60], [30, 60]


def write_events(folder: Path, stage: str, steps: list[int], scalars: dict[str, list[float]]) -> None:
    """Events as tf.summary.scalar writes them (a float32 tensor with the scalars plugin's metadata, one
    TFRecord each), through TensorBoard's own pure-Python record writer: importing TensorFlow would cost
    this file most of its time, and tests/test_report_html.py reads the events of a real `specgen train`."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.types_pb2 import DT_FLOAT
    from tensorboard.summary.writer.record_writer import RecordWriter

    (folder / "tensorboard" / stage).mkdir(parents=True)
    plugin = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"))
    with open(folder / "tensorboard" / stage / "events.out.tfevents.1.test.v2", "wb") as file:
        writer = RecordWriter(file)
        for i, step in enumerate(steps):
            for tag, values in scalars.items():
                tensor = TensorProto(dtype=DT_FLOAT, float_val=[values[i]])
                value = Summary.Value(tag=tag, metadata=plugin, tensor=tensor)
                writer.write(Event(step=step, summary=Summary(value=[value])).SerializeToString())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    a, b = tmp_path_factory.mktemp("a"), tmp_path_factory.mktemp("b")
    for run, shift in ((a, 0.0), (b, 0.5)):
        write_events(run, "train", TRAIN_STEPS, {k: [v + shift for v in vs] for k, vs in TRAIN.items()})
        write_events(run, "eval", EVAL_STEPS, EVAL)
    return a, b


def f32(values: list[float]) -> list[float]:
    """The logged values as TensorBoard keeps them: float32 (tf.summary.scalar's dtype)."""
    import numpy as np

    return [float(np.float32(v)) for v in values]


def test_each_panel_plots_the_logged_numbers(runs: tuple[Path, Path]) -> None:
    fig = figure([read_run(runs[0])])
    panels = {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}
    # The lone loss term is the loss itself: not drawn twice; the learning rates share one panel.
    assert list(panels) == ["loss", "accuracy", "learning rate"]
    lines = {(title, line.get_label()): line for title, ax in panels.items() for line in ax.get_lines()}
    assert sorted(lines) == [("accuracy", "eval"), ("accuracy", "train"), ("learning rate", "body"),
                             ("learning rate", "head"), ("loss", "train")]
    assert list(lines["loss", "train"].get_xdata()) == TRAIN_STEPS
    assert list(lines["loss", "train"].get_ydata()) == f32(TRAIN["loss"])
    assert list(lines["accuracy", "eval"].get_xdata()) == EVAL_STEPS
    assert list(lines["accuracy", "eval"].get_ydata()) == f32(EVAL["accuracy"])
    assert list(lines["learning rate", "body"].get_ydata()) == f32(TRAIN["learning_rate/body"])
    assert lines["accuracy", "eval"].get_marker() == "o" and lines["accuracy", "train"].get_marker() == "None"
    # One colour per stage in every panel.
    assert lines["accuracy", "train"].get_color() == lines["loss", "train"].get_color()


def test_runs_are_overlaid_with_their_names(runs: tuple[Path, Path]) -> None:
    fig = figure([read_run(r) for r in runs])
    loss = next(ax for ax in fig.axes if ax.get_title() == "loss")
    got = {line.get_label(): list(line.get_ydata()) for line in loss.get_lines()}
    assert got == {f"{runs[0].name}: train": f32(TRAIN["loss"]),
                   f"{runs[1].name}: train": f32([v + 0.5 for v in TRAIN["loss"]])}


def test_svg_bytes_repeat_and_hold_no_date_or_version(runs: tuple[Path, Path], tmp_path: Path) -> None:
    first = render([read_run(runs[0])])
    assert main(["curves", str(runs[0]), "-o", str(tmp_path / "c.svg")]) == 0
    assert (tmp_path / "c.svg").read_bytes() == first
    assert b"<dc:date>" not in first and b"Matplotlib v" not in first
    assert render([read_run(runs[0])], "png")[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_folder_without_events_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["curves", str(tmp_path), "-o", str(tmp_path / "c.svg")]) == 1
    err = capsys.readouterr().err
    assert err == (f"{tmp_path}: error: no TensorBoard scalars; expected a run folder of `specgen train` holding "
                   "tensorboard/<stage>/events.out.tfevents.* (train the spec first)\n1 error found\n")
    assert list(tmp_path.iterdir()) == []
    assert main(["curves", str(tmp_path), "-o", str(tmp_path / "c.pdf")]) == 2  # a command-line mistake
    assert capsys.readouterr().err == (f"specgen curves: error: cannot write curves to -o {tmp_path / 'c.pdf'}: got '.pdf', "
                                       "expected a name ending in .svg or .png\n")


def test_a_point_without_a_finite_neighbour_is_a_marker_and_nan_is_said() -> None:
    """A train series of one point (a 2-update run logs each train scalar once) and a value between inf ones were
    drawn as nothing: a line needs two neighbours (pictures checker F1). Non-finite values are named in the legend."""
    from specgen.pictures.curves import Series, isolated

    assert isolated([0.5]) == [0]
    assert isolated([0.0, 1.0, 2.0, float("inf"), 4.0]) == [4]
    assert isolated([float("nan"), 1.0, float("nan")]) == [1]
    assert isolated([1.0, 2.0]) == []
    one = Series("run", "train", "loss", (2,), (0.75,))
    broken = Series("run", "train", "accuracy", (0, 1, 2, 3, 4), (0.0, 1.0, 2.0, float("inf"), 4.0))
    axes = {ax.get_title(): ax for ax in figure([[one, broken]]).axes if ax.get_visible()}
    markers = [(list(line.get_xdata()), list(line.get_ydata())) for line in axes["loss"].get_lines()
               if line.get_marker() == "o"]
    assert markers == [([2], [0.75])]
    markers = [(list(line.get_xdata()), list(line.get_ydata())) for line in axes["accuracy"].get_lines()
               if line.get_marker() == "o"]
    assert markers == [([4], [4.0])]
    assert [t.get_text() for t in axes["accuracy"].get_legend().get_texts()] == ["train (nan/inf at 1 step, first 3)"]
