"""The static lints (specgen/ir/lints.py): initialization scale and batch-norm momentum.

The propagation is checked against Monte Carlo estimates drawn with numpy: each sample draws a
fresh input and fresh weights from the initializer, so both expectations are covered. With
40,000 samples the standard error of a second moment is about 1-2%; the tolerance is 6%.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from specgen.cli import main
from specgen.ir import gains, lints
from specgen.ir import scales as scale_model
from specgen.ir.gains import activation
from specgen.ir.resolve import build_ir
from specgen.kinds.initializers.normal import TRUNCATED_VARIANCE
from specgen.spec.load import load_spec_text

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = 40_000
TOLERANCE = 0.06  # 3-6 standard errors of a second moment at 40,000 samples (module docstring)


def spec(layers: str, shape: str = "[8]") -> str:
    return f"specgen: 1\nname: lint\ninputs:\n  x: {{shape: {shape}}}\noutputs:\n  y: last\nlayers:\n{layers}"


def chain(count: int, units: int, init: str, act: str) -> str:
    lines = [f"  - {{name: d{i}, op: dense, units: {units}, kernel_init: {init}, activation: {act}}}"
             for i in range(count)]
    return spec("\n".join(lines) + "\n  - {name: last, op: dense, units: 4}\n", f"[{units}]")


def scales(text: str) -> dict[str, scale_model.Scale]:
    return scale_model.propagate(build_ir(load_spec_text(text)))


def draw(kind: str, fan_in: int, fan_out: int, rng: np.random.Generator, size: tuple[int, ...]) -> np.ndarray:
    """Weights as Keras draws them (truncated normals by redrawing beyond two stddevs)."""
    def truncated(std: float) -> np.ndarray:
        values = rng.normal(0, std, size)
        while (bad := np.abs(values) > 2 * std).any():
            values[bad] = rng.normal(0, std, int(bad.sum()))
        return values
    return {
        "glorot_uniform": lambda: rng.uniform(-1, 1, size) * math.sqrt(6 / (fan_in + fan_out)),
        "glorot_normal": lambda: truncated(math.sqrt(2 / (fan_in + fan_out)) / 0.87962566103423978),
        "he_normal": lambda: truncated(math.sqrt(2 / fan_in) / 0.87962566103423978),
        "he_uniform": lambda: rng.uniform(-1, 1, size) * math.sqrt(6 / fan_in),
        "random_normal": lambda: rng.normal(0.1, 0.3, size),
        "truncated_normal": lambda: 0.1 + truncated(0.3),
        "random_uniform": lambda: rng.uniform(-0.2, 0.4, size),
    }[kind]()


INITS = {"glorot_uniform": "glorot_uniform", "glorot_normal": "glorot_normal", "he_normal": "he_normal",
         "he_uniform": "he_uniform", "random_normal": "{kind: random_normal, mean: 0.1, stddev: 0.3}",
         "truncated_normal": "{kind: truncated_normal, mean: 0.1, stddev: 0.3}",
         "random_uniform": "{kind: random_uniform, minval: -0.2, maxval: 0.4}"}
ACTS = {"linear": lambda v: v, "relu": lambda v: np.maximum(v, 0), "tanh": np.tanh,
        "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "relu6": lambda v: np.clip(v, 0, 6)}


@pytest.mark.parametrize("kind", list(INITS))
@pytest.mark.parametrize("act", ["linear", "relu", "tanh", "sigmoid", "relu6"])
def test_propagation_matches_monte_carlo(kind: str, act: str) -> None:
    fan_in, units = 8, 6
    text = spec(f"  - {{name: h, op: dense, units: {units}, kernel_init: {INITS[kind]}, "
                f"bias_init: {{kind: constant, value: 0.2}}}}\n  - {{name: last, op: {act if act != 'linear' else 'flatten'}}}\n")
    got = scales(text)
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (SAMPLES, fan_in))
    w = draw(kind, fan_in, units, rng, (SAMPLES, fan_in))
    pre = (x * w).sum(axis=1) + 0.2
    post = ACTS[act](pre)
    for name, values in (("h", pre), ("last", post)):
        mean, square = got[name].moments  # type: ignore[misc]
        assert square == pytest.approx(float(np.mean(values**2)), rel=TOLERANCE), name
        assert mean == pytest.approx(float(np.mean(values)), abs=TOLERANCE * math.sqrt(square)), name


def test_truncated_normal_variance_factor() -> None:
    z = np.random.default_rng(1).normal(size=2_000_000)
    assert float(np.var(z[np.abs(z) <= 2])) == pytest.approx(TRUNCATED_VARIANCE, rel=3e-3)


@pytest.mark.parametrize("name", ["gelu", "swish", "elu", "selu", "softplus", "hard_swish", "leaky_relu"])
def test_quadrature_matches_sampling(name: str) -> None:
    x = np.random.default_rng(2).normal(0.3, 1.5, 200_000)
    y = {"swish": lambda: x / (1 + np.exp(-x)), "elu": lambda: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
         "selu": lambda: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(np.minimum(x, 0))),
         "softplus": lambda: np.logaddexp(0, x), "hard_swish": lambda: x * np.clip(x / 6 + 0.5, 0, 1),
         "leaky_relu": lambda: np.where(x > 0, x, 0.2 * x),
         "gelu": lambda: x * 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))}[name]()
    mean, square = activation(name, (0.3, 0.3**2 + 1.5**2)) or (0.0, 0.0)
    assert square == pytest.approx(float(np.mean(y**2)), rel=1e-2)
    assert mean == pytest.approx(float(np.mean(y)), abs=1e-2)


def flagged(text: str) -> list[str]:
    return [node.name for node, _ in lints.init_scale_findings(build_ir(load_spec_text(text)))]


BIG = spec("  - {name: h, op: dense, units: 16, activation: relu, kernel_init: {kind: random_normal, stddev: 200}}\n"
           "  - {name: last, op: dense, units: 4}\n", "[5]")


def test_stddev_200_on_fan_in_5_is_flagged() -> None:
    loaded = load_spec_text(BIG, "big.yaml")
    (warning,) = lints.init_scale_warnings(loaded, build_ir(loaded))
    text = str(warning)
    assert text.startswith("big.yaml:") and ": warning: layer 'h' (dense)" in text
    assert "random_normal (mean 0, stddev 200)" in text and "fan-in 5" in text and "he_normal for relu" in text


def test_he_normal_relu_chain_of_20_is_not_flagged() -> None:
    text = chain(20, 64, "he_normal", "relu")
    assert flagged(text) == []
    assert 0.5 < (scales(text)["d19"].std or 0) < 1.0  # relu(N(0, 1)): std sqrt(1/2 - 1/(2 pi)) = 0.58


def test_tanh_with_glorot_is_fine_and_glorot_relu_chain_shrinks() -> None:
    assert flagged(chain(10, 64, "glorot_uniform", "tanh")) == []
    assert flagged(chain(20, 64, "glorot_uniform", "relu"))[:1] == ["d6"]  # halves E[x^2] per layer


def test_sigmoid_chain_shrinking_is_flagged() -> None:
    text = chain(6, 64, "random_normal", "sigmoid")  # Keras' old default: stddev 0.05
    assert flagged(text) == ["d0"]
    assert (scales(text)["d5"].std or 1) < 0.1


def test_normalization_and_gates_are_not_flagged() -> None:
    text = spec("  - {name: c, op: dense, units: 16, kernel_init: {kind: random_normal, stddev: 30}}\n"
                "  - {name: last, op: batch_norm}\n")
    assert flagged(text) == [] and scales(text)["last"].std == pytest.approx(1.0)


def test_momentum_share() -> None:
    assert lints.held_share(0.99, 48) == pytest.approx(0.617, abs=5e-4)
    ir = build_ir(load_spec_text(spec("  - {name: last, op: batch_norm, momentum: 0.99}\n")))
    (line,) = lints.momentum_warnings(ir, 48)
    assert "62%" in line and "'last'" in line and "momentum 0.939 or lower" in line
    assert lints.momentum_warnings(ir, 1000) == []
    assert "36.60% of their initial values after 100 updates, 0.00% after 1000" in lints.momentum_note(ir)


def test_validate_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(BIG)
    assert main(["validate", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "ok:" in out and ": warning: layer 'h'" in err and "1 warning" in err
    assert main(["validate", "--strict", str(path)]) == 1
    out, err = capsys.readouterr()
    assert "ok:" not in out and ": error: layer 'h'" in err and "1 error found" in err
    assert main(["validate", "--strict", "--no-lint", "init_scale", str(path)]) == 0


def test_examples_are_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--strict", str(ROOT / "examples" / "specs")]) == 0


def test_report_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(BIG)
    assert main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    assert "activation std (init)" in out
    row = next(line for line in out.splitlines() if line.startswith("h "))
    assert float(row.split()[-1]) == pytest.approx(200 * math.sqrt(5) * math.sqrt(0.5 - 0.5 / math.pi), rel=1e-3)


def test_embedding_output_is_the_reference() -> None:
    text = ("specgen: 1\nname: emb\ninputs:\n  ids: {shape: [3], dtype: int32}\noutputs:\n  y: last\nlayers:\n"
            "  - {name: e, op: embedding, vocab_size: 50, dim: 16}\n  - {name: f, op: flatten}\n"
            "  - {name: last, op: dense, units: 4}\n")
    got = scales(text)
    assert got["e"].std == pytest.approx(1.0) and got["e"].reference == pytest.approx(0.1 / math.sqrt(12))
    assert flagged(text) == []


def test_train_warns_when_the_momentum_outlasts_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """4 updates with momentum 0.99 keep 96% of the initial statistics: `specgen train` says so before training."""
    pytest.importorskip("tensorflow")
    from specgen.cli import main

    digits = Path(__file__).resolve().parents[1] / "examples" / "data" / "digits.npz"
    (tmp_path / "s.yaml").write_text(f"""\
specgen: 1
name: bn_short
inputs: {{image: {{shape: [8, 8, 1]}}}}
outputs: {{logits: out}}
layers:
  - {{name: flat, op: flatten}}
  - {{name: bn, op: batch_norm, momentum: 0.99}}
  - {{name: out, op: dense, units: 10}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers: {{all: {{kind: sgd, learning_rate: 0.01}}}}
train: {{batch_size: 8}}
data: {{train: {{npz: {digits}, features: {{image: x_train}}, labels: {{label: y_train}}}}}}
checkpoint: {{dir: run}}
""")
    assert main(["train", str(tmp_path / "s.yaml"), "--steps", "4", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert ("warning: batch-norm momentum 0.99 ('bn'): after the 4 planned updates the moving statistics still hold "
            "96% of their initial values") in err
    # The spec's own `lints.skip` silences it (a short fine-tuning run that means it).
    quiet = (tmp_path / "s.yaml").read_text().replace("dir: run}", "dir: run2}\nlints: {skip: [bn_momentum]}")
    (tmp_path / "quiet.yaml").write_text(quiet)
    assert main(["train", str(tmp_path / "quiet.yaml"), "--steps", "4", "--quiet"]) == 0
    assert "batch-norm momentum" not in capsys.readouterr().err

    # Fine-tuning: statistics the restore plan sets did not start at 0 and 1, so 'bn' is left out; 'bn2', which the
    # restore leaves to its initializer, is still warned about. A resumed run of such a spec says nothing (its
    # statistics began from the restore when it started).
    tuned = (tmp_path / "s.yaml").read_text().replace(
        "  - {name: out, op: dense, units: 10}", "  - {name: bn2, op: batch_norm, momentum: 0.99}\n"
        "  - {name: out, op: dense, units: 10}").replace(
        "dir: run}", f"dir: run3, restore: [{{from: {tmp_path / 'run'}}}]}}")
    (tmp_path / "tuned.yaml").write_text(tuned)
    assert main(["train", str(tmp_path / "tuned.yaml"), "--steps", "4", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "batch-norm momentum 0.99 ('bn2'): after the 4 planned updates" in err and "'bn'" not in err, err
    assert main(["train", str(tmp_path / "tuned.yaml"), "--steps", "2", "--resume", "--quiet"]) == 0
    assert "batch-norm momentum" not in capsys.readouterr().err


# --- saturation (issue 17): the pre-activation scale of tanh, sigmoid and hard_sigmoid ----------------

def warnings_of(text: str) -> list[str]:
    loaded = load_spec_text(text, "s.yaml")
    return [str(w) for w in lints.init_scale_warnings(loaded, build_ir(loaded))]


def test_tanh_after_a_stddev_200_kernel_is_saturated() -> None:
    """Its output std is 0.99 (inside the band), so only the pre-activation shows it: every unit saturated.
    The std: 200 * sqrt(0.7737 * 8) = 498 (truncated_normal's variance over a fan-in of 8)."""
    assert warnings_of(spec("  - {name: h, op: dense, units: 4, activation: tanh, kernel_init: "
                            "{kind: truncated_normal, stddev: 200}}\n  - {name: last, op: dense, units: 2}\n")) == [
        "s.yaml:8:67: warning: layer 'h' (dense): at initialization the input of its tanh has std 498 (unit-variance "
        "inputs assumed, see docs/spec.md#lints), so 99.7% of its units start saturated (|x| > 1.82, where tanh's "
        "slope is under a tenth of its peak) and pass almost no gradient; kernel_init truncated_normal (mean 0, "
        "stddev 200) of 'h' over fan-in 8 sets that scale; glorot_uniform for tanh keeps the std near 1"]


def test_an_activation_op_and_a_shifted_mean_are_saturated_too() -> None:
    assert warnings_of(spec("  - {name: h, op: dense, units: 4, kernel_init: {kind: random_normal, stddev: 1}}\n"
                            "  - {name: last, op: tanh}\n")) == [
        "s.yaml:9:5: warning: layer 'last' (tanh): at initialization its input has std 2.83 (unit-variance inputs "
        "assumed, see docs/spec.md#lints), so 52.0% of its units start saturated (|x| > 1.82, where tanh's slope is "
        "under a tenth of its peak) and pass almost no gradient; kernel_init random_normal (mean 0, stddev 1) of 'h' "
        "over fan-in 8 sets that scale; glorot_uniform for tanh keeps the std near 1"]
    assert warnings_of(spec("  - {name: h, op: dense, units: 4, activation: sigmoid, bias_init: {kind: constant, "
                            "value: 6}}\n  - {name: last, op: dense, units: 2}\n")) == [
        "s.yaml:8:5: warning: layer 'h' (dense): at initialization the input of its sigmoid has std 1.15 and mean 6 "
        "(unit-variance inputs assumed, see docs/spec.md#lints), so 98.0% of its units start saturated (|x| > 3.64, "
        "where sigmoid's slope is under a tenth of its peak) and pass almost no gradient; bias_init constant "
        "(value 6) of 'h' shifts it; zeros keeps the mean at 0"]


@pytest.mark.parametrize("act", ["tanh", "sigmoid", "hard_sigmoid"])
@pytest.mark.parametrize("init", ["glorot_uniform", "glorot_normal"])
def test_glorot_before_a_saturating_activation_is_quiet(act: str, init: str) -> None:
    """Over a fan-in of 784 into 4 units glorot's pre-activation std is sqrt(2 * 784 / 788) = 1.41: 20% of tanh
    units beyond 1.82. (A chain of sigmoids or hard sigmoids shrinks instead: test_sigmoid_chain_shrinking...)"""
    assert warnings_of(spec(f"  - {{name: h, op: dense, units: 4, activation: {act}, kernel_init: {init}}}\n"
                            "  - {name: last, op: dense, units: 2}\n", "[784]")) == []
    if act == "tanh":
        assert warnings_of(chain(10, 64, init, act)) == []


@pytest.mark.parametrize(("name", "mean", "std"), [("tanh", 0.0, 2.83), ("sigmoid", 6.0, 1.15),
                                                    ("hard_sigmoid", -1.0, 4.9), ("tanh", 0.3, 0.0)])
def test_saturated_share_matches_sampling(name: str, mean: float, std: float) -> None:
    """The share of a Gaussian beyond the threshold, against 200,000 draws (standard error under 0.0012)."""
    threshold, share, _ = gains.saturated(name, (mean, std * std + mean * mean)) or (0.0, 0.0, "")
    x = np.random.default_rng(3).normal(mean, std, 200_000)
    assert share == pytest.approx(float(np.mean(np.abs(x) > threshold)), abs=0.005)
    slope = {"tanh": lambda v: 1 - np.tanh(v) ** 2, "sigmoid": lambda v: 0.25 / np.cosh(v / 2) ** 2,
             "hard_sigmoid": lambda v: np.where(np.abs(v) < 3, 1 / 6, 0.0)}[name]
    peak = float(slope(np.zeros(1))[0])
    # The threshold is where the slope falls to a tenth of its peak (hard_sigmoid: where it is 0).
    assert float(slope(np.array([threshold * 1.0001]))[0]) <= 0.1 * peak <= float(slope(np.array([threshold * 0.9999]))[0])
