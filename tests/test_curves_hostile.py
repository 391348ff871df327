"""`specgen curves` and `report --html --run` on run folders built to break them (issue 28, defect 7).

Every event file is made here with TensorBoard's own protos and record writer, then corrupted: a tag that is
mathtext or holds a NUL, records that are not Events, tensors that are not one number (one declaring 2**29
elements in a 56-byte file), a bad CRC in the middle, a file cut short, a length of 2**62, a record over the
size cap, a malformed export.json. Each is run through the real command: exit status, the exact lines, an SVG
or page that parses, nothing written on a refusal, and (in a fresh process) a peak RSS that does not grow.
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from specgen.cli import main
from specgen.errors import SpecgenError
from specgen.pictures import curves
from specgen.pictures.curves import figure, render, scan_run
from specgen.pictures.events import MAX_RECORD

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "examples" / "specs" / "digits_mlp.yaml"
NOT_ONE_NUMBER = "not one number: a tensor of another shape or type, an image, a histogram or audio"


def framed(*records: bytes) -> bytes:
    """Records in TFRecord framing, by TensorBoard's own writer (lengths and masked CRC-32Cs)."""
    from tensorboard.summary.writer.record_writer import RecordWriter

    buffer = io.BytesIO()
    writer = RecordWriter(buffer)
    for record in records:
        writer.write(record)
    return buffer.getvalue()


def event(tag: str, step: int, tensor: Any = None, **value: Any) -> bytes:
    """One summary value in an Event; by default as tf.summary.scalar writes it (a float32 tensor of shape [])."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.types_pb2 import DT_FLOAT

    if tensor is None and not value:
        tensor = TensorProto(dtype=DT_FLOAT, float_val=[0.5])
    plugin = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"))
    kept = {"tensor": tensor} if tensor is not None else value
    return Event(step=step, summary=Summary(value=[Summary.Value(tag=tag, metadata=plugin, **kept)])).SerializeToString()


def scalar(tag: str, step: int, number: float) -> bytes:
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.types_pb2 import DT_FLOAT

    return event(tag, step, TensorProto(dtype=DT_FLOAT, float_val=[number]))


def tensor(dtype: str, dims: list[int], **fields: Any) -> Any:
    from tensorboard.compat.proto import types_pb2
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto

    shape = TensorShapeProto(dim=[TensorShapeProto.Dim(size=d) for d in dims])
    return TensorProto(dtype=getattr(types_pb2, dtype), tensor_shape=shape, **fields)


def write_run(run: Path, data: bytes, stage: str = "train", name: str = "events.out.tfevents.1") -> Path:
    (run / "tensorboard" / stage).mkdir(parents=True, exist_ok=True)
    (run / "tensorboard" / stage / name).write_bytes(data)
    return run / "tensorboard" / stage / name


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], list[str]]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def offsets(records: list[bytes]) -> list[int]:
    """Where each record's frame starts: 12 header bytes, the data, 4 CRC bytes."""
    starts = [0]
    for record in records:
        starts.append(starts[-1] + 16 + len(record))
    return starts


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working directory, so that paths print as `run/tensorboard/...`."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


HOSTILE_TAGS = ["$\\frac{$", "a\x00b--c\x07", "\u202e<b>&amp;", "$x$", "_hidden"]


def test_tags_are_plain_text_with_control_characters_escaped(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Mathtext (`$\\frac{$` was a ParseSyntaxException), a NUL (an SVG that did not parse), a bidi override and
    XML's own characters: each is drawn as the text it is, escaped where a terminal or XML would act on it."""
    records = [scalar(tag, step, 0.25 * step) for step in (1, 2) for tag in HOSTILE_TAGS]
    write_run(here / "run", framed(*records))
    write_run(here / "$\\frac{$run\x1b]0;t\x07", framed(*records), stage="$e$")
    code, out, err = cli(["curves", "run", "$\\frac{$run\x1b]0;t\x07", "-o", "c.svg"], capsys)
    assert (code, out, err) == (0, [f"wrote c.svg (svg: {len(HOSTILE_TAGS)} scalars of 2 runs)"], [])
    ET.fromstring((here / "c.svg").read_bytes())  # well-formed XML
    fig = figure([scan_run(here / "run").series, scan_run(here / "$\\frac{$run\x1b]0;t\x07").series])
    panels = [ax for ax in fig.axes if ax.get_visible()]
    # In the tags' order; `_hidden` after a space (matplotlib leaves labels starting `_` out of a legend).
    assert [ax.get_title() for ax in panels] == ["$\\frac{$", "$x$", " _hidden", "a\\x00b--c\\x07", "\\u202e<b>&amp;"]
    assert [t.get_text() for t in panels[0].get_legend().get_texts()] == ["run: train",
                                                                          "$\\frac{$run\\x1b]0;t\\x07: $e$"]
    assert not any(t.get_parse_math() for ax in panels for t in [ax.title, *ax.get_legend().get_texts()])

    code, out, err = cli(["report", str(SPEC), "--html", "--run", "run", "-o", "r.html"], capsys)
    assert code == 0 and err == [] and out[0].startswith("wrote r.html ")
    page = (here / "r.html").read_text()
    assert re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u202e]", page) is None
    for svg in re.findall(r'<div class="picture">(.*?)</div>', page, re.S):
        ET.fromstring(svg)  # both pictures, as the page holds them
    HTMLParser().feed(page)


def test_only_scalars_are_read_and_what_is_skipped_is_one_line(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A record that is not an Event, a tag that is not UTF-8, tensors that are not one number (vector, string,
    two values for one element, a shape declaring 2**29 elements), a histogram and an over-long tag: skipped
    and counted; the five ways a scalar is written (float, simple_value, double tensor_content, [1, 1], half)
    are read exactly."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import HistogramProto

    not_utf8 = scalar("@@@@", 1, 1.0).replace(b"@@@@", b"\xff\xfe\xfd\xfc")
    records = [
        Event(wall_time=1.0, file_version="brain.Event:2").SerializeToString(),  # no summary: nothing to count
        scalar("loss", 1, 0.5),
        b"\xff\xff\xff",
        not_utf8,
        event("vector", 1, tensor("DT_FLOAT", [3], float_val=[1, 2, 3])),
        event("declared", 1, tensor("DT_FLOAT", [2**29], float_val=[1])),
        event("text", 1, tensor("DT_STRING", [], string_val=[b"hi"])),
        event("histogram", 1, histo=HistogramProto(min=0, max=1, num=1)),
        event("loss", 2, simple_value=0.25),
        event("loss", 3, tensor("DT_DOUBLE", [], tensor_content=struct.pack("<d", 0.125))),
        event("loss", 4, tensor("DT_FLOAT", [1, 1], float_val=[0.0625])),
        event("two", 1, tensor("DT_FLOAT", [], float_val=[1, 2])),
        scalar("x" * 257, 1, 1.0),
        event("loss", 5, tensor("DT_HALF", [], half_val=[struct.unpack("<H", struct.pack("<e", 0.03125))[0]])),
    ]
    write_run(here / "run", framed(*records))
    code, out, err = cli(["curves", "run", "-o", "c.svg"], capsys)
    assert code == 0 and out == ["wrote c.svg (svg: 1 scalar of 1 run)"]
    assert err == ["run: note: read 5 scalar values from 1 event file; skipped 2 records (not an Event), 1 summary "
                   f"value (a tag over 256 characters) and 5 summary values ({NOT_ONE_NUMBER})"]
    (loss,) = scan_run(here / "run").series
    assert (loss.tag, loss.steps, loss.values) == ("loss", (1, 2, 3, 4, 5), (0.5, 0.25, 0.125, 0.0625, 0.03125))


RECORDS = [scalar("loss", step, 1 / step) for step in (1, 2, 3, 4)]
STARTS = offsets(RECORDS)
SIZE = STARTS[-1]


def damaged(case: str) -> bytes:
    data = bytearray(framed(*RECORDS))
    if case == "data crc":
        data[STARTS[1] + 12 + 3] ^= 0x40
    elif case == "length crc":
        data[STARTS[2]] ^= 0x01
    elif case == "cut in data":
        del data[STARTS[3] + 20:]
    elif case == "cut in header":
        del data[STARTS[3] + 5:]
    elif case == "length 2**62":
        from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

        length = struct.pack("<Q", 2**62)
        data[STARTS[3]:STARTS[3] + 12] = length + struct.pack("<I", masked_crc32c(length))
    return bytes(data)


FILE = "run/tensorboard/train/events.out.tfevents.1"


@pytest.mark.parametrize(("case", "steps", "note"), [
    ("data crc", (1, 3, 4), f"skipped 1 record whose data fails its CRC (the first: record 1 at byte {STARTS[1]}); "
                            "the records after it are read"),
    ("length crc", (1, 2), f"record 2 at byte {STARTS[2]}: its length fails its CRC (the file is damaged): the "
                           f"{SIZE - STARTS[2]} bytes from there are not read; the 2 records before it are read"),
    ("cut in data", (1, 2, 3), f"ends early: record 3 at byte {STARTS[3]} declares {len(RECORDS[3])} bytes of data "
                               "and a 4-byte CRC, 8 bytes are left; the 3 records before it are read"),
    ("cut in header", (1, 2, 3), f"ends early: record 3 at byte {STARTS[3]} has 5 of a record's 12 header bytes; "
                                 "the 3 records before it are read"),
    ("length 2**62", (1, 2, 3), f"ends early: record 3 at byte {STARTS[3]} declares 4,611,686,018,427,387,904 "
                                f"bytes of data and a 4-byte CRC, {len(RECORDS[3]) + 4} bytes are left; the 3 "
                                "records before it are read"),
])
def test_a_damaged_or_cut_file_says_where(here: Path, capsys: pytest.CaptureFixture[str], case: str,
                                          steps: tuple[int, ...], note: str) -> None:
    """TensorBoard's reader stopped silently at a bad CRC: here each says file, record and byte, and what
    was still read."""
    write_run(here / "run", damaged(case))
    code, out, err = cli(["curves", "run", "-o", "c.svg"], capsys)
    assert (code, out, err) == (0, ["wrote c.svg (svg: 1 scalar of 1 run)"], [f"{FILE}: note: {note}"])
    (loss,) = scan_run(here / "run").series
    assert loss.steps == steps


def test_a_record_over_the_cap_is_stepped_over_unread(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """MAX_RECORD + 1 bytes of data with a wrong data CRC (a sparse file): skipped as over the cap, not as a bad
    CRC, which shows it was never read."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    length = struct.pack("<Q", MAX_RECORD + 1)
    path = write_run(here / "run", framed(RECORDS[0]) + length + struct.pack("<I", masked_crc32c(length)))
    with open(path, "r+b") as file:
        file.seek(0, os.SEEK_END)
        file.seek(MAX_RECORD + 1 + 4, os.SEEK_CUR)
        file.write(framed(RECORDS[1]))
    code, _, err = cli(["curves", "run", "-o", "c.svg"], capsys)
    assert (code, err) == (0, ["run: note: read 2 scalar values from 1 event file; skipped 1 record (over 4 MiB, "
                               "not read)"])


def test_what_is_not_a_regular_file_is_not_opened(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A FIFO named like an event file would block a reader forever; a folder is not a file."""
    write_run(here / "run", framed(RECORDS[0]))
    os.mkfifo(here / FILE.replace(".1", ".2"))
    (here / FILE.replace(".1", ".3")).mkdir()
    code, _, err = cli(["curves", "run", "-o", "c.svg"], capsys)
    assert (code, err) == (0, [f"{FILE.replace('.1', '.2')}: note: not a regular file: not read",
                               f"{FILE.replace('.1', '.3')}: note: not a regular file: not read"])


def test_a_run_over_the_bounds_is_one_line(here: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    write_run(here / "wide", framed(*(scalar(f"t{i}", 1, 1.0) for i in range(curves.MAX_SERIES + 1))))
    code, out, err = cli(["curves", "wide", "-o", "c.svg"], capsys)
    assert (code, out, err) == (1, [], ["wide: error: received more than 64 scalars (stage and tag pairs); expected "
                                        "at most 64: each is a panel, or a line in one (TensorBoard reads larger runs)",
                                        "1 error found"])
    monkeypatch.setattr(curves, "MAX_POINTS", 10)  # the real bound, a million points, costs seconds to reach
    write_run(here / "long", framed(*(scalar("loss", step, 1.0) for step in range(11))))
    code, out, err = cli(["curves", "long", "-o", "c.svg"], capsys)
    assert (code, err) == (1, ["long: error: received more than 10 scalar points (stage, tag and step); expected at "
                               "most 10: every point is drawn (TensorBoard reads larger runs)", "1 error found"])
    assert not (here / "c.svg").exists()


def test_nothing_readable_is_one_line_saying_why(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No scalar at all: the refusal carries what was skipped and where the file ended."""
    vector = event("v", 1, tensor("DT_FLOAT", [2], float_val=[1, 2]))
    write_run(here / "run", framed(vector) + b"\0" * 5)
    code, out, err = cli(["curves", "run", "-o", "c.svg"], capsys)
    assert (code, out) == (1, [])
    assert err == [f"run: error: no TensorBoard scalars ({FILE}: ends early: record 1 at byte {16 + len(vector)} has 5 "
                   "of a record's 12 header bytes; the 1 record before it is read; read 0 scalar values from 1 event "
                   f"file; skipped 1 summary value ({NOT_ONE_NUMBER})); expected a run folder of `specgen train` "
                   "holding tensorboard/<stage>/events.out.tfevents.* (train the spec first)", "1 error found"]


EXPORT = {"parity_max_abs_diff": 2.5e-07, "parity_scaled_diff": 2.5e-07, "compared_examples": 64,
          "onnxruntime_accuracy": 0.9375, "tensorflow_accuracy": 0.9375,
          "precision": {"precision": "int8", "file": "model.int8.onnx", "bytes": 4000, "fp32_bytes": 16000,
                        "integer_kernels": 3, "float32_compute": ["logits"],
                        "accuracy": {"lost_points": 0.5, "accuracy": 0.9325, "fp32_accuracy": 0.9375, "budget": 1.0},
                        "speed": {"variant_ms": 0.5, "fp32_ms": 1.0, "batch": 32, "provider": "cpu", "speedup": 2.0}}}


def edited(key: str, value: Any) -> bytes:
    report = json.loads(json.dumps(EXPORT))
    *parents, last = key.split(".")
    inner = report
    for part in parents:
        inner = inner[part]
    if value is KeyError:
        del inner[last]
    else:
        inner[last] = value
    return json.dumps(report).encode()


EXPECTED = "as `specgen export` writes it"


@pytest.mark.parametrize(("data", "why"), [
    (b"{", "the whole file is text that is not JSON (Expecting property name enclosed in double quotes at line 1 "
           f"column 2); expected JSON text {EXPECTED}"),
    (b"\xff{}", f"the whole file is bytes that are not UTF-8 (at byte 0); expected JSON text {EXPECTED}"),
    (b"[" * 100_000, f"the whole file is JSON that Python does not read back (RecursionError); expected JSON text "
                     f"{EXPECTED}"),
    (b"[1]", f"the whole file is [1] (list); expected an object, {EXPECTED}"),
    (edited("parity_max_abs_diff", "0.1"), f"'parity_max_abs_diff' is '0.1' (str); expected a number, {EXPECTED}"),
    (edited("compared_examples", KeyError), f"'compared_examples' is nothing (the key is missing); expected the key, "
                                            f"{EXPECTED}"),
    (edited("tensorflow_accuracy", None), "'tensorflow_accuracy' is null; expected a number, since "
                                          "onnxruntime_accuracy is one"),
    (edited("precision.speed.batch", True), f"'precision.speed.batch' is True (bool); expected an integer, {EXPECTED}"),
    (edited("precision.float32_compute", [1]), f"'precision.float32_compute[0]' is 1 (int); expected a string, "
                                               f"{EXPECTED}"),
    (edited("precision.accuracy.lost_points", {}), f"'precision.accuracy.lost_points' is {{}} (dict); expected a "
                                                   f"number, {EXPECTED}"),
    (b'{"parity_max_abs_diff": NaN}', f"'parity_max_abs_diff' is nan (float); expected a finite number, {EXPECTED}"),
])
def test_a_malformed_export_json_is_one_line(here: Path, capsys: pytest.CaptureFixture[str], data: bytes,
                                             why: str) -> None:
    write_run(here / "run", framed(*RECORDS))
    (here / "run" / "export").mkdir()
    (here / "run" / "export" / "export.json").write_bytes(data)
    code, out, err = cli(["report", str(SPEC), "--html", "--run", "run", "-o", "r.html"], capsys)
    assert (code, out, err) == (1, [], [f"run/export/export.json: error: malformed export.json: {why}",
                                        "1 error found"])
    assert not (here / "r.html").exists()


def test_a_well_formed_export_json_is_shown(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(here / "run", framed(*RECORDS))
    (here / "run" / "export").mkdir()
    (here / "run" / "export" / "export.json").write_bytes(edited("precision.provider", "cpu\x1b[2J"))
    for name, size in (("model.int8.onnx", 4000), ("model.onnx", 16000)):  # the sizes export.json records
        (here / "run" / "export" / name).write_bytes(bytes(size))
    code, _, err = cli(["report", str(SPEC), "--html", "--run", "run", "-o", "r.html"], capsys)
    assert (code, err) == (0, [])
    page = (here / "r.html").read_text()
    assert ("parity: max abs diff 2.5e-07 between onnxruntime and TensorFlow on 64 examples (limit 1e-4)\n"
            "eval accuracy: onnxruntime 0.9375, TensorFlow 0.9375\n"
            "precision variants: model.onnx (fp32), model.int8.onnx\n"
            "int8: wrote run/export/model.int8.onnx (4,000 bytes, float32 16,000), 3 integer kernels") in page


def peak(args: list[str], cwd: Path) -> tuple[int, str, float, bool]:
    """Exit status, stderr, peak RSS (MiB) and whether TensorFlow was imported, of `specgen ARGS` in a fresh
    process. VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec, so a child would report this test's peak."""
    script = ("import re, sys\nfrom specgen.cli import main\ncode = main(sys.argv[1:])\n"
              "hwm = re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read()).group(1)\n"
              "print('peak', hwm, 'tensorflow' in sys.modules, file=sys.stderr)\nsys.exit(code)\n")
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=cwd)
    *lines, last = done.stderr.splitlines()
    assert last.startswith("peak "), done.stderr
    return done.returncode, "\n".join(lines), int(last.split()[1]) / 1024, last.split()[2] == "True"


def test_declared_sizes_allocate_nothing(here: Path) -> None:
    """The issue's 56-byte file declaring 2**29 float32 elements (2 GiB once TensorBoard's make_ndarray filled
    it), a record declaring 2**62 bytes and a sparse 64 MiB record, beside one real scalar: the peak RSS of the
    whole command stays within 32 MiB of the same command on the scalar alone, and under 300 MB (the interpreter,
    matplotlib and the protos are about 80 MiB of both; the most held at once is one record of at most
    MAX_RECORD, 4 MiB, and none of these is read whole; the tensor filled would be 2 GiB), and TensorFlow is
    never imported."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    value = Summary.Value(tag="declared", tensor=tensor("DT_FLOAT", [2**29], float_val=[1]))
    declared = framed(Event(step=1, summary=Summary(value=[value])).SerializeToString())
    assert len(declared) <= 56
    write_run(here / "plain", framed(RECORDS[0]))
    write_run(here / "hostile", framed(RECORDS[0]))
    write_run(here / "hostile", declared, name="events.out.tfevents.2")
    write_run(here / "hostile", damaged("length 2**62")[STARTS[3]:], name="events.out.tfevents.3")
    length = struct.pack("<Q", 64 * 2**20)
    big = write_run(here / "hostile", length + struct.pack("<I", masked_crc32c(length)), name="events.out.tfevents.4")
    os.truncate(big, 12 + 64 * 2**20 + 4)  # a hole: the data is never written, nor read
    code, err, baseline, tf = peak(["curves", "plain", "-o", "plain.svg"], here)
    assert (code, err, tf) == (0, "", False)
    code, err, hostile, tf = peak(["curves", "hostile", "-o", "hostile.svg"], here)
    assert (code, tf) == (0, False), err
    assert err.splitlines() == [
        "hostile/tensorboard/train/events.out.tfevents.3: note: ends early: record 0 at byte 0 declares "
        f"4,611,686,018,427,387,904 bytes of data and a 4-byte CRC, {len(RECORDS[3]) + 4} bytes are left; the 0 "
        "records before it are read",
        "hostile: note: read 1 scalar value from 4 event files; skipped 1 record (over 4 MiB, not read) and 1 summary "
        f"value ({NOT_ONE_NUMBER})"]
    assert hostile < min(baseline + 32, 300), (hostile, baseline)


def mutated(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        at, op = rng.randrange(len(out) or 1), rng.random()
        if op < 0.6 and out:
            out[at] = rng.randrange(256)
        elif op < 0.8:
            out[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op < 0.9:
            del out[at:at + rng.randint(1, 8)]
        else:
            del out[at:]
    return bytes(out)


def test_mutated_event_files_never_raise_a_traceback(tmp_path: Path) -> None:
    """300 seeded mutations of a valid event file: half to the file (the framing and CRCs catch them), half to
    one record's data, framed again with right CRCs (so the Event parser and the scalar reader see them). Each
    is read or refused with a SpecgenError; what was read is then drawn in one picture that must parse."""
    from tensorboard.compat.proto.event_pb2 import Event

    records = [Event(wall_time=1.0, file_version="brain.Event:2").SerializeToString(),
               *(scalar(tag, step, step / 3) for step in (1, 2, 3) for tag in ("loss", "accuracy")),
               event("loss", 4, simple_value=0.5), event("loss", 5, tensor("DT_DOUBLE", [1], double_val=[0.25]))]
    rng, drawn, outcomes = random.Random(28), {}, {"read": 0, "refused": 0}
    for i in range(300):
        if i % 2:
            data = mutated(rng, framed(*records))
        else:
            k = rng.randrange(len(records))
            data = framed(*records[:k], mutated(rng, records[k]), *records[k + 1:])
        write_run(tmp_path / "run", data)
        try:
            for series in scan_run(tmp_path / "run").series:
                drawn.setdefault(series.tag, series)
            outcomes["read"] += 1
        except SpecgenError:
            outcomes["refused"] += 1
    assert outcomes["read"] > 200 and len(drawn) > 5, (outcomes, len(drawn))
    ET.fromstring(render([list(drawn.values())[:12]]))
