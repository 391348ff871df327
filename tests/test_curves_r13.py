"""Round 13 of the pictures check: a scalar series spanning float64's range (±1e308) drew a matplotlib traceback;
a run resumed from an older checkpoint kept the abandoned continuation's later steps in its curves, its page and
its precision table's loss scale; docs/pictures.md quoted the ResNet50 picture's size from an older layout.

Event files are written here with TensorBoard's own protos and record writer, each event's wall time chosen.
"""

from __future__ import annotations

import io
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from specgen.cli import main
from specgen.pictures.curves import Series, figure, scan_run

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "examples" / "specs" / "digits_mlp.yaml"
BIGGEST = 1.7976931348623157e308


def events(*points: tuple[str, int, float, float]) -> bytes:
    """(tag, step, value, wall time) as float64 tensors in TFRecord framing, by TensorBoard's own writer."""
    from tensorboard.compat.proto import types_pb2
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.summary.writer.record_writer import RecordWriter

    buffer = io.BytesIO()
    writer = RecordWriter(buffer)
    for tag, step, value, wall in points:
        tensor = TensorProto(dtype=types_pb2.DT_DOUBLE, double_val=[value])
        writer.write(Event(step=step, wall_time=wall, summary=Summary(value=[Summary.Value(tag=tag, tensor=tensor)]))
                     .SerializeToString())
    return buffer.getvalue()


def write(run: Path, stage: str, name: str, data: bytes) -> None:
    (run / "tensorboard" / stage).mkdir(parents=True, exist_ok=True)
    (run / "tensorboard" / stage / f"events.out.tfevents.{name}").write_bytes(data)


def drawn_points(run: Path) -> dict[str, list[tuple[int, float]]]:
    return {f"{s.stage} {s.tag}": list(zip(s.steps, s.values, strict=True)) for s in scan_run(run).series}


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --- F1: values whose span float64 cannot scale ---------------------------------------------------------------

@pytest.mark.parametrize("values", [(1e308, -1e308), (1.7e308, -1e308), (8e307, -8e307), (BIGGEST, -BIGGEST)])
def test_a_span_beyond_float64_draws_with_the_huge_values_as_gaps(here: Path, capsys: pytest.CaptureFixture[str],
                                                                  values: tuple[float, float]) -> None:
    """Each of these was `ValueError: arange: cannot compute length` from matplotlib's ticker, for curves and the
    page alike: now a value beyond ±1e300 is left out of the line, like inf, and the legend says so."""
    write(here / "run", "train", "1", events(("loss", 1, values[0], 1.0), ("loss", 2, values[1], 1.0),
                                             ("loss", 3, 0.5, 1.0), ("loss", 4, 0.25, 1.0)))
    assert main(["curves", "run", "-o", "c.svg"]) == 0
    assert capsys.readouterr() == ("wrote c.svg (svg: 1 scalar of 1 run)\n", "")
    ET.fromstring((here / "c.svg").read_bytes())
    (ax,) = [ax for ax in figure([scan_run(here / "run").series]).axes if ax.get_visible()]
    line = ax.get_lines()[0]
    assert list(line.get_xdata()) == [1, 2, 3, 4]
    assert [v if not math.isnan(v) else "gap" for v in line.get_ydata()] == ["gap", "gap", 0.5, 0.25]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["train (beyond ±1e300 at 2 steps, first 1)"]
    code = main(["report", str(SPEC), "--html", "--run", "run", "-o", "r.html"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "") and out.startswith("wrote r.html (")


def test_nan_and_huge_values_share_one_legend_note_and_the_rest_still_draws() -> None:
    """±1e300 itself is drawn (its span, with matplotlib's margins, is finite); a lone drawable point is a marker."""
    steps = (-2**63, 1, 2, 3, 2**63 - 1)
    series = Series("run", "train", "loss", steps, (1e300, math.nan, 2e300, -1e300, -1e300))
    (ax,) = [ax for ax in figure([[series]]).axes if ax.get_visible()]
    line, marker = ax.get_lines()
    assert [v if not math.isnan(v) else "gap" for v in line.get_ydata()] == [1e300, "gap", "gap", -1e300, -1e300]
    assert (list(marker.get_xdata()), list(marker.get_ydata())) == ([-2**63], [1e300])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["train (nan/inf or beyond ±1e300 at 2 steps, first 1)"]
    low, high = ax.get_ylim()
    assert math.isfinite(low) and math.isfinite(high) and low < -1e300 and high > 1e300


@pytest.mark.parametrize("values", [(BIGGEST,), (-BIGGEST,), (BIGGEST, BIGGEST)])
def test_huge_values_alone_draw_an_empty_panel_with_the_note(here: Path, capsys: pytest.CaptureFixture[str],
                                                             values: tuple[float, ...]) -> None:
    write(here / "run", "train", "1", events(*[("loss", 2**63 - 1 - i, v, 1.0) for i, v in enumerate(values)]))
    assert main(["curves", "run", "-o", "c.svg"]) == 0
    assert capsys.readouterr() == ("wrote c.svg (svg: 1 scalar of 1 run)\n", "")


# --- F2: a run resumed from an older checkpoint -------------------------------------------------------------------

def resumed_run(run: Path, evaluated_again: bool = True, wall: float = 0.0) -> None:
    """Trained to step 88 (files named 1, wall times from 100), then resumed from step 40 for 10 steps (files named
    2, wall times from 200); `wall` replaces every wall time when given (a file whose wall times say nothing)."""
    def at(time: float) -> float:
        return wall or time

    first = [("loss", s, v, at(100 + s / 100)) for s, v in [(20, 2.18), (40, 1.84), (44, 1.5), (50, 1.3), (60, 1.06),
                                                            (80, 0.73), (88, 0.54)]]
    write(run, "train", "1", events(*first))
    write(run, "eval", "1", events(("accuracy", 44, 0.71, at(100.45)), ("accuracy", 88, 0.91, at(100.9))))
    write(run, "train", "2", events(("loss", 44, 0.97, at(200.1)), ("loss", 50, 0.41, at(200.2))))
    if evaluated_again:
        write(run, "eval", "2", events(("accuracy", 44, 0.82, at(200.15)), ("accuracy", 50, 0.87, at(200.25))))


def test_a_resumed_run_draws_only_the_run_as_it_stands(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Steps 60 to 88 of the first continuation were drawn after the resumed run's step 50, as one line."""
    resumed_run(here / "run")
    assert drawn_points(here / "run") == {"eval accuracy": [(44, 0.82), (50, 0.87)],
                                          "train loss": [(20, 2.18), (40, 1.84), (44, 0.97), (50, 0.41)]}
    note = ("run: note: left out 4 points at steps 60 to 88 logged before the run was resumed from an earlier step "
            "(a continuation it no longer holds); drawn: the run as it stands")
    assert main(["curves", "run", "-o", "c.svg"]) == 0
    assert capsys.readouterr() == ("wrote c.svg (svg: 2 scalars of 1 run)\n", note + "\n")
    assert main(["report", str(SPEC), "--html", "--run", "run", "-o", "r.html"]) == 0
    out, err = capsys.readouterr()
    assert err == note + "\n" and out.startswith("wrote r.html (")
    page = (here / "r.html").read_text()
    assert note.replace("run: note: ", "") in page


def test_a_stage_the_resumed_run_has_not_logged_yet_is_cut_by_wall_time(here: Path) -> None:
    """No eval since the resume: the eval point at step 88 was logged before the train file that restarts at 44."""
    resumed_run(here / "run", evaluated_again=False)
    assert drawn_points(here / "run") == {"eval accuracy": [(44, 0.71)],
                                          "train loss": [(20, 2.18), (40, 1.84), (44, 0.97), (50, 0.41)]}


def test_without_wall_times_a_stages_file_order_still_cuts(here: Path) -> None:
    resumed_run(here / "run", wall=1.0)
    assert drawn_points(here / "run") == {"eval accuracy": [(44, 0.82), (50, 0.87)],
                                          "train loss": [(20, 2.18), (40, 1.84), (44, 0.97), (50, 0.41)]}


def test_a_run_that_was_not_resumed_keeps_every_point(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Eval's file starts at step 44 after train logged it, and train logs on past it: nothing is cut; nor is a
    second file that starts after the first one's last step (a resume from the latest checkpoint)."""
    write(here / "run", "train", "1", events(("loss", 20, 2.0, 100.2), ("loss", 44, 1.0, 100.44), ("loss", 60, 0.8, 100.6)))
    write(here / "run", "eval", "1", events(("accuracy", 44, 0.7, 100.45), ("accuracy", 88, 0.9, 100.9)))
    write(here / "run", "train", "2", events(("loss", 100, 0.5, 200.0)))
    assert drawn_points(here / "run") == {"eval accuracy": [(44, 0.7), (88, 0.9)],
                                          "train loss": [(20, 2.0), (44, 1.0), (60, 0.8), (100, 0.5)]}
    assert scan_run(here / "run").lines() == []


def test_the_precision_tables_loss_scale_is_the_resumed_runs(tmp_path: Path) -> None:
    """The 'run's loss scale' row read the last logged value: the abandoned continuation's step 88."""
    from specgen.ir.resolve import build_ir
    from specgen.report.precision import precision_table
    from specgen.spec.load import load_spec

    run = tmp_path / "run"
    write(run, "train", "1", events(*[(tag, s, v, 100 + s / 100) for s in (20, 40, 60, 88)
                                      for tag, v in (("loss_scale", 2.0**15 * 2 ** (s // 40)), ("skipped_updates", s // 20))]))
    write(run, "train", "2", events(("loss_scale", 50, 16384.0, 200.0), ("skipped_updates", 50, 1.0, 200.0)))
    text = SPEC.read_text().replace("../data/digits.npz", str(ROOT / "examples/data/digits.npz"))
    spec = tmp_path / "mlp.yaml"
    spec.write_text(text.replace("  seed: 1\n", "  seed: 1\n  precision: mixed_float16\n"))
    table = precision_table(build_ir(load_spec(spec)), scan_run(run).series)
    assert table is not None
    assert re.findall(r"run's loss scale .*", table) == ["run's loss scale       16384 at step 50, 1 updates skipped so far"]


# --- F3: the docs quote the picture the command draws now ---------------------------------------------------------

def test_the_docs_quote_resnet50s_picture_size() -> None:
    from specgen.ir.resolve import ir_from_file
    from specgen.pictures.graph import render_svg

    root = ET.fromstring(render_svg(ir_from_file(ROOT / "examples" / "specs" / "resnet50.yaml")))
    width, height = int(root.get("width", "")), int(root.get("height", ""))
    docs = (ROOT / "docs" / "pictures.md").read_text()
    assert f"ResNet50 is {width} pixels\nwide and {height:,} tall" in docs
    assert re.search(rf"^resnet50 +177 +\S+ +\S+ +{width} x {height} +\d+$", docs, re.M)
