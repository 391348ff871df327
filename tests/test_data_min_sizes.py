"""A data source's examples against the sizes the model takes on its named axes, before the first update.

A spec with `image: {shape: [h, w, 1]}` and a 5-tap conv of dilation 2 needs h, w >= 9 (runtime/lengths.py's
minima, what `specgen infer` enforces). Examples the model cannot run are one positioned line at the data key,
for the train and the eval split alike, before `specgen train` creates its run folder (runtime/sources/sizes.py);
a size the spec fixes (image_size, a tfrecord image's size, a random_crop) is checked before a file is opened.
Also conv2d_transpose's output_padding refusals, which name the axis and what works there.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specgen.cli import main
from specgen.diagnostics import SpecError
from specgen.ir.model import ModelIR
from specgen.ir.resolve import build_ir
from specgen.runtime import lengths
from specgen.spec.load import LoadedSpec, load_spec_text

SPEC = """\
specgen: 1
name: vdyn
inputs:
  image: {{shape: [h, w, 1]}}
outputs:
  logits: out
layers:
  - {{name: c, op: conv2d, input: image, filters: 2, kernel: 5, dilation: 2}}
  - {{name: gp, op: global_avg_pool}}
  - {{name: out, op: dense, units: 2}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers: {{all: {{variables: trainable, kind: sgd, learning_rate: 0.05}}}}
train: {{batch_size: 4, seed: 0}}
data:
  train: {train}
{eval}checkpoint: {{dir: run, every_steps: 100, keep: 1}}
"""
NEED = "expected at least 9: layer 'c' (conv2d) needs at least 9"


def npz(folder: Path, name: str, height: int, width: int) -> str:
    rng = np.random.default_rng(0)
    np.savez(folder / name, x=rng.standard_normal((4, height, width, 1)).astype(np.float32), y=rng.integers(0, 2, 4))
    return f"{{npz: {name}, features: {{image: x}}, labels: {{label: y}}}}"


def loaded_spec(folder: Path, train: str, evaluate: str | None = None, text: str = SPEC) -> tuple[LoadedSpec, ModelIR]:
    path = folder / "v.yaml"
    path.write_text(text.format(train=train, eval=f"  eval: {evaluate}\n" if evaluate else ""))
    loaded = load_spec_text(path.read_text(), str(path), path)
    return loaded, build_ir(loaded)


def refusal(folder: Path, stage: str, train: str, evaluate: str | None = None, text: str = SPEC) -> str:
    from specgen.runtime import data

    loaded, ir = loaded_spec(folder, train, evaluate, text)
    with pytest.raises(SpecError) as caught:
        data.read_stage(loaded, ir, stage)
    (line,) = str(caught.value).splitlines()
    return line


def test_the_minimum_is_lengths_minima(tmp_path: Path) -> None:
    """One computation: the sizes refused are exactly those below lengths.minima, 8 refused and 9 taken."""
    from specgen.runtime import data

    loaded, ir = loaded_spec(tmp_path, npz(tmp_path, "ok.npz", 9, 9))
    assert lengths.minima(ir) == {"h": (9, "c", "conv2d"), "w": (9, "c", "conv2d")}
    source = data.read_stage(loaded, ir, "train")
    assert source is not None and source.examples == 4
    line = refusal(tmp_path, "train", npz(tmp_path, "w.npz", 9, 8))
    assert line.endswith(f"data.train ({tmp_path / 'w.npz'}): 'image' is 8 along 'w', {NEED} (its examples are "
                         "[9, 8, 1]); the model cannot run these: feed larger examples")


@pytest.mark.parametrize("split", ["train", "eval"])
def test_train_refuses_small_examples_before_its_run_folder(tmp_path: Path, split: str, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The eval split too: checked at start, not at the first evaluation after the updates (which were lost)."""
    monkeypatch.chdir(tmp_path)
    small, large = npz(tmp_path, "s.npz", 8, 8), npz(tmp_path, "l.npz", 12, 12)
    loaded_spec(tmp_path, small if split == "train" else large, large if split == "train" else small)
    code = main(["train", "v.yaml", "--steps", "1", "--quiet"])
    err = capsys.readouterr().err
    row, column = (15, 41) if split == "train" else (16, 40)  # at the feature's key: `  train: {npz: ...` / `  eval: {`
    assert code == 1 and "Traceback" not in err
    assert err.splitlines() == [f"v.yaml:{row}:{column}: error: data.{split} (s.npz): 'image' is 8 along 'h', {NEED} (its "
                                "examples are [8, 8, 1]); the model cannot run these: feed larger examples",
                                "1 error found"]
    assert not (tmp_path / "run").exists()


def test_image_size_is_checked_before_a_file_is_read(tmp_path: Path) -> None:
    """images resize every image to image_size: the model's size, known from the spec (the folder is not there)."""
    line = refusal(tmp_path, "train", "{images: absent, image_size: [4, 12]}")
    assert line.endswith(f"data.train ({tmp_path / 'absent'}): 'image' is 4 along 'h', {NEED} (image_size [4, 12] "
                         "feeds [4, 12, 1]); the model cannot run these: set a larger image_size")
    assert ":15:" in line  # at image_size


def test_tfrecord_image_size_is_checked_before_a_shard_is_read(tmp_path: Path) -> None:
    train = ("{tfrecord: absent.tfrecord, features: {image: {key: img, decode: image, size: [12, 3]}}, "
             "labels: {label: y}}")
    line = refusal(tmp_path, "train", train)
    assert line.endswith(f"'image' is 3 along 'w', {NEED} (size [12, 3] feeds [12, 3, 1]); the model cannot run "
                         "these: set a larger size")


@pytest.mark.parametrize(("train", "evaluate", "expected"), [
    ("{images: absent, image_size: [4, 12]}", None,
     ["v.yaml:15:39: error: data.train ({folder}/absent): 'image' is 4 along 'h', " + NEED + " (image_size [4, 12] "
      "feeds [4, 12, 1]); the model cannot run these: set a larger image_size"]),
    ("{images: a, image_size: [9, 9]}", "{images: b, image_size: [9, 5]}",
     ["v.yaml:16:33: error: data.eval ({folder}/b): 'image' is 5 along 'w', " + NEED + " (image_size [9, 5] feeds "
      "[9, 5, 1]); the model cannot run these: set a larger image_size"]),
    ("{tfrecord: t.tfrecord, features: {image: {key: img, decode: image, size: [12, 3]}}, labels: {label: y}}", None,
     ["v.yaml:15:83: error: data.train ({folder}/t.tfrecord): 'image' is 3 along 'w', " + NEED + " (size [12, 3] "
      "feeds [12, 3, 1]); the model cannot run these: set a larger size"]),
    ("{images: a, image_size: [12, 12], augment: [{random_crop: {size: [8, 12]}}]}", None,
     ["v.yaml:15:34: error: data.train ({folder}/a): 'image' is 8 along 'h', " + NEED + " (image_size [12, 12] feeds "
      "[12, 12, 1], which data.train's augment crops to [8, 12]); the model cannot run these: crop to a larger size"]),
    ("{images: a, image_size: [9, 9]}", "{images: b, image_size: [9, 9]}", []),
])
def test_validate_refuses_declared_sizes_the_model_cannot_run(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              train: str, evaluate: str | None,
                                                              expected: list[str]) -> None:
    """The sizes the spec declares are checked by `specgen validate` (no folder or shard exists here), with the line
    train gives, so a spec refused at train never passes validate in CI first."""
    loaded_spec(tmp_path, train, evaluate)
    code = main(["validate", str(tmp_path / "v.yaml")])
    out, err = capsys.readouterr()
    lines = [line.replace(str(tmp_path / "v.yaml"), "v.yaml") for line in err.splitlines()]
    if not expected:
        assert (code, err) == (0, "") and out.startswith("ok: ")
        return
    assert code == 1 and out == "" and "Traceback" not in err
    assert lines == [line.format(folder=tmp_path) for line in expected] + ["1 error found"]


def test_a_random_crop_sets_the_size_at_train_and_eval(tmp_path: Path) -> None:
    """The crop is what the model sees: too small a crop is refused; a good one takes 8x8 eval images (Keras'
    inference resizes them to the crop)."""
    from specgen.runtime import data

    base = "{{npz: l.npz, features: {{image: x}}, labels: {{label: y}}, augment: [{{random_crop: {{size: {crop}}}}}]}}"
    npz(tmp_path, "l.npz", 12, 12)
    line = refusal(tmp_path, "train", base.format(crop="[4, 10]"))
    assert line.endswith(f"'image' is 4 along 'h', {NEED} (its examples are [12, 12, 1], which data.train's augment "
                         "crops to [4, 10]); the model cannot run these: crop to a larger size")
    loaded, ir = loaded_spec(tmp_path, base.format(crop="[10, 10]"), npz(tmp_path, "s.npz", 8, 8))
    source = data.read_stage(loaded, ir, "eval")
    assert source is not None and source.examples == 4


SEQUENCE = """\
specgen: 1
name: seq
inputs: {{ids: {{shape: [t], dtype: int32}}}}
outputs: {{logits: out}}
layers:
  - {{name: emb, op: embedding, vocab_size: 5, dim: 4}}
  - {{name: pos, op: positional_embedding, max_length: 6}}
  - {{name: sum, op: add, inputs: [emb, pos]}}
  - {{name: c, op: conv1d, filters: 2, kernel: 3}}
  - {{name: gp, op: global_avg_pool}}
  - {{name: out, op: dense, units: 2}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers: {{all: {{variables: trainable, kind: sgd, learning_rate: 0.05}}}}
train: {{batch_size: 2, seed: 0}}
data:
  train: {train}
{eval}"""


@pytest.mark.parametrize(("steps", "message"), [
    (2, "'ids' is 2 along 't', expected at least 3: layer 'c' (conv1d) needs at least 3 (its examples are [2]); the "
        "model cannot run these: feed larger examples"),
    (7, "'ids' is 7 along 't', expected at most 6: the max_length of layer 'pos' (positional_embedding) (its examples "
        "are [7]); the model cannot run these: feed shorter examples"),
])
def test_sequence_lengths_both_ways(tmp_path: Path, steps: int, message: str) -> None:
    np.savez(tmp_path / "q.npz", x=np.zeros((2, steps), np.int32), y=np.zeros(2, np.int64))
    line = refusal(tmp_path, "train", "{npz: q.npz, features: {ids: x}, labels: {label: y}}", text=SEQUENCE)
    assert line.endswith(message)


TRANSPOSE = """\
specgen: 1
name: t
inputs: {{x: {{shape: [8, 8, 4]}}}}
outputs: {{y: l}}
layers:
  - {{name: l, op: conv2d_transpose, filters: 2, kernel: {kernel}, strides: {strides}, padding: same, output_padding: {pad}}}
"""
WAYS = ("leave output_padding out (the output is then input * strides), or use an odd kernel or a stride of 2 or more on "
        "the width axis")


@pytest.mark.parametrize(("kernel", "strides", "pad", "message"), [
    ("[3, 2]", "[2, 1]", "[1, 0]", "output_padding: received [1, 0]: with an even kernel (2) and padding 'same', Keras "
     "makes the width axis (n - 1) * stride + kernel % 2 + output_padding long, and 7 does not map back to the "
     f"input's 8; no output_padding works there, since it must be below the stride (1): {WAYS}"),
    ("[3, 2]", "[2, 1]", "[1, 1]", "output_padding: received [1, 1], expected values below strides ([2, 1]), as Keras "
     "requires: 1 on the width axis is not below its stride 1; with its even kernel (2) and padding 'same' not even 0 "
     f"works there: {WAYS}"),
    ("[3, 3]", "[2, 1]", "[1, 1]", "output_padding: received [1, 1], expected values below strides ([2, 1]), as Keras "
     "requires: 1 on the width axis is not below its stride 1 (give 0 there, or leave output_padding out)"),
    ("[3, 4]", "[2, 3]", "[1, 0]", "output_padding: received [1, 0]: with an even kernel (4) and padding 'same', Keras "
     "makes the width axis (n - 1) * stride + kernel % 2 + output_padding long, and 21 does not map back to the "
     "input's 8; expected 1 to 2 on the width axis (at least 1, below its stride 3)"),
])
def test_output_padding_refusals_name_the_axis_and_what_works(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              kernel: str, strides: str, pad: str, message: str) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(TRANSPOSE.format(kernel=kernel, strides=strides, pad=pad))
    assert main(["validate", str(path)]) == 1
    (line, total) = capsys.readouterr().err.splitlines()
    assert line.endswith(f"error: layer 'l' (conv2d_transpose): {message}") and total == "1 error found"


@pytest.mark.parametrize("pad", ["[1, 1]", "[1, 2]"])
def test_the_advice_works(tmp_path: Path, capsys: pytest.CaptureFixture[str], pad: str) -> None:
    """What the messages advise validates: leaving output_padding out at stride 1; 1 or 2 below a stride of 3."""
    path = tmp_path / "t.yaml"
    text = TRANSPOSE.format(kernel="[3, 4]", strides="[2, 3]", pad=pad)
    path.write_text(text)
    assert main(["validate", str(path)]) == 0
    path.write_text(TRANSPOSE.format(kernel="[3, 2]", strides="[2, 1]", pad="0").replace(", output_padding: 0", ""))
    assert main(["validate", str(path)]) == 0
    capsys.readouterr()
