"""The `targets:` section and the TD-target ops through `specgen validate` and the IR (no TensorFlow).

Each broken case is BASE with one mistake, run through the real CLI; expected lines were checked by
hand against the text (the column is where the offending key or value starts).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specgen.cli import main
from specgen.ir.model import ModelIR
from specgen.ir.resolve import build_ir, ir_from_file
from specgen.report import report
from specgen.spec.load import load_spec_text

ROOT = Path(__file__).resolve().parents[1]

BASE = """\
specgen: 1
name: dqn
inputs:
  s: {shape: [4]}
  a: {shape: [1], dtype: int32}
  s2: {shape: [4]}
outputs:
  q: online
  err: err
blocks:
  mlp:
    inputs: [x]
    outputs: {q: out}
    layers:
      - {name: fc, op: dense, input: x, units: 8, activation: relu}
      - {name: out, op: dense, units: 3}
layers:
  - {name: online, block: mlp, input: s}
  - {name: copy, block: mlp, input: s2}
  - {name: qa, op: gather, inputs: [online, a]}
  - {name: best, op: reduce, kind: max, input: copy, keepdims: true}
  - {name: fixed, op: stop_gradient}
  - {name: err, op: subtract, inputs: [qa, fixed]}
loss: {kind: mean_squared_error, predictions: err, labels: zero}
optimizers:
  main: {variables: "online/*", kind: sgd, learning_rate: 0.1}
targets:
  follow: {online: "online/*", target: "copy/*", tau: 0.01}
train: {batch_size: 4}
"""


def mutate(old: str, new: str) -> str:
    assert BASE.count(old) == 1, f"{old!r} occurs {BASE.count(old)} times in BASE"
    return BASE.replace(old, new)


CASES = [
    ("target_matches_nothing", mutate('target: "copy/*"', 'target: "cpy/*"'),
     ["28:40: error: target 'follow': target 'cpy/*' matches no variable; did you mean 'copy/*'?"]),
    ("not_a_prefix_pattern", mutate('online: "online/*"', 'online: "online/*/kernel"'),
     ["28:20: error: target 'follow': online 'online/*/kernel' is not a prefix pattern; expected a path prefix "
      "followed by one '*' and no other wildcard, e.g. 'online/*'"]),
    ("unpaired_variable", mutate("  - {name: copy, block: mlp, input: s2}",
                                 "  - {name: copy, block: mlp, input: s2}\n  - {name: copy/extra, op: dense, units: 3}"),
     ["29:40: error: target 'follow': 'copy/extra/kernel' has no counterpart 'online/extra/kernel' (2 unpaired "
      "variables); online 'online/*' and target 'copy/*' must hold the same variables under their prefixes "
      "(e.g. two instances of one block)"]),
    ("shape_mismatch", mutate("  s2: {shape: [4]}", "  s2: {shape: [5]}"),
     ["28:40: error: target 'follow': 'copy/fc/kernel' has shape [5, 8] but the online 'online/fc/kernel' it "
      "copies has shape [4, 8]; expected equal shapes"]),
    ("optimizer_claims_a_target", mutate('variables: "online/*"', 'variables: ["online/*", "copy/*"]'),
     ["26:21: error: optimizer 'main' claims variables 'copy/fc/kernel', 'copy/fc/bias', 'copy/out/kernel', "
      "'copy/out/bias' of the 'target' collection; a target network's weights follow their online weights "
      "(targets:) and no optimizer trains them: remove them from this optimizer's variables"]),
    ("overlapping_prefixes", mutate('target: "copy/*"', 'target: "online/fc/*"'),
     ["28:40: error: target 'follow': 'online/fc/bias' is both an online and a target variable; the two "
      "prefixes must not overlap"]),
    ("both_rules", mutate("tau: 0.01}", "tau: 0.01, every_steps: 10}"),
     ["28:11: error: follow: expected a mapping with 'online', 'target' and exactly one of 'tau' or 'every_steps', "
      "received {online: 'online/*', target: 'copy/*', tau: 0.01, every_steps: 10} (a mapping)"]),
    ("tau_above_one", mutate("tau: 0.01}", "tau: 1.5}"),
     ["28:55: error: tau: received 1.5, expected a value <= 1.0"]),
    ("written_twice", mutate("  follow: {", '  again: {online: "online/*", target: "copy/*", every_steps: 5}\n  follow: {'),
     ["29:40: error: target 'follow' writes 'copy/fc/kernel', which target 'again' already writes; each variable "
      "follows one online variable"]),
    ("gather_float_indices", mutate("inputs: [online, a]", "inputs: [online, s]"),
     ["20:36: error: layer 'qa' (gather): gather's second input 's' holds the indices and must be int32 or int64; "
      "received float32"]),
    ("gather_shape", mutate("  a: {shape: [1], dtype: int32}", "  a: {shape: [2, 1], dtype: int32}"),
     ["20:36: error: layer 'qa' (gather): gather along axis 1 needs indices shaped like the values except on that "
      "axis; received values 'online/out' [batch, 3] and indices 'a' [batch, 2, 1]; expected [batch, k] (any k)"]),
    ("reduce_axes_twice", mutate("kind: max, input: copy", "kind: max, axis: [1, -1], input: copy"),
     ["21:47: error: layer 'best' (reduce): reduce's axes must be distinct; received [1, -1], which names axis 1 "
      "twice"]),
    ("export_output_unknown", BASE + "export: {onnx: {outputs: [q, er]}}\n",
     ["30:30: error: export output 'er' is not an output; did you mean 'err'? (outputs: q, err)"]),
    ("export_output_twice", BASE + "export: {onnx: {outputs: [q, q]}}\n",
     ["30:30: error: export output 'q' is listed twice"]),
    ("reduce_batch_axis", mutate("kind: max, input: copy", "kind: max, axis: 0, input: copy"),
     ["21:47: error: layer 'best' (reduce): axis 0 is out of range for a rank-2 tensor (axis 0 is the batch)"]),
]


def validate(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, str, list[str]]:
    code = main(["validate", str(path)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err.splitlines()


def test_base_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(BASE)
    assert validate(capsys, path) == (0, f"ok: {path} (dqn: 8 layers, 11 variables)\n", [])


@pytest.mark.parametrize(("text", "expected"), [pytest.param(t, e, id=i) for i, t, e in CASES])
def test_broken_targets(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: list[str]) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    code, out, err = validate(capsys, path)
    assert (code, out) == (1, "")
    assert err == [f"{path}:{e}" for e in expected] + [f"{len(expected)} error{'s' if len(expected) > 1 else ''} found"]


def ir_of(text: str) -> ModelIR:
    return build_ir(load_spec_text(text, "dqn.yaml"))


def test_target_collection_and_pairs() -> None:
    """Targets are model variables in `target`, neither trainable nor frozen; pairs go by the rest of the path."""
    ir = ir_of(BASE)
    copies = ("copy/fc/kernel", "copy/fc/bias", "copy/out/kernel", "copy/out/bias")
    assert ir.collections["target"] == copies
    assert ir.collections["trainable"] == tuple(p.replace("copy/", "online/") for p in copies)
    assert ir.collections["frozen"] == ()
    assert [v.collections for v in ir.variables if v.path in copies] == [("model", "target")] * 4
    (target,) = ir.training.targets
    assert (target.name, target.kind, target.tau, target.every_steps) == ("follow", "soft", 0.01, None)
    assert target.pairs == tuple((p.replace("copy/", "online/"), p) for p in copies)


def test_target_batch_norm_runs_in_inference_mode() -> None:
    """A batch norm in the target network is copied, not updated by its own forward pass."""
    text = mutate("      - {name: out, op: dense, units: 3}",
                  "      - {name: bn, op: batch_norm}\n      - {name: out, op: dense, units: 3}")
    text = text.replace("tau: 0.01}", "every_steps: 100}")
    ir = ir_of(text)
    assert [n.name for n in ir.nodes if n.inference_mode] == ["copy/fc", "copy/bn", "copy/out"]  # the whole copy
    assert ir.collections["update"] == ("online/bn/moving_mean", "online/bn/moving_variance")
    assert ir.collections["target"][2:4] == ("copy/bn/gamma", "copy/bn/beta")
    assert ("online/bn/moving_mean", "copy/bn/moving_mean") in ir.training.targets[0].pairs


def test_target_dropout_is_off_in_training_as_target_model_training_false(tmp_path: Path) -> None:
    """The held TD target must not be redrawn by each step's dropout seed: a hand-written DQN calls its target model
    with Keras' default training=False. The online network's dropout stays on. Both forward passes of one training
    step's model, at two seeds: the target branch bitwise the same and equal to inference mode; the online one not."""
    tf = pytest.importorskip("tensorflow")
    import numpy as np

    from specgen.render.files import render_files
    from specgen.runtime.lib.generated import load_generated

    text = mutate("      - {name: out, op: dense, units: 3}",
                  "      - {name: drop, op: dropout, rate: 0.5}\n      - {name: out, op: dense, units: 3}")
    text = text.replace("  q: online\n", "  q: online\n  best: best\n")
    ir = ir_of(text)
    assert [n.name for n in ir.nodes if n.inference_mode] == ["copy/fc", "copy/drop", "copy/out"]
    (tmp_path / "model.py").write_bytes(render_files(ir)["model.py"])
    model = getattr(load_generated(tmp_path / "model.py"), ir.class_name)(seed=0)
    rng = np.random.default_rng(0)
    features = {"s": rng.normal(size=(8, 4)), "a": np.zeros((8, 1), np.int32), "s2": rng.normal(size=(8, 4))}
    features = {k: tf.constant(v, tf.int32 if k == "a" else tf.float32) for k, v in features.items()}
    runs = [model(features, training=True, seed=tf.constant([step, 0], tf.int64)) for step in (0, 1)]
    still = model(features, training=False)
    assert runs[0]["best"].numpy().tobytes() == runs[1]["best"].numpy().tobytes() == still["best"].numpy().tobytes()
    assert not np.array_equal(runs[0]["q"].numpy(), runs[1]["q"].numpy())  # the online dropout draws per step


def test_report_and_collections_show_each_target_beside_its_online_variable() -> None:
    from specgen.render.files import render_collections

    ir = ir_from_file(ROOT / "examples" / "specs" / "chain_dqn.yaml")
    text = report(ir, "chain_dqn.yaml")
    assert ("target    update          online variable     target variable            shape\n"
            "--------  --------------  ------------------  -------------------------  -------\n"
            "q_target  soft, tau 0.05  qnet/hidden/kernel  target_qnet/hidden/kernel  [6, 32]\n") in text
    assert "q_target  soft, tau 0.05  qnet/out/bias       target_qnet/out/bias       [2]\n" in text
    assert render_collections(ir).endswith(
        'targets:  # each target variable -> the online variable it follows\n  "q_target":\n'
        '    update: soft, tau 0.05\n    follows:\n'
        '      "target_qnet/hidden/kernel": "qnet/hidden/kernel"\n      "target_qnet/hidden/bias": "qnet/hidden/bias"\n'
        '      "target_qnet/out/kernel": "qnet/out/kernel"\n      "target_qnet/out/bias": "qnet/out/bias"\n')


def test_specs_without_targets_render_no_target_code() -> None:
    from specgen.render.files import render_train_py

    text = render_train_py(ir_from_file(ROOT / "examples" / "specs" / "digits_cnn.yaml"))
    assert "target" not in text


def test_export_outputs_leave_out_what_they_do_not_read() -> None:
    """model.onnx holds the selected outputs' layers, inputs and weights: no target network behind `q`."""
    from specgen.render.files import render_onnx_text

    q_only = render_onnx_text(ir_of(BASE + "export: {onnx: {outputs: [q]}}\n"))
    assert "copy__" not in q_only and " s2" not in q_only and " a," not in q_only
    assert "float[batch, 4] s,\n  float[4, 8] online__fc__kernel," in q_only
    assert ") => (\n  float[batch, 3] q\n)" in q_only
    everything = render_onnx_text(ir_of(BASE))  # `err` reads the target network: its weights are exported
    assert "float[4, 8] copy__fc__kernel" in everything and "float[batch, 1] err" in everything
