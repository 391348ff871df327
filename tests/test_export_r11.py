"""Round 11 export findings: what a file given as a checkpoint is (F1), advice in the command's own --provider
values (F2), and a negative variance in the weights named before anything runs, with no numpy warning (F3).

F1: a zip or HDF5 signature used to make any file "a Keras weight file" (a numpy .npz given to
`export --checkpoint` was told to go into checkpoint.restore, a second error). F2: `export --provider cuda`
without CUDA said `--provider auto`, which export refuses. F3: a negative moving_variance leaked numpy's
"invalid value encountered in sqrt" with a source line, then an error naming the output.
"""

from __future__ import annotations

import argparse
import warnings
import zipfile
from pathlib import Path

import h5py
import numpy as np
import onnx
import pytest

from specgen.cli import main
from specgen.ir.model import ModelIR
from specgen.ir.resolve import build_ir
from specgen.spec.load import load_spec_text

SPEC = """\
specgen: 1
name: tabular
inputs: {x: {shape: [3]}}
outputs: {logits: out}
layers:
  - {name: hidden, op: dense, units: 4}
  - {name: bn, op: batch_norm}
  - {name: out, op: dense, units: 2}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers: {all: {variables: "*", kind: sgd, learning_rate: 0.1}}
train: {batch_size: 4}
data:
  eval: {csv: t.csv, features: {x: [a, b, c]}, labels: {label: label}}
"""
ROWS = ["0.1,0.2,0.3,1", "0.4,0.5,0.6,0", "0.7,0.8,0.9,1", "1.0,1.1,1.2,0", "1.3,1.4,1.5,1"]
NORMALIZE_SPEC = """\
specgen: 1
name: normed
inputs: {x: {shape: [3]}}
outputs: {y: out}
layers:
  - {name: norm, op: normalize}
  - {name: out, op: dense, units: 2}
"""


def ir_of(text: str, folder: Path) -> ModelIR:
    return build_ir(load_spec_text(text, str(folder / "s.yaml"), folder / "s.yaml"))


def cli_lines(capsys: pytest.CaptureFixture[str], argv: list[str]) -> list[str]:
    """Run the CLI, expect exit 1, and return stderr's lines."""
    capsys.readouterr()
    assert main(argv) == 1
    return capsys.readouterr().err.splitlines()


# F1: a file is a Keras weight file by what it holds


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("files")
    paths = {name: folder / name for name in ("d.npz", "k.bin", "data.bin", "k3.bin", "k2.bin", "data.h5", "z.zip")}
    np.savez(paths["d.npz"], x=np.zeros(3))
    with zipfile.ZipFile(paths["k.bin"], "w") as archive:  # a .keras archive under another name
        archive.writestr("config.json", "{}")
        archive.writestr("model.weights.h5", b"")
    with zipfile.ZipFile(paths["z.zip"], "w") as archive:
        archive.writestr("config.json", "{}")
    for name in ("data.bin", "data.h5"):  # HDF5 data, no Keras groups
        with h5py.File(paths[name], "w") as h5:
            h5["x"] = np.zeros(3)
    with h5py.File(paths["k3.bin"], "w") as h5:  # Keras 3's .weights.h5 layout
        h5.create_group("layers/dense/vars")
    with h5py.File(paths["k2.bin"], "w") as h5:  # Keras 2's save_weights layout
        h5.attrs["layer_names"] = [b"dense"]
    return paths


def test_keras_files_are_told_by_what_they_hold(files: dict[str, Path]) -> None:
    from specgen.runtime.weight_files import HDF5, KERAS, ZIP, is_keras_file, sniff

    kinds = {name: sniff(path) for name, path in files.items()}
    assert kinds == {"d.npz": ZIP, "k.bin": KERAS, "data.bin": HDF5, "k3.bin": KERAS, "k2.bin": KERAS,
                     "data.h5": HDF5, "z.zip": ZIP}
    keras = {name for name, path in files.items() if is_keras_file(path)}
    assert keras == {"k.bin", "k3.bin", "k2.bin", "data.h5"}  # data.h5 by its name: read_weights says what it lacks


def test_a_file_that_is_no_checkpoint_says_what_it_is(files: dict[str, Path]) -> None:
    from specgen.runtime.weight_files import not_a_checkpoint

    expected = ("not a TensorFlow checkpoint nor a Keras weight file (.keras, .weights.h5, .h5): expected a "
                "checkpoint's prefix or .index file, a ckpt-* folder or a run folder")
    assert not_a_checkpoint(files["d.npz"]) == f"{files['d.npz']} is a zip archive (a numpy .npz?), {expected}"
    assert not_a_checkpoint(files["data.bin"]) == f"{files['data.bin']} is an HDF5 file without Keras weights, {expected}"
    assert not_a_checkpoint(files["k3.bin"]) == (
        f"{files['k3.bin']} is a Keras weight file, not a TensorFlow checkpoint: name it in checkpoint.restore (or "
        "pass it to `specgen restore-plan --from`); `specgen export` without --checkpoint exports the spec's restore "
        "plan")
    shard = files["d.npz"].with_name("variables.data-00000-of-00001")
    shard.write_bytes(files["d.npz"].read_bytes())  # a shard's bytes may start like a zip: the name decides
    assert not_a_checkpoint(shard) is None and not_a_checkpoint(files["d.npz"].parent) is None


def test_export_checkpoint_of_an_npz_says_it_is_a_zip(files: dict[str, Path], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC)
    npz = files["d.npz"]
    lines = cli_lines(capsys, ["export", str(spec), "--checkpoint", str(npz), "-o", str(tmp_path / "out")])
    assert lines == [f"{npz}: error: {npz} is a zip archive (a numpy .npz?), not a TensorFlow checkpoint nor a Keras "
                     "weight file (.keras, .weights.h5, .h5): expected a checkpoint's prefix or .index file, a ckpt-* "
                     "folder or a run folder", "1 error found"]
    assert not (tmp_path / "out").exists()


def test_restore_plan_from_an_hdf5_data_file_says_what_it_is(files: dict[str, Path], tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from specgen.runtime.commands.restore_sources import read_source

    with pytest.raises(ValueError) as info:
        read_source(files["data.bin"])
    assert str(info.value) == (f"{files['data.bin']} is an HDF5 file without Keras weights, not a TensorFlow "
                               "checkpoint nor a Keras weight file (.keras, .weights.h5, .h5): expected a checkpoint's "
                               "prefix or .index file, a ckpt-* folder or a run folder")


# F2: the advice names only the command's own --provider values


def _choices(module: str) -> list[str]:
    import importlib

    parser = argparse.ArgumentParser()
    importlib.import_module(f"specgen.commands.{module}").add_arguments(parser)
    return list(next(a for a in parser._actions if "--provider" in a.option_strings).choices or ())


def test_provider_values_are_the_commands_own() -> None:
    from specgen.runtime.predictor import EXPORT_PROVIDERS, PROVIDERS

    assert sorted(_choices("export")) == sorted(EXPORT_PROVIDERS)
    assert sorted(_choices("infer")) == sorted(_choices("serve")) == sorted(PROVIDERS)


@pytest.fixture
def cuda_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA asked for and onnxruntime giving the CPU, as on a machine without the CUDA libraries (or a GPU)."""
    import onnxruntime as ort

    from specgen.runtime import predictor

    monkeypatch.setattr(predictor, "_providers", lambda choice: [predictor.CPU] if choice == "cpu" else
                        [predictor.CUDA, predictor.CPU])
    monkeypatch.setattr(predictor.Predictor, "_session", lambda self, provider, graphs: ort.InferenceSession(
        self.source, providers=[predictor.CPU]))


def _tiny_model() -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10).SerializeToString()


def test_cuda_fallback_advice_follows_the_command(cuda_falls_back: None) -> None:
    from specgen.runtime.predictor import EXPORT_PROVIDERS, InputError, Predictor

    head = "the CUDA provider could not start (CUDA or cuDNN libraries missing?); onnxruntime fell back to the CPU. "
    with pytest.raises(InputError) as info:
        Predictor(_tiny_model(), "cuda")  # infer, serve
    assert str(info.value) == head + "Use --provider cpu or auto to accept that."
    with pytest.raises(InputError) as info:
        Predictor(_tiny_model(), "cuda", choices=EXPORT_PROVIDERS)
    assert str(info.value) == head + "Use --provider cpu to accept that."


def test_export_provider_cuda_without_cuda_names_only_export_flags(cuda_falls_back: None, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC)
    (tmp_path / "t.csv").write_text("\n".join(["a,b,c,label", *ROWS]) + "\n")
    prefix = save_checkpoint(tmp_path / "good", ir_of(SPEC, tmp_path), {})
    lines = cli_lines(capsys, ["export", str(spec), "--checkpoint", str(prefix), "-o", str(tmp_path / "out"),
                               "--precision", "int8", "--provider", "cuda"])
    assert lines == [f"{spec}: error: --precision int8: the CUDA provider could not start (CUDA or cuDNN libraries "
                     "missing?); onnxruntime fell back to the CPU. Use --provider cpu to accept that; pass --force to "
                     "write it unverified (`specgen serve` runs its gates at load, on the provider it gets); nothing "
                     "was written", "1 error found"]
    assert not (tmp_path / "out").exists()


# F3: a negative variance is named before anything runs; no numpy warning on bad weights


def save_checkpoint(prefix: Path, ir: ModelIR, changed: dict[str, np.ndarray]) -> Path:
    import tensorflow as tf

    from specgen.runtime.parity import random_weights

    arrays = random_weights(ir, np.random.default_rng(0)) | changed
    names = sorted(arrays)
    tf.raw_ops.SaveV2(prefix=str(prefix), tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(arrays[n]) for n in names])
    return prefix


def _weights(ir: ModelIR, changed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from specgen.runtime.parity import random_weights

    return random_weights(ir, np.random.default_rng(0)) | changed


def _built(ir: ModelIR) -> onnx.ModelProto:
    from specgen.render.files import render_files

    return onnx.load_from_string(render_files(ir)["model.onnx"])


def test_negative_variances_are_named(tmp_path: Path) -> None:
    from specgen.runtime.onnx_export import variance_problem

    ir = ir_of(SPEC, tmp_path)
    var = np.array([1.0, -5.0, 0.5, -0.001], np.float32)  # -0.001 + epsilon 0.001 is 0: its square root divides
    values = _weights(ir, {"bn/moving_variance": var})
    assert variance_problem(ir, values, {"bn/moving_variance": "ema/bn/moving_variance"}) == (
        "'ema/bn/moving_variance' is -5 at [1] (and 1 more); expected moving_variance + epsilon (0.001) > 0, as "
        "batch_norm 'bn' takes its square root")
    above = _weights(ir, {"bn/moving_variance": np.full(4, -0.0009, np.float32)})  # + epsilon > 0: computable
    assert variance_problem(ir, above) is None
    assert variance_problem(ir, _weights(ir, {})) is None
    normed = ir_of(NORMALIZE_SPEC, tmp_path)
    assert variance_problem(normed, _weights(normed, {"norm/variance": np.array([0.0, 1.0, -2.0], np.float32)})) == (
        "'norm/variance' is -2 at [2]; expected variance >= 0, as normalize 'norm' takes its square root")


def test_with_weights_refuses_bad_weights_without_a_numpy_warning(tmp_path: Path) -> None:
    from specgen.runtime.onnx_export import WeightError, with_weights

    ir = ir_of(SPEC, tmp_path)
    kernel = np.zeros((3, 4))
    kernel[2, 1] = 1e300
    cases: dict[str, tuple[np.ndarray, str]] = {
        "bn/moving_variance": (np.array([1.0, 1.0, 1.0, -5.0], np.float32), "variable 'bn/moving_variance' is -5 at "
                               "[3]; expected moving_variance + epsilon (0.001) > 0, as batch_norm 'bn' takes its "
                               "square root; nothing was written"),
        "hidden/kernel": (kernel, "variable 'hidden/kernel' is 1e+300 at [2, 1]; expected a value float32 holds "
                          "(|x| <= 3.403e+38): the model computes in float32; nothing was written"),
    }
    for key, (value, message) in cases.items():
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(WeightError) as info:
                with_weights(_built(ir), ir, _weights(ir, {key: value}))
        assert str(info.value) == message


def test_a_fold_that_would_overflow_is_not_made(tmp_path: Path) -> None:
    """Finite weights whose fold overflows float32 (gamma 1e30 times a kernel of 1e10): the batch norm stays, as
    TensorFlow computes it; a negative variance given to the fold directly is not folded either; no warning."""
    from specgen.runtime.lib.onnx_layout import onnx_feeds
    from specgen.runtime.onnx_export import fold_batch_norms

    ir = ir_of(SPEC, tmp_path)
    for changed in ({"bn/gamma": np.full(4, 1e30, np.float32), "hidden/kernel": np.full((3, 4), 1e10, np.float32)},
                    {"bn/moving_variance": np.full(4, -5.0, np.float32)}):
        weights = {k: v.astype(np.float32) for k, v in onnx_feeds(ir.model_variables,
                                                                  _weights(ir, changed)).items()}
        before = {k: v.copy() for k, v in weights.items()}
        graph = _built(ir).graph
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert fold_batch_norms(graph, weights) == 0
        assert "BatchNormalization" in [n.op_type for n in graph.node]
        assert all(np.array_equal(weights[k], before[k]) for k in before)


def test_export_of_a_negative_moving_variance_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC)
    (tmp_path / "t.csv").write_text("\n".join(["a,b,c,label", *ROWS]) + "\n")
    var = np.ones(4, np.float32)
    var[3] = -5.0
    prefix = save_checkpoint(tmp_path / "negvar", ir_of(SPEC, tmp_path), {"bn/moving_variance": var})
    out = tmp_path / "out"
    lines = cli_lines(capsys, ["export", str(spec), "--checkpoint", str(prefix), "-o", str(out)])
    what = ("'bn/moving_variance' is -5 at [3]; expected moving_variance + epsilon (0.001) > 0, as batch_norm 'bn' "
            "takes its square root")
    # export's weight check names the checkpoint file and key, as for a NaN weight (with_weights' own refusal,
    # `specgen: error: variable ...`, is the one other callers of it get)
    assert lines[0] == (f"{prefix}: error: checkpoint variable {what}; the checkpoint is damaged or was edited. "
                        "Nothing was written; export an earlier checkpoint or retrain"), lines
    assert len(lines) <= 2 and not any("Warning" in line for line in lines) and not out.exists()
