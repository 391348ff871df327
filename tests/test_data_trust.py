"""Issue 9 (items 3 and 12): data, checkpoints and numeric gates trusted only after a check.

Every bad input here used to end in a traceback, or worse in a NaN that went through the
export parity gate (`nan > 1e-4` is False); each must now be one `error:` line that names
the file, the row and the column.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from specgen.cli import main
from specgen.diagnostics import SpecError
from specgen.ir.resolve import build_ir
from specgen.spec.load import load_spec_text

SPEC = """\
specgen: 1
name: tabular
inputs: {{x: {{shape: [3]}}}}
outputs: {{logits: out}}
layers:
  - {{name: hidden, op: dense, units: 4, activation: relu}}
  - {{name: out, op: dense, units: 2}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers: {{all: {{variables: "*", kind: sgd, learning_rate: 0.1}}}}
train: {{batch_size: 4}}
data:
  {stage}: {source}
"""
GOOD_ROWS = ["0.1,0.2,0.3,1", "0.4,0.5,0.6,0", "0.7,0.8,0.9,1", "1.0,1.1,1.2,0", "1.3,1.4,1.5,1"]
CSV = "{csv: t.csv, features: {x: [a, b, c]}, labels: {label: label}}"
NPZ = "{npz: t.npz, features: {x: x}, labels: {label: y}}"


def read(folder: Path, source: str, stage: str = "train", text: str = SPEC) -> int:
    from specgen.runtime import data

    loaded = load_spec_text(text.format(stage=stage, source=source), str(folder / "s.yaml"), folder / "s.yaml")
    found = data.read_stage(loaded, build_ir(loaded), stage)
    assert found is not None
    return found.examples


def failure(folder: Path, source: str, file: str, stage: str = "train", text: str = SPEC) -> str:
    """The message of the one diagnostic, after `data.<stage> (<file>): `; checks that it is one line at the entry."""
    with pytest.raises(SpecError) as info:
        read(folder, source, stage, text)
    shown = str(info.value)
    assert len(info.value.diagnostics) == 1 and "\n" not in shown, shown
    head = f"data.{stage} ({folder / file}): "
    line = text.splitlines().index("data:") + 2
    assert shown.startswith(f"{folder / 's.yaml'}:{line}:") and head in shown, shown
    return shown.split(head, 1)[1]


def write_csv(folder: Path, rows: list[str], header: str = "a,b,c,label") -> None:
    (folder / "t.csv").write_text("\n".join([header, *rows]) + "\n")


def replace(row: int, text: str) -> list[str]:
    return [text if i == row else r for i, r in enumerate(GOOD_ROWS)]


FILL = "features and labels must be finite numbers (fill in or drop those rows)"


@pytest.mark.parametrize(("rows", "message"), [
    (replace(2, "0.7,,0.9,1"), "line 4, column 'b' is empty; features and labels must be numbers (fill in or drop "
                               "that row)"),
    (replace(1, "0.4,abc,0.6,0"), "line 3, column 'b' is 'abc', not a number; features and labels must be numbers "
                                  "(fill in or drop that row)"),
    (replace(3, "1.0,1.1,nan,0"), f"'x' is NaN at line 5, column 'c'; {FILL}"),
    (replace(0, "inf,0.2,-inf,1"), f"'x' is infinite at line 2, column 'a' (and 1 more non-finite values); {FILL}"),
    (replace(4, "1.3,1e300,1.5,1"), f"'x' is 1e+300, beyond float32's range at line 6, column 'b'; {FILL}"),
    (replace(2, "0.7,0.8,0.9,nan"), f"'label' is NaN at line 4, column 'label'; {FILL}"),
    (replace(2, "0.7,0.8,0.9,0.5"), "'label' is 0.5 at line 4, column 'label'; integers are expected"),
    (replace(3, "1.0,1.1,1.2,2"), "'label' is 2 at line 5, column 'label', but output 'logits' has 2 classes: "
                                  "values must be integers in [0, 2)"),
    (replace(1, "0.4,0.5,0.6,-1"), "'label' is -1 at line 3, column 'label', but output 'logits' has 2 classes: "
                                   "values must be integers in [0, 2)"),
    (replace(2, "0.7,0.8,1"), "line 4 has 3 fields but the header has 4; every row needs one value per column"),
    (replace(2, "0.7,0.8,0.9,1,5"), "line 4 has 5 fields but the header has 4; every row needs one value per column"),
    ([], "the file holds no examples; the train stage needs at least 4"),
    (GOOD_ROWS[:3], "3 examples, fewer than train.batch_size (4): training uses full batches only, so no update "
                    "could run; add data or lower train.batch_size"),
])
def test_bad_csv_rows_are_one_line_naming_line_and_column(tmp_path: Path, rows: list[str], message: str) -> None:
    write_csv(tmp_path, rows)
    assert failure(tmp_path, CSV, "t.csv") == message


def test_csv_file_level_problems(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_bytes(b"a,b,c,label\n0.1,0.2,0.3,1\n0.4,\xff,0.6,0\n")
    assert failure(tmp_path, CSV, "t.csv") == "line 3 is not UTF-8 text; save the CSV as UTF-8"
    (tmp_path / "t.csv").write_text("")
    assert failure(tmp_path, CSV, "t.csv") == "the file is empty; a header row naming the columns is expected"
    write_csv(tmp_path, GOOD_ROWS, header="a,b,b,label")
    assert failure(tmp_path, "{csv: t.csv, features: {x: [a, b, b]}, labels: {label: label}}", "t.csv") == \
        "column 'b' appears 2 times in the header; rename the copies"


def test_eval_needs_one_example_and_blank_lines_are_skipped(tmp_path: Path) -> None:
    write_csv(tmp_path, [])
    assert failure(tmp_path, CSV, "t.csv", stage="eval") == "the file holds no examples; the eval stage needs at least 1"
    write_csv(tmp_path, ["0.1,0.2,0.3,1", "", "0.4,0.5,0.6,0", ""])
    assert read(tmp_path, CSV, stage="eval") == 2


def save_npz(folder: Path, **arrays: np.ndarray) -> None:
    np.savez(folder / "t.npz", **arrays)


X = np.arange(15, dtype=np.float32).reshape(5, 3) / 10
Y = np.array([1, 0, 1, 0, 1])


def test_npz_that_is_not_an_npz(tmp_path: Path) -> None:
    (tmp_path / "t.npz").write_text("x,y\n1,2\n")
    assert failure(tmp_path, NPZ, "t.npz") == \
        "not an .npz file (it does not start with a zip header); save the arrays with numpy.savez"
    with open(tmp_path / "t.npz", "wb") as handle:  # a handle: np.save adds .npy to a path
        np.save(handle, X)
    assert failure(tmp_path, NPZ, "t.npz") == \
        "this is a single .npy array, not an .npz archive; save the arrays with numpy.savez(path, name=array, ...)"


def test_truncated_npz(tmp_path: Path) -> None:
    save_npz(tmp_path, x=X, y=Y)
    whole = (tmp_path / "t.npz").read_bytes()
    (tmp_path / "t.npz").write_bytes(whole[: len(whole) // 2])
    assert failure(tmp_path, NPZ, "t.npz") == \
        "damaged or truncated .npz file (File is not a zip file); write it again with numpy.savez"


def test_npz_object_arrays_are_never_unpickled(tmp_path: Path) -> None:
    save_npz(tmp_path, x=np.array([[1.0, 2.0, 3.0]] * 5, dtype=object), y=Y)
    assert failure(tmp_path, NPZ, "t.npz") == ("array 'x' holds Python objects (dtype object), which specgen does "
                                              "not load (unpickling can run code); save it as a numeric array")


@pytest.mark.parametrize(("arrays", "message"), [
    ({"x": np.where(np.arange(15).reshape(5, 3) == 7, np.nan, X), "y": Y},
     f"'x' is NaN at row 2 of array 'x' (element [2, 1]); {FILL}"),
    ({"x": X, "y": np.array([1.0, 0.0, np.inf, 0.0, 1.0])}, f"'label' is infinite at row 2 of array 'y'; {FILL}"),
    ({"x": X, "y": np.array([1, 0, 7, 0, 1])},
     "'label' is 7 at row 2 of array 'y', but output 'logits' has 2 classes: values must be integers in [0, 2)"),
    ({"x": X, "y": np.array([[1], [0], [1], [0], [-3]])},
     "'label' is -3 at row 4 of array 'y', but output 'logits' has 2 classes: values must be integers in [0, 2)"),
    ({"x": X, "y": np.array(1)}, "'label' is a single value (a 0-d array); one row per example is expected"),
    ({"x": X, "y": Y[:4]}, "features and labels have different numbers of examples ('x' 5, 'label' 4); each needs "
                           "one row per example"),
    ({"x": X.astype(str), "y": Y}, "'x' has dtype <U32 (text) but numbers are expected"),
    ({"x": X, "y": Y.astype(str)}, "'label' has dtype <U21 (text) but integers are expected"),
    ({"x": X > 0, "y": Y}, "'x' has dtype bool (booleans) but numbers are expected"),
    ({"x": X[:, :2], "y": Y}, "'x' has shape [N, 2] but the spec declares [N, 3]"),
    ({"x": X[:0], "y": Y[:0]}, "the file holds no examples; the train stage needs at least 4"),
])
def test_bad_npz_arrays(tmp_path: Path, arrays: dict[str, np.ndarray], message: str) -> None:
    save_npz(tmp_path, **arrays)
    assert failure(tmp_path, NPZ, "t.npz") == message


def test_embedding_ids_out_of_range(tmp_path: Path) -> None:
    text = SPEC.replace("{{x: {{shape: [3]}}}}", "{{x: {{shape: [3], dtype: int32}}}}").replace(
        "{{name: hidden, op: dense, units: 4, activation: relu}}", "{{name: emb, op: embedding, vocab_size: 10, dim: 2}}\n"
        "  - {{name: flat, op: flatten}}")
    save_npz(tmp_path, x=np.array([[1, 2, 3]] * 4 + [[4, 10, 5]]), y=Y)
    assert failure(tmp_path, NPZ, "t.npz", text=text) == ("'x' is 10 at row 4 of array 'x' (element [4, 1]), but "
                                                          "embedding 'emb' has vocab_size 10: values must be integers "
                                                          "in [0, 10)")


def write_tfrecord(folder: Path, x: np.ndarray, y: np.ndarray) -> None:
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(folder / "t.tfrecord")) as writer:
        for row, label in zip(x, y, strict=True):
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=row.tolist())),
                "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
            })).SerializeToString())


def test_tfrecord_values_are_checked_before_training(tmp_path: Path) -> None:
    source = "{tfrecord: t.tfrecord, features: {x: x}, labels: {label: y}}"
    write_tfrecord(tmp_path, np.where(np.arange(15).reshape(5, 3) == 10, np.nan, X), Y)
    assert failure(tmp_path, source, "t.tfrecord") == f"'x' is NaN at record 3, key 'x' (element [1]); {FILL}"
    write_tfrecord(tmp_path, X, np.array([1, 0, 1, 5, 1]))
    assert failure(tmp_path, source, "t.tfrecord") == ("'label' is 5 at record 3, key 'y', but output 'logits' has 2 "
                                                       "classes: values must be integers in [0, 2)")
    write_tfrecord(tmp_path, X, Y)
    (tmp_path / "t.tfrecord").write_bytes((tmp_path / "t.tfrecord").read_bytes()[:-7])
    assert failure(tmp_path, source, "t.tfrecord").startswith("cannot read record 4 (at byte ")
    write_tfrecord(tmp_path, X, Y)
    assert read(tmp_path, source) == 5


# numeric gates


def test_gates_fail_on_non_finite_values() -> None:
    from specgen.runtime.parity import accuracy, max_abs_diff, within

    assert within(0.0, 1e-4) and within(1e-4, 1e-4) and not within(2e-4, 1e-4)
    assert not within(math.nan, 1e-4) and not within(math.inf, 1e-4) and not within(-math.inf, 1e-4)
    a = {"p": np.zeros(3, np.float32), "q": np.zeros(2, np.float32)}
    b = {"p": np.full(3, 0.5, np.float32), "q": np.array([0.0, np.nan], np.float32)}
    assert max(0.5, math.nan) == 0.5  # why max_abs_diff must not use Python's max over outputs
    assert math.isnan(max_abs_diff(a, b))
    logits = np.array([[1.0, 0.0], [0.0, 1.0], [np.nan, 0.0]], np.float32)
    with pytest.raises(ValueError, match=r"^'logits' is NaN at \[2, 0\]; no accuracy on non-finite outputs$"):
        accuracy(logits, np.array([0, 1, 0]), "logits")
    with pytest.raises(ValueError, match=r"^label 2 at row 1 is not a class of an output with 2 classes \(integers "
                                         r"in \[0, 2\) are expected\)$"):
        accuracy(logits[:2], np.array([0, 2]))
    with pytest.raises(ValueError, match=r"^3 labels \(shape \[3\]\) for 2 examples; one label per example is "
                                         r"expected$"):
        accuracy(logits[:2], np.array([0, 1, 1]))
    assert accuracy(logits[:2], np.array([[0], [0]])) == 0.5


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A spec file, a checkpoint of finite random weights, its export, and a NaN-weight checkpoint."""
    import tensorflow as tf

    from specgen.runtime.parity import random_weights

    folder = tmp_path_factory.mktemp("export")
    spec = folder / "s.yaml"
    spec.write_text(SPEC.format(stage="eval", source=CSV))
    write_csv(folder, GOOD_ROWS)
    loaded = load_spec_text(spec.read_text(), str(spec), spec)
    values = random_weights(build_ir(loaded), np.random.default_rng(0))

    def save(prefix: Path, changed: dict[str, np.ndarray]) -> Path:
        arrays = values | changed
        names = sorted(arrays)
        tf.raw_ops.SaveV2(prefix=str(prefix), tensor_names=names, shape_and_slices=[""] * len(names),
                          tensors=[tf.constant(arrays[n]) for n in names])
        return prefix

    nan_kernel = values["hidden/kernel"].copy()
    nan_kernel[1, 2] = np.nan
    paths = {"spec": spec, "good": save(folder / "good", {}), "nan": save(folder / "nan", {"hidden/kernel": nan_kernel}),
             "huge": save(folder / "huge", {k: v * 1e30 for k, v in values.items()})}
    assert main(["export", str(spec), "--checkpoint", str(paths["good"]), "-o", str(folder / "out")]) == 0
    paths["model"] = folder / "out" / "model.onnx"
    return paths


def cli_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run the CLI, expect exit 1 and exactly one error line (plus the count), and return that line."""
    capsys.readouterr()
    assert main(argv) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and lines[1] == "1 error found", lines
    return lines[0]


def test_export_refuses_a_nan_weight_naming_the_variable(exported: dict[str, Path], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    line = cli_error(capsys, ["export", str(exported["spec"]), "--checkpoint", str(exported["nan"]), "-o", str(tmp_path)])
    assert line == (f"{exported['nan']}: error: checkpoint variable 'hidden/kernel' is NaN at [1, 2]; training "
                    "diverged or the checkpoint is damaged. Nothing was written; export an earlier checkpoint or "
                    "retrain (check the data and the learning rate)")
    assert list(tmp_path.iterdir()) == []


def test_export_refuses_non_finite_outputs(exported: dict[str, Path], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    line = cli_error(capsys, ["export", str(exported["spec"]), "--checkpoint", str(exported["huge"]), "-o",
                              str(tmp_path)])
    assert line.startswith(f"{tmp_path}: error: TensorFlow output 'logits' is ") and line.endswith(
        " on the eval set; nothing was written (the weights are finite: look for very large weights or a negative "
        "batch-norm moving_variance)"), line
    assert list(tmp_path.iterdir()) == []


def test_export_parity_gate_fails_on_nan(exported: dict[str, Path], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from specgen.pipeline import build
    from specgen.runtime.commands import export as exporter

    monkeypatch.setattr(exporter, "max_abs_diff", lambda a, b: math.nan)
    loaded = load_spec_text(exported["spec"].read_text(), str(exported["spec"]), exported["spec"])
    with pytest.raises(SpecError) as info:
        exporter.export(build(loaded), exported["good"], tmp_path)
    assert str(info.value) == (f"{tmp_path}: error: onnxruntime and TensorFlow disagree by nan (that is nan relative "
                               "to max(1, max |TensorFlow output|); limit 0.0001); nothing was written. Please report "
                               "this with the spec.")
    assert list(tmp_path.iterdir()) == []


def test_export_of_an_eval_csv_with_an_empty_cell_is_refused(exported: dict[str, Path], tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The red team's case: one empty cell became NaN and went all the way to model.onnx."""
    spec = tmp_path / "s.yaml"
    spec.write_text(exported["spec"].read_text())
    write_csv(tmp_path, replace(3, "1.0,,1.2,0"))
    line = cli_error(capsys, ["export", str(spec), "--checkpoint", str(exported["good"]), "-o", str(tmp_path / "o")])
    assert line == (f"{spec}:12:36: error: data.eval ({tmp_path / 't.csv'}): line 5, column 'b' is empty; features "
                    "and labels must be numbers (fill in or drop that row)")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("arrays", "extra", "message"), [
    (None, [], "not an .npz file (it does not start with a zip header); save the arrays with numpy.savez"),
    ({"x": np.array([[1.0, 2.0, 3.0]], dtype=object)}, [],
     "array 'x' holds Python objects (dtype object), which specgen does not load (unpickling can run code); save it "
     "as a numeric array"),
    ({"x": X}, ["--labels", "y"], "--labels: no array 'y' in the .npz (arrays: x)"),
    ({"x": X, "y": np.array([0, 1, 2, 0, 1])}, ["--labels", "y"],
     "accuracy of 'logits' against 'y': label 2 at row 2 is not a class of an output with 2 classes (integers in "
     "[0, 2) are expected)"),
    ({"x": X, "y": Y[:3]}, ["--labels", "y"],
     "accuracy of 'logits' against 'y': 3 labels (shape [3]) for 5 examples; one label per example is expected"),
    ({"x": np.where(np.arange(15).reshape(5, 3) == 4, np.nan, X), "y": Y}, ["--labels", "y"],
     "accuracy of 'logits' against 'y': 'logits' is NaN at [1, 0] (and 1 more non-finite values); no accuracy on "
     "non-finite outputs"),
])
def test_infer_input_problems_are_one_line(exported: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           arrays: dict[str, np.ndarray] | None, extra: list[str], message: str) -> None:
    path = tmp_path / "in.npz"
    if arrays is None:
        path.write_text("not an archive")
    else:
        np.savez(path, **arrays)
    line = cli_error(capsys, ["infer", str(exported["model"]), "--input", str(path), "--provider", "cpu", *extra])
    assert line == f"{path}: error: {message}"
