"""Hostile command lines, files and environments: one line each and the documented exit status, never a traceback,
a hang or a silent misreading (docs/cli.md "Exit codes and diagnostics", docs/security.md).

Each test failed on the code before it (the checker's report of 2026-12-06): .npz members whose .npy header is
huge, malformed or written twice; U+2028 and YAML 1.1-only scalars read one way by specgen and another by every
editor; FIFOs handed to onnxruntime, TensorFlow and the Keras reader; a closed or full stdout; empty folders;
a build that said "wrote" for a file it deleted; usage mistakes that exited 1; /dev/null called a file to remove;
temporary files of a killed writer left forever. In process where it can be (fast), a subprocess only for the
one case that would hang the old code.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from specgen import atomic
from specgen.cli import main
from specgen.diagnostics import SpecError
from specgen.ir.resolve import build_ir
from specgen.runtime.sources import npz
from specgen.runtime.sources.context import SourceContext
from specgen.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[1]
MLP = (ROOT / "examples/specs/digits_mlp.yaml").read_text()


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs in its own folder, so messages name files as a user in it would see them."""
    monkeypatch.chdir(tmp_path)


def spec_with(tmp_path: Path, old: str, new: str, name: str = "v.yaml") -> Path:
    """digits_mlp.yaml with one edit, written as `name` in the working folder (a relative path)."""
    assert old in MLP
    (tmp_path / name).write_text(MLP.replace(old, new, 1))
    return Path(name)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], list[str]]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


# --- YAML that specgen and a YAML 1.2 editor would read differently ------------------------------------------

@pytest.mark.parametrize(("old", "new", "line"), [
    ("units: 128", "units: 010", "v.yaml:13:38: error: units: received 010: YAML 1.1 reads 8 (octal) and YAML 1.2 "
     "reads 10; write 10, or 8 for the octal value"),
    ("units: 128", "units: 1:30", "v.yaml:13:38: error: units: received 1:30: YAML 1.1 reads 90 and YAML 1.2 reads "
     "the text '1:30'; write 90, or quote it ('1:30') for the text"),
    ("units: 128", "units: 0b11", "v.yaml:13:38: error: units: received 0b11: YAML 1.1 reads 3 and YAML 1.2 reads "
     "the text '0b11'; write 3, or quote it ('0b11') for the text"),
    ("name: digits_mlp", "name: no", "v.yaml:3:7: error: name: received no: YAML 1.1 reads false and YAML 1.2 reads "
     "the text 'no'; write false, or quote it ('no') for the text"),
    ("  all:\n", "  on:\n", "v.yaml:20:3: error: a mapping key: received on: YAML 1.1 reads true and YAML 1.2 reads "
     "the text 'on'; write true, or quote it ('on') for the text"),
    ("units: 128", "units: 2001-12-14", "v.yaml:13:38: error: units: received 2001-12-14: YAML 1.1 reads a date and "
     "YAML 1.2 reads the text '2001-12-14'; quote it ('2001-12-14'); a spec holds no dates"),
    ("units: 128", "units: " + "9" * 5000, "v.yaml:13:38: error: units: received an integer of 5000 digits, expected "
     "at most 4300 digits (sizes, counts and steps are at most 2147483647)"),
    ("units: 128", "k" * 1100 + ": 128", "v.yaml:13:31: error: a mapping key of 1100 characters; YAML reads keys of "
     "at most 1024 characters (specgen's names are at most 128), so shorten it"),
    ("units: 128", "units: !!binary aGVsbG8=", "v.yaml:13:38: error: units: received binary data of 5 bytes "
     "(!!binary); a spec holds text, numbers and booleans: write the value itself, without the tag"),
])
def test_yaml_readers_disagree_or_python_words(tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str,
                                                line: str) -> None:
    """Old: `010` was 8, `1:30` 90, `0b11` 3 without a word; `no` was `received False (bool)`; 5000 digits echoed
    Python's int-limit advice; a long key was PyYAML's "expected ':'"; !!binary was `b'hello' (bytes)`."""
    code, out, err = run(capsys, "validate", str(spec_with(tmp_path, old, new)))
    assert (code, out, err) == (1, [], [line, "1 error found"])


def test_yaml_forms_both_dialects_read_alike_still_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = spec_with(tmp_path, "units: 128", "units: 0x80")
    spec.write_text(spec.read_text().replace("rate: 0.1", "rate: 1e-1").replace("seed: 1", "seed: 07"))
    code, out, _ = run(capsys, "validate", str(spec))
    assert code == 0 and out[0].startswith("ok: ")
    explicit = spec_with(tmp_path, "doc: Two-layer", "doc: !!str 2001-12-14 Two-layer", "e.yaml")
    assert run(capsys, "validate", str(explicit))[0] == 0


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\x85"])
def test_a_yaml11_line_break_is_refused_where_it_is(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    char: str) -> None:
    """Old: a comment `# was 4<U+2028>  seed: 2` set seed to 2 for specgen while every editor showed a comment,
    and every later position was one line off."""
    spec = spec_with(tmp_path, "  seed: 1\n", f"  seed: 1  # was 4 in the paper{char}  epochs: 1\n")
    code, out, err = run(capsys, "validate", str(spec))
    name = {"\u2028": "LINE SEPARATOR", "\u2029": "PARAGRAPH SEPARATOR", "\x85": "NEXT LINE (NEL)"}[char]
    assert (code, out) == (1, [])
    assert err[0].startswith(f"v.yaml:29:32: error: the character U+{ord(char):04X} ({name}) is a line break for "
                             "YAML 1.1 readers (specgen's) and an ordinary character for YAML 1.2 ones")
    assert run(capsys, "explain", str(spec), "train.epochs")[0] == 1


# --- .npz members: headers checked before any allocation ------------------------------------------------------

def npy_header_bytes(shape: tuple[int, ...], descr: str = "<f4") -> bytes:
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape!r}, }}"
    text += " " * (64 - (10 + len(text) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode()


def write_npz(path: Path, members: list[tuple[str, bytes]], method: int = zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", method) as archive:
        for name, data in members:
            archive.writestr(name, data)
    return path


def identity_model(path: Path) -> Path:
    """A model of one input `image` [N, 2] float32 and one output: enough for infer to read its --input."""
    graph = helper.make_graph([helper.make_node("Identity", ["image"], ["out"])], "g",
                              [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 2])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 2])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10), path)
    return path


@pytest.mark.parametrize(("members", "message"), [
    ([("image.npy", npy_header_bytes((2**40, 2)) + b"\0" * 64)],
     "array 'image' is damaged or truncated (its header declares 8 TiB of data, shape [1099511627776, 2] of float32, "
     "but the member holds 64 bytes); write the file again with numpy.savez"),
    ([("image.npy", b"\x93NUMPY\x01\x00\x10\x00{'x': __import__}\n")],
     "array 'image' is damaged or truncated (its .npy header cannot be read: "),
    ([("image.npy", npy_header_bytes((1, 2)) + b"\0" * 8), ("image.npy", npy_header_bytes((1, 2)) + b"\1" * 8)],
     "the archive holds two members named 'image' (a crafted or damaged .npz: readers disagree on which one "
     "counts); write the file again with numpy.savez"),
])
def test_infer_refuses_a_hostile_npz_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  members: list[tuple[str, bytes]], message: str) -> None:
    """Old: numpy's _ArrayMemoryError (256 TiB) or tokenize.TokenError tracebacks; a duplicate member was read."""
    identity_model(tmp_path / "m.onnx")
    with pytest.warns(UserWarning) if len(members) > 1 else _nothing():  # zipfile warns about the duplicate
        write_npz(tmp_path / "x.npz", members)
    code, out, err = run(capsys, "infer", "m.onnx", "--input", "x.npz", "--provider", "cpu")
    assert (code, out, len(err), err[-1]) == (1, [], 2, "1 error found")
    assert err[0].startswith(f"x.npz: error: {message}"), err[0]


@pytest.mark.parametrize(("array", "message"), [
    (np.array([[True, False]]), "input 'image': received dtype bool, expected float32"),
    (np.array([[16777217, 1]], dtype=np.int64),
     "input 'image': the value 16777217 at [0, 0] has no exact float32; received dtype int64"),
    (np.array([[2**64 - 1, 1]], dtype=np.uint64), "input 'image': the value 18446744073709551615 at [0, 0] has no exact"),
    (np.array([[1.0, -1e300]]),  # float64 past float32's range: the cast made it -inf (exit 0), the server refused it
     "input 'image': received -1e+300 at [0, 1], expected float32 numbers within +-3.4028235e+38 (or nan, inf, -inf)"),
])
def test_infer_refuses_a_cast_that_changes_values(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  array: np.ndarray, message: str) -> None:
    """numpy's same_kind lets bool through and rounds int64 16777217 to 16777216 in float32: refused, not rounded.
    Old: every one ran (exit 0) on the rounded values."""
    identity_model(tmp_path / "m.onnx")
    np.savez(tmp_path / "x.npz", image=array)
    code, out, err = run(capsys, "infer", "m.onnx", "--input", "x.npz", "--provider", "cpu")
    assert code == 1 and out == [] and err[-1] == "1 error found"
    assert message in err[0], err[0]



def test_a_narrower_float_runs_without_a_numpy_warning(tmp_path: Path) -> None:
    """float16 into a float32 input: its range check compared finfo(float16).max with float32's largest in float16,
    and numpy warned `overflow encountered in cast` (with predictor.py's path) on every call."""
    import warnings

    from specgen.runtime.predictor import Predictor

    identity_model(tmp_path / "m.onnx")
    predictor = Predictor(tmp_path / "m.onnx", provider="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        [out] = predictor({"image": np.array([[1.5, -65504.0]], dtype=np.float16)}).values()
    assert out.dtype == np.float32 and out.tolist() == [[1.5, -65504.0]]


TIED = " (the model names both axes 'seq': one length; inputs of independent lengths need a name each in the spec)"


def two_sequences_model(path: Path, dims: tuple[str | int | None, ...] = ("batch", "seq")) -> Path:
    """`a` and `b`, both [batch, seq] float32 (or `dims`), added: the graph declares that they share both dimensions."""
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["out"])], "g",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, dims) for n in ("a", "b")],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, dims)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10), path)
    return path


@pytest.mark.parametrize(("a", "b", "message"), [
    ((3, 5), (4, 5), "input 'b': received batch size 4 (shape [4, 5]), expected 3 like input 'a'"),  # b's 4th dropped
    ((1, 5), (3, 5), "input 'b': received batch size 3 (shape [3, 5]), expected 1 like input 'a'"),  # b's rows dropped
    ((2, 1), (2, 5), "input 'b': received size along 'seq' 5 (shape [2, 5]), expected 1 like input 'a'" + TIED),  # broadcast
    ((2, 2), (2, 3), "input 'b': received size along 'seq' 3 (shape [2, 3]), expected 2 like input 'a'" + TIED),  # ort's
])
def test_inputs_sharing_a_dimension_must_agree_along_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        a: tuple[int, int], b: tuple[int, int], message: str) -> None:
    """infer ran every row count of the first input (the others' extra rows dropped silently), the Predictor (so the
    server) broadcast a size of 1 over the other input or failed with onnxruntime's internal broadcast text."""
    from specgen.runtime.predictor import InputError, Predictor

    two_sequences_model(tmp_path / "m.onnx")
    arrays = {"a": np.ones(a, np.float32), "b": np.ones(b, np.float32)}
    np.savez(tmp_path / "x.npz", **arrays)
    code, out, err = run(capsys, "infer", "m.onnx", "--input", "x.npz", "--provider", "cpu")
    assert (code, out, err) == (1, [], [f"x.npz: error: {message}", "1 error found"])
    with pytest.raises(InputError) as caught:
        Predictor(tmp_path / "m.onnx", provider="cpu")(arrays)
    assert str(caught.value) == message


@pytest.mark.parametrize("dims", [("batch", "seq"), (None, 5), (1, 5)])  # named, unnamed and fixed batch
def test_an_input_of_no_rows_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    dims: tuple[str | int | None, ...]) -> None:
    """infer ran an empty batch through onnxruntime, whose kernels disagree on it: LSTM aborted the process (rc 134),
    a bidirectional GRU crashed it (rc 139), opset 23's Attention failed with an internal message. The server
    refused it already."""
    from specgen.runtime.predictor import InputError, Predictor

    two_sequences_model(tmp_path / "m.onnx", dims)
    arrays = {"a": np.ones((0, 5), np.float32), "b": np.ones((0, 5), np.float32)}
    np.savez(tmp_path / "x.npz", **arrays)
    code, out, err = run(capsys, "infer", "m.onnx", "--input", "x.npz", "--provider", "cpu")
    message = "input 'a': received batch size 0 (shape [0, 5]), expected at least 1 row"
    assert (code, out, err) == (1, [], [f"x.npz: error: {message}", "1 error found"])
    if not isinstance(dims[0], int):
        with pytest.raises(InputError) as caught:
            Predictor(tmp_path / "m.onnx", provider="cpu")(arrays)
        assert str(caught.value) == message


@pytest.mark.parametrize("dims", [("batch", "seq"), (1, 5)])
def test_a_single_value_where_rows_are_expected_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            dims: tuple[str | int, ...]) -> None:
    """A 0-d array has no rows: a fixed-batch model (run in pieces cut by rows) took len() of it, a traceback."""
    two_sequences_model(tmp_path / "m.onnx", dims)
    np.savez(tmp_path / "x.npz", a=np.float32(1), b=np.float32(2))
    code, out, err = run(capsys, "infer", "m.onnx", "--input", "x.npz", "--provider", "cpu")
    assert (code, out, err) == (1, [], [f"x.npz: error: input 'a': received shape [], expected {list(dims)}",
                                        "1 error found"])


def test_a_fixed_batch_model_checks_every_inputs_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A fixed batch runs in pieces cut by the first input's rows, each piece checked alone: `b`'s fourth row was
    never seen (exit 0, three outputs)."""
    two_sequences_model(tmp_path / "m.onnx", (1, 5))
    np.savez(tmp_path / "x.npz", a=np.ones((3, 5), np.float32), b=np.ones((4, 5), np.float32))
    code, out, err = run(capsys, "infer", "m.onnx", "--input", "x.npz", "--provider", "cpu")
    assert (code, out, err) == (1, [], ["x.npz: error: input 'b': received batch size 4 (shape [4, 5]), expected 3 "
                                        "like input 'a'", "1 error found"])


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_a_member_larger_than_memory_is_refused_from_its_header(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The 1 MB deflated member that inflates to 1 GiB: refused before numpy allocates, when memory is smaller."""
    from specgen.runtime.sources import npy_header  # new with the check

    data = write_npz(tmp_path / "x.npz", [("image.npy", npy_header_bytes((2**18, 2)) + b"\0" * 2**21)],
                     zipfile.ZIP_DEFLATED)
    monkeypatch.setattr(npy_header, "memory_limit", lambda: 2**20)
    with npz.open_npz(data) as archive, pytest.raises(npz.DataError) as caught:
        npz.npz_array(archive, "image")
    assert str(caught.value) == ("array 'image' declares shape [262144, 2] of float32 (2 MiB), more than the 1 MiB "
                                 "of memory this process may use; use a smaller file (or split the data)")


def test_an_ordinary_npz_reads_as_numpy_reads_it(tmp_path: Path) -> None:
    arrays = {"a": np.arange(12, dtype=">f8").reshape(3, 4), "b": np.asfortranarray(np.arange(6).reshape(2, 3)),
              "c": np.zeros((0, 3), np.float32)}
    np.savez_compressed(tmp_path / "x.npz", **arrays)  # type: ignore[arg-type]
    with npz.open_npz(tmp_path / "x.npz") as archive:
        for name, array in arrays.items():
            read = npz.npz_array(archive, name)
            assert read.dtype == array.dtype and read.shape == array.shape and np.array_equal(read, array)


DATA_SPEC = """specgen: 1
name: tab
inputs: {{x: {{shape: [3]}}}}
outputs: {{logits: out}}
layers:
  - {{name: out, op: dense, units: 2}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers: {{all: {{variables: "*", kind: sgd, learning_rate: 0.1}}}}
train: {{batch_size: 2}}
data:
  train: {{npz: d.npz, features: {{x: x}}, labels: {{{labels}}}}}
"""


def read_source(tmp_path: Path, labels: str = "label: y") -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(DATA_SPEC.format(labels=labels))
    loaded = load_spec(Path("s.yaml"))
    npz.read(SourceContext(loaded, build_ir(loaded), "train"))


@pytest.mark.parametrize(("arrays", "labels", "message"), [
    ({"x": np.ones((4, 3), np.float32), "y": np.array([0, 1, 0, 1]), "z": np.arange(7)}, "label: y, extra: z",
     "s.yaml:11:16: error: data.train (d.npz): features and labels have different numbers of examples ('x' 4, "
     "'label' 4, 'extra' 7); each needs one row per example"),
    ({"x": np.array([[1, 2, 2**24 + 1]] * 4, np.int64), "y": np.array([0, 1, 0, 1])}, "label: y",
     "s.yaml:11:37: error: data.train (d.npz): 'x' is 16777217 at row 0 of array 'x' (element [0, 2]), which "
     "float32 cannot hold exactly (it would be 16777216); a float input takes integers up to 16777216 in magnitude "
     "exactly: scale them, or store them as floats yourself"),
])
def test_every_array_a_source_names_is_checked(tmp_path: Path, arrays: dict[str, np.ndarray], labels: str,
                                               message: str) -> None:
    """Old: a label no loss reads went to tf.data unchecked (a TensorFlow traceback for another length), and an
    int64 feature past 2**24 became another number in float32 without a word."""
    np.savez(tmp_path / "d.npz", **arrays)  # type: ignore[arg-type]
    with pytest.raises(SpecError) as caught:
        read_source(tmp_path, labels)
    assert [str(d) for d in caught.value.diagnostics] == [message]


def test_a_source_checks_every_header_before_reading(tmp_path: Path) -> None:
    write_npz(tmp_path / "d.npz", [("x.npy", npy_header_bytes((4, 3)) + b"\0" * 48),
                                   ("y.npy", npy_header_bytes((2**40,), "<i8") + b"\0" * 8),
                                   ("unread.npy", b"not an array")])
    with pytest.raises(SpecError) as caught:
        read_source(tmp_path)
    assert str(caught.value.diagnostics[0]).startswith("s.yaml:11:57: error: data.train (d.npz): array 'y' is "
                                                       "damaged or truncated (its header declares 8 TiB of data")


# --- paths that are not regular files -------------------------------------------------------------------------

def test_infer_refuses_a_fifo_model_at_once(tmp_path: Path) -> None:
    """Old: onnxruntime opened the FIFO and waited forever (a subprocess, so the old code fails, not hangs)."""
    os.mkfifo(tmp_path / "m.onnx")
    np.savez(tmp_path / "x.npz", image=np.zeros((1, 2), np.float32))
    code = "import sys; from specgen.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", code, "infer", "m.onnx", "--input", "x.npz"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.splitlines() == ["m.onnx: error: the model is a FIFO (named pipe), not a regular file",
                                        "1 error found"]


def test_a_checkpoint_file_that_is_a_fifo_is_named(tmp_path: Path) -> None:
    """Old: TensorFlow's reader blocked on a FIFO .index (restore-plan hung); checked before TensorFlow reads."""
    pytest.importorskip("tensorflow")
    from specgen.runtime.commands.restore_sources import require_checkpoint_files

    os.mkfifo(tmp_path / "ckpt.index")
    (tmp_path / "ckpt.data-00000-of-00001").mkdir()
    with pytest.raises(ValueError, match=r"ckpt.index is a FIFO \(named pipe\), not a regular file$"):
        require_checkpoint_files(tmp_path / "ckpt")
    (tmp_path / "ckpt.index").unlink()
    (tmp_path / "ckpt.index").write_bytes(b"")
    with pytest.raises(ValueError, match=r"ckpt.data-00000-of-00001 is a directory, not a regular file$"):
        require_checkpoint_files(tmp_path / "ckpt")


@pytest.mark.parametrize(("make", "what"), [(os.mkfifo, "a FIFO (named pipe)"), (os.mkdir, "a directory")])
def test_import_keras_names_what_the_source_is(tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object,
                                               what: str) -> None:
    """Old: `f.keras: error: f.keras: no such file` for a FIFO or a folder that exists."""
    make(tmp_path / "f.keras")  # type: ignore[operator]
    code, out, err = run(capsys, "import", "keras", "f.keras", "-o", "s.yaml")
    assert (code, out) == (1, [])
    assert err[0] == f"f.keras: error: the path is {what}, not a regular file; expected a .keras or .h5 model file"
    assert not (tmp_path / "s.yaml").exists()


@pytest.mark.parametrize("args", [["build", "SPEC", "--out", "/dev/null"], ["schema", "-o", "/dev/null"],
                                  ["graph", "SPEC", "-o", "/dev/null", "--format", "svg"]])
def test_a_device_as_output_is_never_called_removable(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      args: list[str]) -> None:
    """Old: '/dev/null: it is a device, pipe or socket ...; remove it (or choose another path)'."""
    spec = spec_with(tmp_path, "seed: 1", "seed: 1")
    code, out, err = run(capsys, *[str(spec) if a == "SPEC" else a for a in args])
    assert (code, out) == (1, [])
    assert err == ["specgen: error: cannot write /dev/null: it is a device, not a regular file; specgen reads and "
                   "writes only regular files; choose a regular file path and run again"]


# --- standard output that cannot be written --------------------------------------------------------------------

def test_a_closed_stdout_is_one_line_and_nothing_is_done(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Old: AttributeError traceback ('NoneType' object has no attribute 'flush'), after build wrote its files."""
    spec = spec_with(tmp_path, "seed: 1", "seed: 1")
    monkeypatch.setattr(sys, "stdout", None)  # what Python sets when fd 1 is closed at start (`>&-`)
    assert main(["build", str(spec), "--out", str(tmp_path / "gen")]) == 1
    assert capsys.readouterr().err.startswith("specgen: error: standard output is closed (the command was started "
                                              "with >&-); specgen prints its results there, so it did nothing")
    assert not (tmp_path / "gen").exists()


def test_a_full_stdout_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Old: 'specgen: error: no space left on device', naming nothing."""
    spec = spec_with(tmp_path, "seed: 1", "seed: 1")
    with open("/dev/full", "w") as full:
        monkeypatch.setattr(sys, "stdout", full)
        assert main(["validate", str(spec)]) == 1
        monkeypatch.undo()
    assert capsys.readouterr().err == ("specgen: error: cannot write standard output: no space left on device; what "
                                       "it printed is incomplete (files it wrote are whole: each is written "
                                       "atomically)\n")


# --- folders, reports and builds ------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["validate", "report", "build"])
def test_a_folder_without_specs_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    """Old: `report specs/` printed nothing and exited 0; validate/build said no path was given."""
    (tmp_path / "specs").mkdir()
    code, out, err = run(capsys, command, "specs")
    assert (code, out, err) == (1, [], ["specgen: error: no spec files (*.yaml, *.yml) in specs"])


def test_report_shows_every_specs_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Old: the first broken spec's errors only."""
    a = spec_with(tmp_path, "rate: 0.1", "rate: 1.5", "a.yaml")
    b = spec_with(tmp_path, "units: 128", "units: -1", "b.yaml")
    code, out, err = run(capsys, "report", str(a), str(b))
    assert (code, out, err[-1]) == (1, [], "2 errors found")
    assert [line.split(":")[0] for line in err[:-1]] == [str(a), str(b)]


def test_build_says_kept_for_a_file_it_did_not_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Old: 'wrote gen/digits_mlp/notes.txt' for the file it had just deleted; then (round 8) it deleted it as 'no
    longer generated', though specgen never wrote it: now it is kept and named (tests/test_build_stale_r8.py)."""
    spec = spec_with(tmp_path, "seed: 1", "seed: 1")
    assert run(capsys, "build", str(spec), "--out", "gen")[0] == 0
    (tmp_path / "gen" / "digits_mlp" / "notes.txt").write_text("notes\n")
    assert run(capsys, "build", str(spec), "--out", "gen") == (
        0, ["built 1 spec(s) into gen: 0 file(s) changed"],
        ["specgen build: kept gen/digits_mlp/notes.txt (not written by specgen: remove it by hand)"])
    assert (tmp_path / "gen" / "digits_mlp" / "notes.txt").read_text() == "notes\n"


# --- command-line mistakes found after argparse: exit 2 -------------------------------------------------------

@pytest.mark.parametrize(("args", "line"), [
    (["graph", "SPEC", "-o", "x.png"], "specgen graph: error: cannot tell the format of -o x.png from '.png'"),
    (["curves", "runs", "-o", "x.jpg"], "specgen curves: error: cannot write curves to -o x.jpg: got '.jpg'"),
    (["export", "SPEC", "-o", "out", "--alias", "prod"], "specgen export: error: --alias prod: --alias names the "
     "alias of --register's version; expected --register NAME with it"),
    (["import", "keras", "x.keras", "-o", "s.yaml", "--classes", "3"], "specgen import: error: --input-shape and "
     "--classes apply to constructor names only, not to model files (received x.keras)"),
    (["import", "keras", "ResNet50", "-o", "s.keras"], "specgen import: error: -o s.keras: a spec is a YAML file, "
     "not a Keras model file (.keras); choose a path ending in .yaml"),
    (["report", "SPEC", "--run", "runs"], "specgen report: error: got --run without --html; expected --html with "
     "them"),
])
def test_usage_mistakes_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                               args: list[str], line: str) -> None:
    """Old: exit 1, the status of 'a spec has errors'."""
    spec = spec_with(tmp_path, "seed: 1", "seed: 1")
    code, out, err = run(capsys, *[str(spec) if a == "SPEC" else a for a in args])
    assert (code, out, len(err)) == (2, [], 1) and err[0].startswith(line), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.yaml"]


def test_a_feed_without_equals_is_argparses_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """Old: exit 1 after loading the model."""
    with pytest.raises(SystemExit) as caught:
        main(["infer", "m.onnx", "--input", "x.npz", "--feed", "noequals"])
    assert caught.value.code == 2
    assert "argument --feed: expected INPUT=ARRAY" in capsys.readouterr().err


# --- temporary files of a killed writer -----------------------------------------------------------------------

def test_a_killed_writers_temporary_file_is_removed_by_the_next_write(tmp_path: Path) -> None:
    """Old: `.NAME.<pid>.<hex>.tmp` beside the target forever after a kill -9 between create and rename."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    target = tmp_path / "model.svg"
    old = time.time() - 3600
    stale = tmp_path / f".model.svg.{dead.pid}.0123abcd.tmp"
    young = tmp_path / f".model.svg.{dead.pid}.89abcdef.tmp"  # a writer on another machine may still be at it
    live = tmp_path / f".model.svg.{os.getppid()}.0123abcd.tmp"
    other = tmp_path / f".other.svg.{dead.pid}.0123abcd.tmp"
    for path in (stale, young, live, other):
        path.write_bytes(b"half")
    for path in (stale, live, other):
        os.utime(path, (old, old))
    atomic.write_atomic(target, "new", fsync=False)
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (target, young, live, other))


def _run_module(folder: Path, module: str) -> subprocess.CompletedProcess[str]:
    """`python -m <module>` for a module written into `folder`, with this checkout's specgen importable."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(Path(__file__).resolve().parents[1])])}
    return subprocess.run([sys.executable, "-m", module], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=60)


def test_a_ctrl_c_caught_after_a_string_exec_still_exits_130_under_python_m(tmp_path: Path) -> None:
    """CPython notes a KeyboardInterrupt that leaves code run from a string (exec of a str, PyRun_String: pybind11's
    py::exec inside TensorFlow's imports) and, under `python -m`, kills the process with SIGINT at exit even when
    the interrupt was caught: `python -m specgen train` then and then ended -2 instead of 130 (the full suite caught
    it once). raising_interrupts clears the note when its command saw a Ctrl-C, however the command ended; the
    module below reproduces the state without TensorFlow: a real SIGINT raised inside a string exec."""
    (tmp_path / "interrupted.py").write_text(
        "import sys\nfrom specgen.cli import _interrupted\nfrom specgen.runtime.interrupt import raising_interrupts\n"
        "with raising_interrupts():\n"
        "    try:\n        exec('import os, signal\\nos.kill(os.getpid(), signal.SIGINT)\\nsum(range(10**6))', {})\n"
        "    except KeyboardInterrupt:\n        code = _interrupted(['train'])\n"
        "sys.exit(code)\n")
    done = _run_module(tmp_path, "interrupted")
    assert (done.returncode, done.stderr) == (130, "\nspecgen train: interrupted (Ctrl-C); it stopped before it "
                                                   "finished\n")


def test_a_ctrl_c_python_swallows_is_not_lost(tmp_path: Path) -> None:
    """A SIGINT handled inside a weakref callback (importlib's module-lock callback while TensorFlow imports) raised
    KeyboardInterrupt where Python swallows it: "Exception ignored in ..." on stderr, and `specgen train` ran to its
    end with exit 0 (a fresh clone's CI caught it). raising_interrupts notes it first and keeps the report quiet;
    Interrupts starts from the note, so the command stops at its first check with one line."""
    (tmp_path / "swallowed.py").write_text(
        "import os, signal, sys, weakref\n"
        "from specgen.runtime.interrupt import Interrupts, pending, raising_interrupts\n"
        "class Held: pass\n"
        "with raising_interrupts():\n"
        "    held = Held()\n"
        "    ref = weakref.ref(held, lambda _: os.kill(os.getpid(), signal.SIGINT))\n"
        "    del held  # the callback runs here; the handler raises inside it, where Python swallows it\n"
        "    print('swallowed, noted:', pending(), flush=True)\n"
        "    with Interrupts() as interrupts:\n"
        "        try:\n            interrupts.check()\n"
        "        except KeyboardInterrupt:\n            sys.exit(130)\n"
        "sys.exit(0)\n")
    done = _run_module(tmp_path, "swallowed")
    assert (done.returncode, done.stdout, done.stderr) == (130, "swallowed, noted: True\n", "")
