"""Every op's rule for the initialization-scale lint (OpDef.moments; specgen/ir/scales.py and lints.py, docs/spec.md#lints), and
`specgen report`'s `activation std (init)` column measured on the generated TensorFlow model.

Completeness: every registered op declares how it moves the moments (a rule, or Unmodelled with the reason the
report prints), and every op with a rule has a layer in CASES below, so that adding an op tells its author both.

Measurement: each case is a small spec with non-default initializers, run by its generated TensorFlow model at
initialization on random N(0, 1) inputs (BATCH examples, a case's own `batch` where each holds many independent
values); each measured layer's column value (times its reference, which is 1 but after an embedding) is compared
with the std of that layer's actual output. The tolerance of each comparison
is Z standard errors of the measured std plus the allowance of the model's assumption there:

- the std estimated from n independent values has a relative standard error sqrt((kurtosis - 1) / (4 n)), the
  kurtosis taken from the sample itself; n counts the independent values per example (`per_example`) times the
  examples: values equal along positions (below), or strongly correlated (a recurrent layer's steps), count once;
- the model takes expectations over the weights too, and the test draws them once: the output variance of a kernel
  of k weights moves by sqrt(Var(w^2)) / E[w^2] / sqrt(k) relative, at most sqrt(2 / k) for the kinds used here
  (a normal's; a uniform's is sqrt(0.8 / k)), so the std by sqrt(1 / (2 k)), for each kernel the layer reads;
- the model's assumptions (docs/spec.md#lints): weights, inputs, branches and units independent (true here up to
  the weight draw above); the positions that pools, resizes and attention combine equal, which the cases that test
  those ops make true by drawing inputs equal along their positions (`equal`; the convolutions get independent
  positions, where each tap is a weight of its own); borders ignored (a `pad` allows 1 - sqrt(its share of kept
  values)); a recurrent layer by mean field over independent input steps (drawn so; MEAN_FIELD); the max / min of a
  reduce over independent Gaussians of one variance (exact on the `scale` of an input used here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from specgen.ir import lints
from specgen.ir import scales as scale_model
from specgen.ir.resolve import build_ir
from specgen.kinds.ops import REGISTRY
from specgen.kinds.ops.base import EXTRA_OUTPUT_DEF, Derived, Unmodelled, Weighted
from specgen.spec.load import load_spec_text

BATCH = 1024
Z = 4.0  # standard errors: a false failure about once in 16,000 comparisons (and the seeds are fixed)
# The recurrent rule's mean field drops the correlation between a state and the recurrent kernel that made it. Against
# the generated model (lstm, gru with and without reset_after, simple_rnn tanh; 16, 32, 64 and 128 units; kernel
# stddev 0.05 and 0.3; 2,048 sequences of 12 independent N(0, 1) steps), the deviation averaged over 3 seeds (which
# averages the weight draw) was at most 4.1% (simple_rnn, 16 units, stddev 0.05), under 3% from 32 units on.
MEAN_FIELD = 0.05


@dataclass(frozen=True)
class Measured:
    """How one layer's output is measured: its independent values per example, the sizes of the kernels its
    value depends on (their one draw), the allowance of the model's assumption there, and whether the batch
    statistics of training are what the model describes (batch_norm)."""

    per_example: int
    kernels: tuple[int, ...] = ()
    allowance: float = 0.0
    training: bool = False


@dataclass(frozen=True)
class Case:
    name: str
    inputs: dict[str, tuple[list[int], str]]  # name -> (shape, draw: "normal", "equal" along positions, "ids N")
    layers: list[tuple[dict[str, Any], Measured | None]] = field(default_factory=list)
    batch: int = BATCH


def normal(stddev: float, mean: float = 0.0) -> dict[str, Any]:
    return {"kind": "random_normal", "mean": mean, "stddev": stddev}


H = (256 * 64,)  # units/h's kernel
POINTWISE = sorted(name for name, op in REGISTRY.items() if op.moments == "pointwise")
UNITS = Case("units", {"x": ([256], "normal"), "idx": ([1], "ids 48")}, [
    ({"name": "h", "op": "dense", "input": "x", "units": 64, "kernel_init": normal(0.15),
      "bias_init": {"kind": "constant", "value": 0.3}}, Measured(64, H)),
    ({"name": "g", "op": "dense", "input": "x", "units": 64,
      "kernel_init": {"kind": "random_uniform", "minval": -0.1, "maxval": 0.2}}, Measured(64, H)),
    ({"name": "g2", "op": "dense", "input": "x", "units": 48, "kernel_init": normal(0.3)}, Measured(48, (256 * 48,))),
    *(({"name": f"p_{op}", "op": op, "input": "h"}, Measured(64, H)) for op in POINTWISE),
    ({"name": "sum", "op": "add", "inputs": ["h", "g"]}, Measured(64, H * 2)),
    ({"name": "diff", "op": "subtract", "inputs": ["h", "g"]}, Measured(64, H * 2)),
    ({"name": "prod", "op": "multiply", "inputs": ["h", "g"]}, Measured(64, H * 2)),
    ({"name": "cat", "op": "concat", "inputs": ["h", "g2"]}, Measured(112, (*H, 256 * 48))),
    ({"name": "gain", "op": "scale", "input": "h", "init_values": 0.5}, Measured(64, H)),
    ({"name": "affine", "op": "rescale", "input": "h", "scale": 0.5, "offset": 1.0}, Measured(64, H)),
    ({"name": "standard", "op": "normalize", "input": "h", "mean": 0.5, "variance": 4.0}, Measured(64, H)),
    ({"name": "drop", "op": "dropout", "input": "h", "rate": 0.5}, Measured(64, H)),
    ({"name": "held", "op": "stop_gradient", "input": "h"}, Measured(64, H)),
    ({"name": "grid", "op": "reshape", "input": "h", "shape": [8, 8]}, Measured(64, H)),
    ({"name": "flat", "op": "flatten", "input": "grid"}, Measured(64, H)),
    ({"name": "row", "op": "take", "input": "grid", "axis": 1, "index": 3}, Measured(8, H)),
    ({"name": "picked", "op": "gather", "inputs": ["g2", "idx"]}, Measured(1, (256 * 48,))),
    ({"name": "wide", "op": "scale", "input": "x", "init_values": 2.5}, Measured(256)),
    *(({"name": f"r_{kind}", "op": "reduce", "input": "wide", "kind": kind}, Measured(1))
      for kind in ("max", "min", "mean", "sum")),
    ({"name": "ln", "op": "layer_norm", "input": "h"}, Measured(64)),
    ({"name": "rms", "op": "rms_norm", "input": "h"}, Measured(64, H)),
    ({"name": "bn", "op": "batch_norm", "input": "h"}, Measured(64, training=True)),
    ({"name": "probs", "op": "softmax", "input": "h"}, None),  # Unmodelled: test_softmax_is_not_modelled...
    ({"name": "after_probs", "op": "dense", "input": "probs", "units": 8}, None),
    # restarts: after an unmodelled input its variance is taken as far above epsilon (which the default 1e-3 is not
    # here: 64 probabilities have a variance of order 1e-4, and the output's std is then 0.84)
    ({"name": "ln_after_probs", "op": "layer_norm", "input": "probs", "epsilon": 1e-7}, Measured(64)),
])
SEQUENCE = Case("sequence", {"x": ([12, 16], "normal")}, [
    ({"name": "c", "op": "conv1d", "input": "x", "filters": 32, "kernel": 3, "kernel_init": normal(0.2),
      "bias_init": {"kind": "constant", "value": 0.1}}, Measured(10 * 32, (3 * 16 * 32,))),
    ({"name": "lstm", "op": "lstm", "input": "x", "units": 32, "return_sequences": True, "return_state": True,
      "kernel_init": normal(0.3)}, Measured(32, (16 * 128, 32 * 128), MEAN_FIELD)),
    ({"name": "lstm_h", "op": "dense", "input": "lstm/state_h", "units": 32, "kernel_init": normal(0.5)},
     Measured(32, (16 * 128, 32 * 128, 32 * 32), MEAN_FIELD)),
    ({"name": "lstm_c", "op": "scale", "input": "lstm/state_c", "init_values": 2.0},
     Measured(32, (16 * 128, 32 * 128), MEAN_FIELD)),
    ({"name": "gru", "op": "gru", "input": "x", "units": 32, "return_sequences": True, "recurrent_activation": "hard_sigmoid",
      "kernel_init": normal(0.3), "bias_init": {"kind": "constant", "value": 0.2}},
     Measured(32, (16 * 96, 32 * 96), MEAN_FIELD)),
    ({"name": "gru_before", "op": "gru", "input": "x", "units": 32, "reset_after": False,
      "kernel_init": normal(0.05)}, Measured(32, (16 * 96, 32 * 96), MEAN_FIELD)),
    ({"name": "rnn", "op": "simple_rnn", "input": "x", "units": 32, "return_sequences": True,
      "kernel_init": normal(0.1)}, Measured(32, (16 * 32, 32 * 32), MEAN_FIELD)),
    ({"name": "both", "op": "bidirectional", "input": "x", "merge_mode": "sum",
      "layer": {"op": "gru", "units": 32, "return_sequences": True, "kernel_init": normal(0.3)}},
     Measured(32, (16 * 96, 32 * 96) * 2, MEAN_FIELD)),
    ({"name": "both_mul", "op": "bidirectional", "input": "x", "merge_mode": "mul",
      "layer": {"op": "simple_rnn", "units": 32, "kernel_init": normal(0.5)}},
     Measured(32, (16 * 32, 32 * 32) * 2, MEAN_FIELD)),
])
# Inputs equal along the steps: the pools read a `scale` of it (exact moments, no weights); attention's keys then
# score alike, and its values are equal along them.
EQUAL_STEPS = Case("equal_steps", {"x": ([12, 32], "equal"), "m": ([12], "normal")}, [
    ({"name": "s", "op": "scale", "input": "x", "init_values": 1.7}, Measured(32)),
    ({"name": "max1", "op": "max_pool1d", "input": "s", "size": 3}, Measured(32)),
    ({"name": "avg1", "op": "avg_pool1d", "input": "s", "size": 2}, Measured(32)),
    ({"name": "gavg", "op": "global_avg_pool", "input": "s"}, Measured(32)),
    ({"name": "gmax", "op": "global_max_pool", "input": "s"}, Measured(32)),
    ({"name": "mask", "op": "padding_attention_mask", "input": "m"}, Measured(12)),
    ({"name": "att", "op": "multi_head_attention", "input": "x", "num_heads": 4, "key_dim": 8,
      "kernel_init": normal(0.3), "bias_init": {"kind": "constant", "value": 0.1}}, Measured(32, (32 * 32, 32 * 32))),
    ({"name": "v", "op": "dense", "input": "x", "units": 48, "kernel_init": normal(0.4)}, Measured(48, (32 * 48,))),
    ({"name": "cross", "op": "multi_head_attention", "inputs": ["x", "v"], "attention_mask": "mask", "num_heads": 4,
      "key_dim": 8, "value_dim": 12, "kernel_init": normal(0.2)}, Measured(32, (32 * 48, 48 * 48, 48 * 32))),
])
IMAGE = Case("image", {"x": ([12, 12, 32], "normal")}, batch=128, layers=[
    ({"name": "c", "op": "conv2d", "input": "x", "filters": 32, "kernel": 3, "kernel_init": normal(0.3)},
     Measured(10 * 10 * 32, (3 * 3 * 32 * 32,))),
    ({"name": "dw", "op": "depthwise_conv2d", "input": "x", "kernel": 5, "kernel_init": normal(0.3)},
     Measured(8 * 8 * 32, (5 * 5 * 32,))),
    ({"name": "sep", "op": "separable_conv2d", "input": "x", "filters": 32, "kernel": 5, "depthwise_init": normal(0.3),
      "pointwise_init": normal(0.4)}, Measured(8 * 8 * 32, (5 * 5 * 32, 32 * 32))),
    # stride 2 with a 2 x 2 kernel: each output position reads one tap of each channel
    ({"name": "up_conv", "op": "conv2d_transpose", "input": "x", "filters": 32, "kernel": 2, "strides": 2,
      "kernel_init": normal(0.3)}, Measured(24 * 24 * 32, (2 * 2 * 32 * 32,))),
])
# Inputs equal over the positions, read through a `scale` (exact moments, no weights).
EQUAL_PIXELS = Case("equal_pixels", {"x": ([8, 8, 16], "equal")}, [
    ({"name": "s", "op": "scale", "input": "x", "init_values": 1.7}, Measured(16)),
    ({"name": "mp", "op": "max_pool", "input": "s", "size": 2}, Measured(16)),
    ({"name": "ap", "op": "avg_pool", "input": "s", "size": 3, "strides": 1}, Measured(16)),
    ({"name": "gap", "op": "global_avg_pool", "input": "s"}, Measured(16)),
    ({"name": "gmp", "op": "global_max_pool", "input": "s"}, Measured(16)),
    ({"name": "padded", "op": "pad", "input": "s", "padding": [[0, 1], [0, 0]]},
     Measured(16, (), 1 - math.sqrt(8 / 9))),  # one row of zeros in 9: the rule ignores them
    ({"name": "cropped", "op": "crop", "input": "s", "cropping": 1}, Measured(16)),
    ({"name": "up", "op": "upsample", "input": "s", "interpolation": "bilinear"}, Measured(16)),
    ({"name": "resized", "op": "resize", "input": "s", "height": 5, "width": 7}, Measured(16)),
])
IDS = Case("ids", {"ids": ([12], "ids 50")}, [
    ({"name": "emb", "op": "embedding", "input": "ids", "vocab_size": 50, "dim": 32, "embeddings_init": normal(0.5)},
     Measured(12 * 32, (50 * 32,))),
    ({"name": "pos", "op": "positional_embedding", "input": "emb", "max_length": 12,
      "embeddings_init": {"kind": "random_uniform", "minval": -1.0, "maxval": 1.0}}, Measured(12 * 32, (12 * 32,))),
    ({"name": "mixed", "op": "add", "inputs": ["emb", "pos"]}, Measured(12 * 32, (50 * 32, 12 * 32))),
])
CASES = [UNITS, SEQUENCE, EQUAL_STEPS, IMAGE, EQUAL_PIXELS, IDS]


def spec_text(case: Case) -> str:
    measured = [layer["name"] for layer, how in case.layers if how is not None]
    document = {"specgen": 1, "name": case.name,
                "inputs": {name: {"shape": shape, **({"dtype": "int32"} if draw.startswith("ids") else {})}
                           for name, (shape, draw) in case.inputs.items()},
                "outputs": {"o_" + name.replace("/", "_"): name for name in measured},
                "layers": [layer for layer, _ in case.layers]}
    return yaml.safe_dump(document, sort_keys=False)


def measured_ops() -> set[str]:
    """The ops whose outputs some case measures."""
    return {layer["op"] for case in CASES for layer, how in case.layers if how is not None}


def feeds(case: Case, rng: np.random.Generator) -> dict[str, np.ndarray]:
    found, batch = {}, case.batch
    for name, (shape, draw) in case.inputs.items():
        if draw.startswith("ids"):
            found[name] = rng.integers(0, int(draw.split()[1]), (batch, *shape)).astype(np.int32)
        elif draw == "equal":  # one N(0, 1) value per example and channel, the same at every position
            one = rng.standard_normal((batch, shape[-1])).astype(np.float32)
            found[name] = np.broadcast_to(one.reshape(batch, *[1] * (len(shape) - 1), shape[-1]), (batch, *shape)).copy()
        else:
            found[name] = rng.standard_normal((batch, *shape)).astype(np.float32)
    return found


def tolerance(values: np.ndarray, how: Measured, batch: int) -> float:
    """Z standard errors of the measured std (its values' and its weights' draw), plus the model's allowance."""
    centred = values.astype(np.float64).ravel() - float(values.mean())
    kurtosis = float(np.mean(centred**4) / max(np.mean(centred**2) ** 2, 1e-300))
    values_error = max(kurtosis - 1, 0.0) / (4 * batch * how.per_example)
    weights_error = sum(1 / (2 * k) for k in how.kernels)
    return Z * math.sqrt(values_error + weights_error) + how.allowance


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_op_declares_its_moments_rule(name: str) -> None:
    op = REGISTRY[name]
    assert op.moments is not None, (
        f"op '{name}': no OpDef.moments, so `specgen report` cannot give its activation std nor that of any layer after "
        "it: declare how it moves the mean and E[x^2] (kinds/ops/base.py: Weighted, a MomentRule, Derived), or "
        "Unmodelled with the reason the report prints")
    assert (op.moments == "pointwise") == (op.pointwise is not None), (
        f"op '{name}': moments 'pointwise' goes with OpDef.pointwise (the element-wise moments), and only with it")
    if isinstance(op.moments, Unmodelled):
        assert len(op.moments.reason) > 20, f"op '{name}': Unmodelled needs the reason the report prints"
    assert isinstance(op.moments, Weighted | Derived | Unmodelled | str)


def test_extra_outputs_take_their_producers_moments() -> None:
    """A recurrent layer's states (extra outputs) take the moments its Derived rule gives them: measured as
    'lstm/state_h' and 'lstm/state_c' in SEQUENCE."""
    assert EXTRA_OUTPUT_DEF.moments == "extra"


@pytest.mark.parametrize("name", sorted(name for name, op in REGISTRY.items() if not isinstance(op.moments, Unmodelled)))
def test_op_with_a_rule_is_measured(name: str) -> None:
    assert name in measured_ops(), (
        f"op '{name}': no layer with op: {name} is measured in tests/test_init_scale_ops.py CASES (add one, with a "
        "non-default initializer before it where it has none itself)")


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_column_matches_the_generated_model(case: Case, tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    from keras_parity import generated_model

    text = spec_text(case)
    ir = build_ir(load_spec_text(text, f"{case.name}.yaml"))
    scales = scale_model.propagate(ir)
    column = scale_model.ratio_column(scales)
    model = generated_model(text, tmp_path)
    x = feeds(case, np.random.default_rng(0))
    runs = {False: model(x, training=False)}
    if any(how is not None and how.training for _, how in case.layers):
        runs[True] = model(x, training=True)
    wrong = []
    for layer, how in case.layers:
        if how is None:
            continue
        name = layer["name"]
        values = np.asarray(runs[how.training]["o_" + name.replace("/", "_")])
        predicted = float(column[name]) * scales[name].reference  # the column is over the reference (1 but after embeddings)
        got, allowed = float(values.std()), tolerance(values, how, case.batch)
        if not abs(got / predicted - 1) <= allowed:
            wrong.append(f"{layer['op']} '{name}': the column predicts std {predicted:.4g}, the generated model gives "
                         f"{got:.4g} ({got / predicted - 1:+.1%}; tolerance {allowed:.1%})")
    assert wrong == []


def test_softmax_is_not_modelled_and_a_normalization_restarts() -> None:
    """softmax is Unmodelled: its '-' and that of the dense reading it come with the reason under the report's
    table; the layer_norm after it restarts (its std measured in test_column_matches_the_generated_model)."""
    ir = build_ir(load_spec_text(spec_text(UNITS)))
    scales = scale_model.propagate(ir)
    column = scale_model.ratio_column(scales)
    assert column["probs"] == column["after_probs"] == "-" and column["ln_after_probs"] == "1"
    assert column["rms"] != "-" and column["bn"] == "1"
    note = scale_model.unmodelled_note(ir, scales)
    assert note.startswith("'-': not modelled at 'probs' (softmax): a softmax's outputs are probabilities")
    assert note.endswith("; nor is the layer that reads it.")


CONV1D = """specgen: 1
name: c1d
inputs: {{x: {{shape: [10, 16]}}}}
outputs: {{y: d}}
layers:
  - {{name: c, op: {op}, input: x, filters: 16, kernel: {kernel}, kernel_init: {{kind: random_normal, stddev: 200}}}}
  - {{name: d, op: dense, units: 4}}
"""


def test_conv1d_with_a_large_kernel_is_warned_about_as_conv2d_is() -> None:
    """A conv1d of stddev 200 over 3 x 16 inputs: 200 sqrt(48) = 1386 times its input's std (Keras' Conv1D measures
    1427 on 256 examples), as the same convolution written as conv2d [3, 1]; it was '-' and no warning."""
    one = CONV1D.format(op="conv1d", kernel=3)
    two = CONV1D.format(op="conv2d", kernel="[3, 1]").replace("[10, 16]", "[10, 1, 16]")
    for text in (one, two):
        loaded = load_spec_text(text, "c1d.yaml")
        ir = build_ir(loaded)
        assert scale_model.ratio_column(scale_model.propagate(ir))["c"] == "1.39e+03"
        (warning,) = lints.init_scale_warnings(loaded, ir)
        assert "grows to 1.39e+03x the input's" in str(warning) and "over fan-in 48" in str(warning)


def test_preprocessing_after_a_resize_is_still_preprocessing() -> None:
    """A rescale of raw pixels that a resize read first brings them to the unit scale the model assumes, as one
    reading the input directly does (examples/finetune/mobilenet_v2_digits.yaml: its [0, 255] -> [-1, 1])."""
    text = ("specgen: 1\nname: pre\ninputs:\n  image: {shape: [8, 8, 1], dtype: uint8}\noutputs:\n  y: c\nlayers:\n"
            "  - {name: big, op: resize, height: 16, width: 16}\n"
            "  - {name: unit, op: rescale, scale: 0.00784313725490196, offset: -1.0}\n"
            "  - {name: c, op: conv2d, filters: 4, kernel: 3}\n")
    column = scale_model.ratio_column(scale_model.propagate(build_ir(load_spec_text(text))))
    assert column["unit"] == "1" and column["c"] == "0.632"  # glorot, fans 9 and 36: sqrt(9 * 2 / (9 + 36))
