"""Sources given data that a plain reader would take wrongly: a stale or half-written TFRecord cache, integers a
cast would wrap, compressed TFRecord files, CSV cells Python's float() takes and numpy refuses, a stray quote,
a class listed twice. Each is one positioned line, a note, or the right examples (docs/spec.md#data)."""

from __future__ import annotations

import gzip
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specgen.diagnostics import SpecError
from specgen.ir.resolve import build_ir
from specgen.spec.load import LoadedSpec, load_spec_text

tf = pytest.importorskip("tensorflow")

INT32 = "outside int32's range [-2147483648, 2147483647]"


@pytest.fixture(autouse=True)
def _in_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Messages show paths relative to the working directory: the test's folder."""
    monkeypatch.chdir(tmp_path)


def spec_text(train: str, eval_: str = "", dtype: str = "float32", width: int = 1) -> str:
    """A model of one dense layer over `x` (or a gather of `x`'s scores by an integer `a`), two classes."""
    picked = dtype != "float32"
    inputs = f"{{x: {{shape: [{width}]}}, a: {{shape: [1], dtype: {dtype}}}}}" if picked else f"{{x: {{shape: [{width}]}}}}"
    layers = ("\n  - {name: out, op: dense, units: 2, input: x}\n  - {name: pick, op: gather, inputs: [out, a]}"
              if picked else "\n  - {name: out, op: dense, units: 2}")
    loss = ("{kind: mean_squared_error, predictions: logits, labels: target}" if picked
            else "{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}")
    return f"""\
specgen: 1
name: hostile
inputs: {inputs}
outputs: {{logits: {'pick' if picked else 'out'}}}
layers:{layers}
loss: {loss}
optimizers: {{all: {{variables: "*", kind: sgd, learning_rate: 0.1}}}}
train: {{batch_size: 2}}
data:
  train: {train}
""" + (f"  eval: {eval_}\n" if eval_ else "")


def load(folder: Path, text: str) -> LoadedSpec:
    """The spec as `specgen` run in `folder` loads `s.yaml` (the working directory is the folder: _in_folder)."""
    assert Path.cwd() == folder
    return load_spec_text(text, "s.yaml", Path("s.yaml"))


def read(folder: Path, text: str, stage: str = "train") -> Any:
    from specgen.runtime import data

    loaded = load(folder, text)
    return data.read_stage(loaded, build_ir(loaded), stage)


def refused(folder: Path, text: str, stage: str = "train") -> str:
    with pytest.raises(SpecError) as caught:
        read(folder, text, stage)
    return str(caught.value)


def values(source: Any, name: str = "x", where: str = "features") -> list[float]:
    return [float(np.ravel(pair[0 if where == "features" else 1][name])[0]) for pair in source.dataset.as_numpy_iterator()]


def example(x: list[float], y: int, key: str = "y") -> bytes:
    return tf.train.Example(features=tf.train.Features(feature={
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=x)),
        key: tf.train.Feature(int64_list=tf.train.Int64List(value=[y]))})).SerializeToString()


def shard(path: Path, value: float, records: int = 8, options: str | None = None) -> None:
    with tf.io.TFRecordWriter(str(path), options=options) as writer:
        for i in range(records):
            writer.write(example([value], i % 2))


TFRECORD = "{tfrecord: t.tfrecord, features: {x: x}, labels: {label: y}, cache: tfcache}"


# --- tfrecord `cache: <path>` (a cache is the checked shards' or it is rebuilt) ---------------------------------

def test_a_cache_of_rewritten_shards_is_rebuilt_with_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shard(tmp_path / "t.tfrecord", 0.0)
    assert values(read(tmp_path, spec_text(TFRECORD))) == [0.0] * 8
    capsys.readouterr()
    shard(tmp_path / "t.tfrecord", 3.0)  # rewritten: TensorFlow's cache would replay the zeros
    os.utime(tmp_path / "t.tfrecord", ns=(1, 1))
    source = read(tmp_path, spec_text(TFRECORD))
    assert values(source) == [3.0] * 8
    note = capsys.readouterr().out
    assert ("note: data.train: removed 3 cache file(s) at " in note and "tfcache: a cache made from other shards ("
            in note and "t.tfrecord added, removed or rewritten since); the cache is written again" in note)
    names = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("tfcache"))
    assert len(names) == 3 and [n.split(".", 2)[2] for n in names] == ["data-00000-of-00001", "index", "json"]


def test_the_cache_is_written_whole_before_the_first_step(tmp_path: Path) -> None:
    shard(tmp_path / "t.tfrecord", 1.0, records=6)
    source = read(tmp_path, spec_text(TFRECORD))  # nothing iterated: training's first pass would have written it
    assert len([p for p in tmp_path.iterdir() if p.name.endswith(".index")]) == 1
    assert not [p for p in tmp_path.iterdir() if "lockfile" in p.name or "_0" in p.name]
    (tmp_path / "t.tfrecord").unlink()  # the stream now reads the cache alone
    assert values(source) == [1.0] * 6


def test_a_cache_left_by_a_run_stopped_mid_pass_is_removed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """TensorFlow's writer leaves `tfcache_0.*` and a lockfile at an iterator save; its next writer would stop
    with AlreadyExistsError. A partial of specgen's own whose process is gone goes too."""
    shard(tmp_path / "t.tfrecord", 2.0)
    writer = iter(tf.data.TFRecordDataset(str(tmp_path / "t.tfrecord")).cache(str(tmp_path / "tfcache")))
    next(writer)
    tf.train.Checkpoint(it=writer).write(str(tmp_path / "ckpt"))
    (tmp_path / "tfcache.0123456789abcdef.partial-elsewhere-1.lockfile").write_text("")  # another host's: kept
    dead = f"tfcache.0123456789abcdef.partial-{_host()}-{2**22 + 1}.lockfile"
    (tmp_path / dead).write_text("")
    assert sorted(p.name for p in tmp_path.glob("tfcache_0*")) == [
        "tfcache_0.data-00000-of-00001", "tfcache_0.index", "tfcache_0.lockfile"]
    assert values(read(tmp_path, spec_text(TFRECORD))) == [2.0] * 8
    note = capsys.readouterr().out
    # At least the 3 files listed above and the dead lockfile; TensorFlow's writer (its iterator still alive) may
    # have added temporary files of its own meanwhile on a loaded machine (6 were removed in one such run).
    removed = re.search(r"removed (\d+) cache file\(s\) at", note)
    assert removed is not None and int(removed.group(1)) >= 4, note
    assert ("TensorFlow cache files with no record of what they hold (an "
            "earlier specgen wrote them); a cache left unfinished by a process that stopped while writing it" in note)
    assert not (tmp_path / dead).exists() and (tmp_path / "tfcache.0123456789abcdef.partial-elsewhere-1.lockfile").exists()
    assert not list(tmp_path.glob("tfcache_0*"))


def _host() -> str:
    import re
    import socket

    return re.sub(r"[^A-Za-z0-9]", "-", socket.gethostname()) or "host"


def test_train_and_eval_sharing_a_cache_path_is_refused_at_eval(tmp_path: Path) -> None:
    shard(tmp_path / "t.tfrecord", 0.0)
    text = spec_text(TFRECORD, TFRECORD.replace("cache: tfcache", "cache: ./tfcache"))
    message = refused(tmp_path, text, "eval")
    from specgen.kinds.sources import clashes  # what validate asks (ir/resolve.py)

    # refused by validate (ir/resolve.py), before any reader runs; readers ask clashes too for specs built in code
    assert message.startswith("s.yaml:12:77: error: cache './tfcache' is also data.train's "
                              "cache path; each stage's examples need their own cache files")
    assert "give data.eval another path, such as './tfcache-eval'" in message
    assert [loc for loc, _ in clashes(load(tmp_path, text).spec.data)] == [("data", "eval", "cache")]


# --- integers: never wrapped by a cast -----------------------------------------------------------------------

def gather_source(kind: str) -> str:
    return {"npz": "{npz: g.npz, features: {x: x, a: a}, labels: {target: t}}",
            "csv": "{csv: g.csv, features: {x: x, a: a}, labels: {target: t}}",
            "tfrecord": "{tfrecord: g.tfrecord, features: {x: x, a: a}, labels: {target: t}}"}[kind]


def test_an_int64_npz_value_past_int32_is_refused_not_wrapped(tmp_path: Path) -> None:
    np.savez(tmp_path / "g.npz", x=np.ones((4, 1), np.float32), a=np.array([[0], [1], [2**32], [1]], np.int64),
             t=np.zeros((4, 1), np.float32))
    message = refused(tmp_path, spec_text(gather_source("npz"), dtype="int32"))
    assert f"'a' is 4294967296 at row 2 of array 'a' (element [2, 0]), {INT32}: input 'a' is declared int32" in message
    assert "never wrapped; fix the value, or declare the input int64" in message


def test_csv_integers_are_exact_and_checked_against_the_dtype(tmp_path: Path) -> None:
    (tmp_path / "g.csv").write_text("x,a,t\n1,0,0\n1,9007199254740993,0\n")
    source = read(tmp_path, spec_text(gather_source("csv"), dtype="int64"))
    assert [int(f["a"][0]) for f, _ in source.dataset.as_numpy_iterator()] == [0, 9007199254740993]  # not 2**53
    (tmp_path / "g.csv").write_text("x,a,t\n1,0,0\n1,4294967297,0\n")
    assert f"'a' is 4294967297 at line 3, column 'a', {INT32}" in refused(tmp_path, spec_text(gather_source("csv"),
                                                                                            dtype="int32"))
    (tmp_path / "g.csv").write_text("x,a,t\n1,0,0\n1,1e19,0\n")
    assert ("'a' is 1e+19 at line 3, column 'a', outside int64's range [-9223372036854775808, 9223372036854775807]"
            in refused(tmp_path, spec_text(gather_source("csv"), dtype="int64")))


def test_integers_read_through_floats_beyond_2_to_53_are_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "g.npz", x=np.ones((2, 1), np.float32), a=np.array([[1.0], [2.0**53 + 2]]),
             t=np.zeros((2, 1), np.float32))
    message = refused(tmp_path, spec_text(gather_source("npz"), dtype="int64"))
    assert ("'a' is 9.0072e+15 at row 1 of array 'a' (element [1, 0]), beyond 2**53 (9,007,199,254,740,992) in a "
            "float64 array, where a float no longer holds every integer") in message


def test_a_tfrecord_int64_past_int32_is_refused_at_its_record(tmp_path: Path) -> None:
    with tf.io.TFRecordWriter(str(tmp_path / "g.tfrecord")) as writer:
        for a in (0, 2**31):
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=[1.0])),
                "a": tf.train.Feature(int64_list=tf.train.Int64List(value=[a])),
                "t": tf.train.Feature(float_list=tf.train.FloatList(value=[0.0]))})).SerializeToString())
    assert f"'a' is 2147483648 at record 1, key 'a' (element [0]), {INT32}" in refused(tmp_path, spec_text(
        gather_source("tfrecord"), dtype="int32"))


# --- compressed TFRecord files ----------------------------------------------------------------------------------

@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_compressed_shards_read_with_the_compression_key(tmp_path: Path, compression: str) -> None:
    shard(tmp_path / "t.tfrecord", 5.0, records=6, options=compression.upper())
    plain = spec_text("{tfrecord: t.tfrecord, features: {x: x}, labels: {label: y}}")
    assert (f"data.train (t.tfrecord): the file is {compression.upper()}-compressed (it starts with the {compression} "
            f"header) and the source reads it uncompressed; set `compression: {compression}` on the source"
            in refused(tmp_path, plain))
    source = read(tmp_path, plain.replace("labels: {label: y}}", f"labels: {{label: y}}, compression: {compression}}}"))
    assert source.examples == 6 and values(source) == [5.0] * 6
    assert values(source, "label", "labels") == [0.0, 1.0] * 3


def test_a_compressed_frame_longer_than_the_inflated_data_is_refused(tmp_path: Path) -> None:
    """The framing walk runs over the inflated data: a length past its end is caught before TensorFlow sizes a
    buffer from it."""
    from specgen import framing

    record = example([1.0], 0)
    frame = framing.frame(record)
    (tmp_path / "t.tfrecord").write_bytes(gzip.compress(frame + frame[:-5]))
    message = refused(tmp_path, spec_text("{tfrecord: t.tfrecord, features: {x: x}, labels: {label: y}, "
                                          "compression: gzip}"))
    assert (f"cannot read record 1 (at byte {len(frame)} of the inflated data): it declares {len(record)} bytes, but "
            f"the inflated data has {len(record) - 1} after its header") in message
    (tmp_path / "t.tfrecord").write_bytes(gzip.compress(frame)[:-12])
    assert "the file ends inside its GZIP stream (it is cut short)" in refused(tmp_path, spec_text(
        "{tfrecord: t.tfrecord, features: {x: x}, labels: {label: y}, compression: gzip}"))


# --- CSV cells: numbers as numpy reads them; lines where the record starts ------------------------------------

CSV = "{csv: t.csv, features: {x: [a, b]}, labels: {label: y}}"


@pytest.mark.parametrize("cell", ["1_000", "\u0661\u0662", "\uff11\uff12"])
def test_csv_cells_python_takes_and_numpy_refuses_are_refused(tmp_path: Path, cell: str) -> None:
    (tmp_path / "t.csv").write_text(f"a,b,y\n1,2,0\n{cell},2,1\n", encoding="utf-8")
    message = refused(tmp_path, spec_text(CSV, width=2))
    assert (f"data.train (t.csv): line 3, column 'a' is {cell!r}, not a number (ASCII digits with an optional sign, "
            "'.' and exponent: no '_' separators, no other scripts' digits)") in message


def test_a_huge_field_in_an_unused_column_does_not_refuse_the_file(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("a,b,note,y\n1,2," + "z" * 200_000 + ",0\n3,4,,1\n")
    source = read(tmp_path, spec_text(CSV, width=2))
    assert [f["x"].tolist() for f, _ in source.dataset.as_numpy_iterator()] == [[1.0, 2.0], [3.0, 4.0]]


def test_a_stray_quote_is_named_at_the_line_it_opens(tmp_path: Path) -> None:
    rows = ["a,b,y"] + [f"{i},2,0" for i in range(1, 200)]
    rows[5] = '"5,2,0'
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    assert ("line 6 has 1 fields but the header has 3; every row needs one value per column (a quoted field opened "
            "on line 6 runs to the end of the file, line 200: is a '\"' stray or never closed?)"
            in refused(tmp_path, spec_text(CSV, width=2)))
    rows[5], rows[150] = '5,"2,0', '150,2",0'
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    assert ("line 6 (its record runs to line 151: a quoted field opened on line 6 holds line breaks; is a '\"' "
            "stray?), column 'b' is '2,0\\n6,2,0\\n7,2,0\\n8,2,0\\n9,2,0\\n10', not a number"
            in refused(tmp_path, spec_text(CSV, width=2)))


# --- images: a class listed twice -------------------------------------------------------------------------------

def test_a_class_listed_twice_is_refused_at_the_second(tmp_path: Path) -> None:
    text = spec_text("{images: root, image_size: [4, 4], classes: [a, b, a]}").replace(
        "{x: {shape: [1]}}", "{x: {shape: [4, 4, 3]}}").replace("- {name: out", "- {name: f, op: flatten}\n  - {name: out")
    with pytest.raises(SpecError) as caught:
        build_ir(load(tmp_path, text))
    assert str(caught.value).splitlines()[0] == (
        "s.yaml:12:61: error: class 'a' is listed twice (classes[0] and classes[2]); each class folder is one class "
        "id: list it once")

