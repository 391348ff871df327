"""`specgen diff` compares the sizes each named dim is served at, not only the declared dims (rt12 compose F1, F5),
and notes an `ema_to_model` entry over checkpoints without EMA shadows (rt12 compose, low note).

The smallest size of a named dim is runtime/lengths.py's (`minima`: what `specgen export` stamps and `specgen infer`
/ `serve` refuse below), checked here against TensorFlow, which refuses a shorter input, and onnxruntime.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_cli as run

from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.review.interface import spans
from specgen.spec.load import load_spec_text

SEQ = """\
specgen: 1
name: seqm
inputs:
  x: {shape: [seq, 4]}
outputs:
  logits: head
layers:
LAYERS
  - {name: pool, op: global_avg_pool}
  - {name: head, op: dense, units: 2}
"""


def spec(*layers: str) -> str:
    first, *rest = layers
    return SEQ.replace("LAYERS", "\n".join([f"  - {{name: l0, input: x, {first}}}",
                                            *(f"  - {{name: l{i}, {layer}}}" for i, layer in enumerate(rest, 1))]))


SAME = spec("op: conv1d, filters: 4, kernel: 3, padding: same")
VALID = spec("op: conv1d, filters: 4, kernel: 3, padding: valid")


def write(folder: Path, **files: str) -> None:
    for name, content in files.items():
        (folder / name).write_text(content)


def test_a_raised_minimum_size_breaks_the_interface(tmp_path: Path, capsys) -> None:
    write(tmp_path, **{"old.yaml": SAME, "new.yaml": VALID})
    code, out, err = run(["diff", "old.yaml", "new.yaml", "--fail-on", "interface,checkpoint"], capsys, tmp_path)
    assert code == 1
    assert out.split("\n\n")[1].splitlines() == [
        "interface: 1 change(s)",
        "  change   what     old       new",
        "  -------  -------  --------  --------",
        "  changed  input x  seq >= 1  seq >= 3",
        "  breaks: input 'x': NEW needs seq >= 3 (layer 'l0' (conv1d) needs at least 3); OLD served seq >= 1: clients "
        "that send a shorter 'seq' fail"]
    assert err.splitlines() == [
        "specgen diff: breaks interface: input 'x': NEW needs seq >= 3 (layer 'l0' (conv1d) needs at least 3); OLD "
        "served seq >= 1: clients that send a shorter 'seq' fail"]


def test_a_lowered_minimum_is_compatible(tmp_path: Path, capsys) -> None:
    write(tmp_path, **{"old.yaml": VALID, "new.yaml": SAME})
    code, out, err = run(["diff", "old.yaml", "new.yaml", "--fail-on", "interface"], capsys, tmp_path)
    assert (code, err) == (0, "")
    assert out.split("\n\n")[1].splitlines()[3] == "  compatible  input x  seq >= 3  seq >= 1"


def test_a_fixed_size_below_the_new_minimum_breaks_and_one_above_is_only_the_declared_row(tmp_path: Path,
                                                                                           capsys) -> None:
    write(tmp_path, **{"two.yaml": SAME.replace("[seq, 4]", "[2, 4]"), "five.yaml": SAME.replace("[seq, 4]", "[5, 4]"),
                       "new.yaml": VALID})
    code, _, err = run(["diff", "two.yaml", "new.yaml", "--fail-on", "interface"], capsys, tmp_path)
    assert code == 1
    assert err.splitlines() == [
        "specgen diff: breaks interface: input 'x': NEW needs seq >= 3 (layer 'l0' (conv1d) needs at least 3); OLD "
        "served size 2: clients that send a shorter 'seq' fail"]
    code, out, err = run(["diff", "five.yaml", "new.yaml", "--fail-on", "interface"], capsys, tmp_path)
    assert (code, err) == (0, "")
    assert [row.split()[0] for row in out.split("\n\n")[1].splitlines()[3:]] == ["compatible"]


def test_a_lowered_max_length_breaks(tmp_path: Path, capsys) -> None:
    pos = SEQ.replace("LAYERS", "  - {name: p, op: positional_embedding, input: x, max_length: 16}")
    write(tmp_path, **{"old.yaml": pos, "new.yaml": pos.replace("max_length: 16", "max_length: 8")})
    code, _, err = run(["diff", "old.yaml", "new.yaml", "--fail-on", "interface"], capsys, tmp_path)
    assert code == 1
    assert err.splitlines() == [
        "specgen diff: breaks interface: input 'x': NEW takes seq <= 8 (layer 'p' (positional_embedding) takes at most "
        "8); OLD served 1 <= seq <= 16: clients that send a longer 'seq' fail"]


# Pipelines of `valid` windows: (spec layers, the Keras layers TensorFlow runs, as (class, args, kwargs)), each with
# its smallest length.
PIPELINES = [
    (["op: conv1d, filters: 4, kernel: 3, padding: valid"], [("Conv1D", (4, 3), {})], 3),
    (["op: conv1d, filters: 4, kernel: 4, padding: valid", "op: max_pool1d, size: 5, padding: valid"],
     [("Conv1D", (4, 4), {}), ("MaxPooling1D", (5, 5), {})], 8),
    (["op: conv1d, filters: 4, kernel: 3, dilation: 2, padding: valid"], [("Conv1D", (4, 3), {"dilation_rate": 2})], 5),
    # rt12 F5: onnxruntime answers at 2, where the declared dim is 0 and TensorFlow refuses
    (["op: max_pool1d, size: 1, strides: 1, padding: valid", "op: max_pool1d, size: 3, strides: 3, padding: valid"],
     [("MaxPooling1D", (1, 1), {}), ("MaxPooling1D", (3, 3), {})], 3),
    (["op: conv1d, filters: 4, kernel: 3, strides: 2, padding: same", "op: conv1d, filters: 4, kernel: 2, padding: valid"],
     [("Conv1D", (4, 3), {"strides": 2, "padding": "same"}), ("Conv1D", (4, 2), {})], 3),
]
Keras = list[tuple[str, tuple[int, ...], dict[str, object]]]


@pytest.mark.parametrize(("layers", "keras_layers", "least"), PIPELINES)
def test_the_smallest_size_is_where_tensorflow_starts_to_answer(layers: list[str], keras_layers: Keras, least: int) -> None:
    ir = build_ir(load_spec_text(spec(*layers)))
    assert spans(ir)["seq"][0] == least
    keras = pytest.importorskip("keras")
    answers = []
    for n in (least - 1, least):  # a model each: one that refused a length stays half built
        model = keras.Sequential([getattr(keras.layers, name)(*args, **kwargs) for name, args, kwargs in keras_layers])
        try:
            answers.append(min(model(np.ones((1, n, 4), np.float32)).shape) > 0)
        except Exception:  # TensorFlow's own refusal: an invalid argument, a negative dimension
            answers.append(False)
    assert answers == [False, True]


def test_onnxruntime_answers_at_the_smallest_size() -> None:
    ort = pytest.importorskip("onnxruntime")
    for layers, _, least in PIPELINES:
        ir = build_ir(load_spec_text(spec(*layers)))
        weights = {v.onnx_name: np.full(v.onnx_shape, 0.01, np.float32) for v in ir.model_variables}
        out = ort.InferenceSession(render_files(ir)["model.onnx"]).run(None, {"x": np.ones((1, least, 4), np.float32)}
                                                                        | weights)[0]
        assert out.shape == (1, 2)


def test_ema_to_model_over_checkpoints_without_shadows_is_noted(tmp_path: Path, capsys) -> None:
    old = SAME + "checkpoint: {dir: run_old}\n"
    write(tmp_path, **{"old.yaml": old, "new.yaml": old.replace(
        "{dir: run_old}", "{dir: run_new, restore: [{from: run_old, ema_to_model: true}]}"),
        "ema.yaml": old + "train: {ema: {decay: 0.99}}\n"})
    code, out, _ = run(["diff", "old.yaml", "new.yaml"], capsys, tmp_path)
    assert code == 0
    assert out.split("\n\n")[4].split("\n")[0] == (  # then its `resume:` line
        "checkpoint: a checkpoint of OLD restored into NEW: restored 4, initialized 0, unused weights 0, mismatched 0; "
        "note: checkpoint.restore[0] sets ema_to_model, but OLD's checkpoints hold no EMA shadows (OLD has no "
        "train.ema): the raw weights are restored")
    _, out, _ = run(["diff", "ema.yaml", "new.yaml"], capsys, tmp_path)
    assert "note:" not in out
