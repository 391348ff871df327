"""Restore maps and plans: fine-tuning from TF1, TF2 and specgen checkpoints written here."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from specgen.diagnostics import SpecError  # noqa: E402
from specgen.ir.resolve import build_ir  # noqa: E402
from specgen.render.files import render_files  # noqa: E402
from specgen.runtime.checkpoint import CheckpointFolder  # noqa: E402
from specgen.runtime.commands.restore import (  # noqa: E402
    RestorePlan,
    apply_plan,
    format_plan,
    list_checkpoint,
    plan_restore,
    run_restore_plan,
    summary_line,
)
from specgen.runtime.lib.generated import load_generated  # noqa: E402
from specgen.spec.io import RenamePattern, RestoreSource  # noqa: E402
from specgen.spec.load import LoadedSpec, load_spec_text  # noqa: E402

SPEC = """\
specgen: 1
name: tiny
inputs: {{image: {{shape: [6, 6, 2]}}}}
outputs: {{logits: {head}}}
layers:
  - {{name: conv1, op: conv2d, filters: 4, kernel: 3, padding: same, activation: relu}}
  - {{name: flat, op: flatten}}
  - {{name: {head}, op: dense, units: {units}}}
checkpoint:
  dir: run
{restore}"""
SLIM_MAP = """\
  restore:
    - from: tf1/model.ckpt
      map:
        - {pattern: "^(.*)/weights$", to: "\\\\1/kernel"}
        - {pattern: "^(.*)/biases$", to: "\\\\1/bias"}
      ema_to_model: EMA
"""
SHAPES = {"conv1/kernel": (3, 3, 2, 4), "conv1/bias": (4,), "fc/kernel": (144, 3), "fc/bias": (3,)}


def spec_text(restore: str = "", head: str = "fc", units: int = 3) -> str:
    return SPEC.format(head=head, units=units, restore=restore)


def load(folder: Path, text: str) -> LoadedSpec:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "spec.yaml"
    path.write_text(text)
    return load_spec_text(text, display=str(path), path=path)


def model_class(folder: Path, loaded: LoadedSpec) -> Any:
    ir = build_ir(loaded)
    code = folder / "code"
    code.mkdir(parents=True, exist_ok=True)
    (code / "model.py").write_bytes(render_files(ir)["model.py"])
    module: ModuleType = load_generated(code / "model.py")
    return module.__dict__[ir.class_name]


def targets_of(loaded: LoadedSpec) -> dict[str, tuple[tuple[int, ...], str]]:
    return {v.path: (v.shape, v.dtype) for v in build_ir(loaded).model_variables}


def values_of(model: Any) -> dict[str, np.ndarray]:
    return {path: var.numpy().copy() for path, var in model.variables_by_path().items()}


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def random_values(seed: int, shapes: dict[str, tuple[int, ...]], dtypes: dict[str, Any] | None = None
                  ) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.normal(0, 0.3, s).astype((dtypes or {}).get(k, np.float32)) for k, s in shapes.items()}


def save_tf1(prefix: Path, values: dict[str, np.ndarray]) -> Path:
    """A name-based checkpoint as tf.compat.v1.train.Saver writes it."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    graph = tf.Graph()
    with graph.as_default():
        variables = [tf.compat.v1.Variable(value, name=name) for name, value in values.items()]
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, str(prefix))
    return prefix


def checkpoint_tensor(prefix: Path, key: str) -> np.ndarray:
    return np.asarray(tf.train.load_checkpoint(str(prefix)).get_tensor(key))


def slim_checkpoint(prefix: Path, image: np.ndarray) -> dict[str, np.ndarray]:
    """A TF1 slim-style graph (weights, biases, EMA copy, global_step), saved; its raw and EMA logits."""
    start, trained = random_values(1, SHAPES), random_values(2, SHAPES)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    graph = tf.Graph()
    with graph.as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        params = {}
        for scope in ("conv1", "fc"):
            with tf.compat.v1.variable_scope(scope):
                params[scope] = (tf.compat.v1.get_variable("weights", initializer=start[f"{scope}/kernel"]),
                                 tf.compat.v1.get_variable("biases", initializer=start[f"{scope}/bias"]))
        ema = tf.compat.v1.train.ExponentialMovingAverage(0.9)
        ema_op = ema.apply([params["conv1"][0]])
        x = tf.compat.v1.placeholder(tf.float32, [None, 6, 6, 2])

        def logits(conv_kernel: Any) -> Any:
            conv = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, conv_kernel, [1, 1, 1, 1], "SAME"), params["conv1"][1]))
            return tf.nn.bias_add(tf.matmul(tf.reshape(conv, [-1, 144]), params["fc"][0]), params["fc"][1])

        raw, averaged = logits(params["conv1"][0]), logits(ema.average(params["conv1"][0]))
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for scope in ("conv1", "fc"):  # "training": the raw weights move, the EMA copy lags behind
                session.run([params[scope][0].assign(trained[f"{scope}/kernel"]),
                             params[scope][1].assign(trained[f"{scope}/bias"])])
            session.run([ema_op, step.assign(7)])
            outputs = session.run({"raw": raw, "ema": averaged}, {x: image})
            saver.save(session, str(prefix))
    return outputs


@pytest.mark.parametrize("ema", [False, True])
def test_tf1_slim_checkpoint_restores_through_a_map(tmp_path: Path, ema: bool) -> None:
    image = np.random.default_rng(0).uniform(0, 1, (5, 6, 6, 2)).astype(np.float32)
    prefix = tmp_path / "tf1" / "model.ckpt"
    expected = slim_checkpoint(prefix, image)
    assert not np.allclose(expected["raw"], expected["ema"])
    assert set(list_checkpoint(prefix)) == {"conv1/weights", "conv1/biases", "fc/weights", "fc/biases",
                                            "conv1/weights/ExponentialMovingAverage", "global_step"}
    loaded = load(tmp_path, spec_text(SLIM_MAP.replace("EMA", str(ema).lower())))
    model = model_class(tmp_path, loaded)(seed=0)
    plan = plan_restore(loaded, targets_of(loaded))
    conv_key = "conv1/weights/ExponentialMovingAverage" if ema else "conv1/weights"
    assert [(r.path, r.status, r.key) for r in plan.rows] == [
        ("conv1/kernel", "restored", conv_key), ("conv1/bias", "restored", "conv1/biases"),
        ("fc/kernel", "restored", "fc/weights"), ("fc/bias", "restored", "fc/biases")]
    unused = {u.key: u.reason for u in plan.unused}
    assert set(unused) == {"global_step", "conv1/weights" if ema else "conv1/weights/ExponentialMovingAverage"}
    assert ("superseded by the EMA shadow" in unused["conv1/weights"]) if ema else True
    # The spec has a global_step too: what keeps it out is that a restore sets model variables only.
    assert unused["global_step"] == ("training state (the step, an optimizer's slots and counters, accumulators): a "
                                     "fine-tuning restore sets model variables (and a pruning spec's masks) only; "
                                     "--resume continues a run with all of it")
    assert f"model.ckpt:{conv_key} " in format_plan(plan)
    assert summary_line(plan) == "restored 4, initialized 0, unused 2, mismatched 0"

    apply_plan(plan, model.variables_by_path())
    for row in plan.rows:
        assert same_bits(model.variables_by_path()[row.path].numpy(), checkpoint_tensor(prefix, row.key)), row.path
    np.testing.assert_allclose(model({"image": image})["logits"].numpy(), expected["ema" if ema else "raw"],
                               rtol=0, atol=1e-6)


def test_tf2_object_checkpoint_restores_with_a_pattern(tmp_path: Path) -> None:
    values = random_values(3, SHAPES)
    variables = {path.replace("/", "_"): tf.Variable(value) for path, value in values.items()}
    saved = tf.train.Checkpoint(model=variables).save(str(tmp_path / "tf2" / "ckpt"))
    folder = tmp_path / "tf2"
    listed = list_checkpoint(folder)  # a folder with TensorFlow's `checkpoint` state file
    assert listed == {f"model/{k.replace('/', '_')}": (s, "float32") for k, s in SHAPES.items()}
    loaded = load(tmp_path, spec_text())
    source = RestoreSource.model_validate({"from": "tf2", "map": [
        {"pattern": r"^model/(\w+?)_(kernel|bias)$", "to": r"\1/\2"}]})
    plan = plan_restore(loaded, targets_of(loaded), [(folder, source)])
    assert plan.ok and [r.status for r in plan.rows] == ["restored"] * 4 and plan.unused == []
    model = model_class(tmp_path, loaded)(seed=0)
    apply_plan(plan, model.variables_by_path())
    for path, value in values.items():
        assert same_bits(model.variables_by_path()[path].numpy(), value), path
        raw_key = f"model/{path.replace('/', '_')}/.ATTRIBUTES/VARIABLE_VALUE"
        assert same_bits(value, checkpoint_tensor(Path(saved), raw_key))


def test_map_entries_first_match_fullmatch_and_prefixes(tmp_path: Path) -> None:
    values = random_values(11, {"backbone/conv1/kernel": SHAPES["conv1/kernel"], "net/conv1_bias": (4,),
                                "net/conv1_bias_ema": (4,), "fc/kernel": SHAPES["fc/kernel"], "dense/bias": (3,)})
    prefix = save_tf1(tmp_path / "model.ckpt", values)
    source = RestoreSource.model_validate({"from": "model.ckpt", "map": [
        {"strip_prefix": "backbone/"},
        {"pattern": r"net/(\w+?)_bias", "to": r"\1/bias"},  # whole keys only: not net/conv1_bias_ema
        {"strip_prefix": "dense/", "add_prefix": "fc/"},  # only keys that start with dense/
        {"pattern": "dense/(.*)", "to": r"conv1/\1"},  # never reached: the entry above matched first
    ]})
    loaded = load(tmp_path, spec_text())
    plan = plan_restore(loaded, targets_of(loaded), [(prefix, source)])
    assert [(r.path, r.status, r.key) for r in plan.rows] == [
        ("conv1/kernel", "restored", "backbone/conv1/kernel"), ("conv1/bias", "restored", "net/conv1_bias"),
        ("fc/kernel", "restored", "fc/kernel"), ("fc/bias", "restored", "dense/bias")]
    assert [u.key for u in plan.unused] == ["net/conv1_bias_ema"]
    model = model_class(tmp_path, loaded)(seed=0)
    apply_plan(plan, model.variables_by_path())
    for row in plan.rows:
        assert same_bits(model.variables_by_path()[row.path].numpy(), values[row.key])


PROBLEMS = {
    "missing": ({"conv1/weightz": SHAPES["conv1/kernel"]}, {}, "conv1/kernel"),
    "shape": ({"conv1/kernel": (5, 5, 2, 4)}, {}, "conv1/kernel"),
    "dtype": ({}, {"conv1/bias": np.float64}, "conv1/bias"),
}


@pytest.mark.parametrize("problem", list(PROBLEMS))
def test_problems_print_the_table_and_change_nothing(tmp_path: Path, problem: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    shapes, dtypes, bad = PROBLEMS[problem]
    layout = {k: s for k, s in SHAPES.items() if not (problem == "missing" and k == bad)} | shapes
    prefix = save_tf1(tmp_path / "ckpt" / "model.ckpt", random_values(4, layout | {"extra/step": ()}, dtypes))
    loaded = load(tmp_path, spec_text())
    rename = [{"from": "conv1/weights", "to": "conv1/kernel"}] if problem == "missing" else []
    plan = plan_restore(loaded, targets_of(loaded), [(prefix, RestoreSource.model_validate(
        {"from": "ckpt/model.ckpt", "map": rename}))])
    table = format_plan(plan)
    status = {r.path: r.status for r in plan.rows}
    assert not plan.ok
    assert status == {p: ("mismatched" if problem != "missing" else "missing") if p == bad else "restored"
                      for p in SHAPES}
    assert "ckpt/model.ckpt:extra/step  float32[]  no variable with this name here" in table
    expected_text = {"missing": ["missing", "no key 'conv1/weights' in the checkpoint; did you mean 'conv1/weightz'?"],
                     "shape": ["float32[3, 3, 2, 4] here, float32[5, 5, 2, 4] in the checkpoint", "shape differs"],
                     "dtype": ["float32[4] here, float64[4] in the checkpoint", "dtype differs"]}[problem]
    for text in expected_text:
        assert text in table, table
    model = model_class(tmp_path, loaded)(seed=0)
    before = values_of(model)
    with pytest.raises(SpecError) as raised:
        apply_plan(plan, model.variables_by_path())
    [diagnostic] = raised.value.diagnostics
    assert diagnostic.message == (f"the restore plan above has problems ({summary_line(plan)}); nothing was restored")
    assert diagnostic.path == loaded.display
    assert capsys.readouterr().err.strip() == table.strip()  # the table itself, as printed lines
    assert all(same_bits(before[p], v) for p, v in values_of(model).items())


def test_unused_keys_alone_do_not_stop_a_restore(tmp_path: Path) -> None:
    prefix = save_tf1(tmp_path / "model.ckpt", random_values(5, SHAPES | {"old/head": (7,)}))
    loaded = load(tmp_path, spec_text())
    plan = plan_restore(loaded, targets_of(loaded), [(prefix, RestoreSource.model_validate({"from": "model.ckpt"}))])
    assert plan.ok and [(u.key, u.reason) for u in plan.unused] == [("old/head", "no variable with this name here")]
    assert summary_line(plan) == "restored 4, initialized 0, unused 1, mismatched 0"


def test_conflicts_and_missing_renames_stay_errors_whatever_later_sources_hold(tmp_path: Path) -> None:
    first = save_tf1(tmp_path / "a.ckpt", random_values(12, {"old/fc/bias": (3,), "new/fc/bias": (3,)}))
    second = save_tf1(tmp_path / "b.ckpt", random_values(13, SHAPES))
    loaded = load(tmp_path, spec_text())
    plan = plan_restore(loaded, targets_of(loaded), [
        (first, RestoreSource.model_validate({"from": "a.ckpt", "map": [
            {"pattern": "^(?:old|new)/(.*)$", "to": r"\1"}, {"from": "conv1/weights", "to": "conv1/kernel"}]})),
        (second, RestoreSource.model_validate({"from": "b.ckpt"}))])
    assert not plan.ok
    assert [(r.path, r.status, r.source) for r in plan.rows] == [
        ("conv1/kernel", "missing", "a.ckpt"), ("conv1/bias", "restored", "b.ckpt"),
        ("fc/kernel", "restored", "b.ckpt"), ("fc/bias", "conflict", "a.ckpt")]
    assert "keys 'new/fc/bias', 'old/fc/bias' all map here" in format_plan(plan)
    assert {(u.source, u.key, u.reason) for u in plan.unused} == {
        ("b.ckpt", "conv1/kernel", "not restored: the row of 'conv1/kernel' is 'missing'"),
        ("b.ckpt", "fc/bias", "not restored: the row of 'fc/bias' is 'conflict'")}
    assert summary_line(plan) == "restored 2, initialized 0, unused 2, mismatched 0, missing 1, conflicts 1"


def test_map_mistakes_are_errors(tmp_path: Path) -> None:
    prefix = save_tf1(tmp_path / "model.ckpt", random_values(14, SHAPES))
    loaded = load(tmp_path, spec_text())
    shadowed = RestoreSource.model_validate({"from": "model.ckpt", "map": [
        {"pattern": "^fc/(.*)$", "to": r"fc/\1"}, {"from": "fc/bias", "to": "conv1/bias"},
        {"from": "conv1/kernel", "to": "conv1/kernal"}]})
    plan = plan_restore(loaded, targets_of(loaded), [(prefix, shadowed)])
    assert not plan.ok and [r.status for r in plan.rows] == ["initialized", "restored", "restored", "restored"]
    assert plan.errors == [
        "model.ckpt: map entry {from: fc/bias, to: conv1/bias} never applies: an earlier map entry matches "
        "'fc/bias' first",
        "model.ckpt: map entry {from: conv1/kernel, to: conv1/kernal}: 'conv1/kernal' is not a variable here; "
        "did you mean 'conv1/kernel'?"]
    bad_escape = RestoreSource.model_construct(from_="model.ckpt", map=[  # validation refuses it (spec/regex.py)
        RenamePattern.model_construct(pattern="^fc/(.*)$", to=r"\d\1")], exclude=[], ema_to_model=False)
    with pytest.raises(SpecError, match=r"model.ckpt: error: map entry \{pattern: \^fc/\(\.\*\)\$, to: .*backslash"):
        plan_restore(loaded, targets_of(loaded), [(prefix, bad_escape)])


def test_apply_checks_every_value_before_assigning_any(tmp_path: Path) -> None:
    prefix = save_tf1(tmp_path / "model.ckpt", random_values(6, SHAPES))
    loaded = load(tmp_path, spec_text())
    plan = plan_restore(loaded, targets_of(loaded), [(prefix, RestoreSource.model_validate({"from": "model.ckpt"}))])
    model = model_class(tmp_path, loaded)(seed=0)
    variables = model.variables_by_path() | {"fc/bias": tf.Variable(np.zeros(5, np.float32))}  # the last one
    before = values_of(model)
    with pytest.raises(SpecError, match=r"'fc/bias' is float32\[3\] in model.ckpt but float32\[5\] here"):
        apply_plan(plan, variables)
    assert all(same_bits(before[p], v) for p, v in values_of(model).items())


def pretrained_run(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """A specgen run folder from a 10-class model with its EMA shadow and global step."""
    loaded = load(tmp_path / "pre", spec_text(head="head/out", units=10))
    model = model_class(tmp_path / "pre", loaded)(seed=1)
    saved = model.variables_by_path() | {
        "ema/conv1/kernel": tf.Variable(model.conv1_kernel * 0.5),
        "global_step": tf.Variable(np.int64(40)),
    }
    CheckpointFolder(tmp_path / "pre" / "run", keep=1).save(40, saved, None, {"spec": "tiny"})
    return tmp_path / "pre" / "run", {p: v.numpy() for p, v in saved.items()}


def test_fine_tuning_restores_the_backbone_and_initializes_the_head(tmp_path: Path) -> None:
    run, pretrained = pretrained_run(tmp_path)
    restore = "  restore:\n    - {from: ../pre/run, exclude: ['head/*']}\n"
    loaded = load(tmp_path / "fine", spec_text(restore, head="head/out", units=3))
    cls = model_class(tmp_path / "fine", loaded)
    model, fresh = cls(seed=7), cls(seed=7)
    plan = plan_restore(loaded, targets_of(loaded))
    assert [(r.path, r.status, r.note) for r in plan.rows] == [
        ("conv1/kernel", "restored", ""), ("conv1/bias", "restored", ""),
        ("head/out/kernel", "initialized", "excluded by 'head/*' in ../pre/run"),
        ("head/out/bias", "initialized", "excluded by 'head/*' in ../pre/run")]
    assert summary_line(plan) == "restored 2, initialized 2, unused 4, mismatched 0"
    apply_plan(plan, model.variables_by_path())
    now = values_of(model)
    for path in ("conv1/kernel", "conv1/bias"):
        assert same_bits(now[path], pretrained[path])
    assert not np.array_equal(now["conv1/kernel"], fresh.conv1_kernel.numpy())
    for path, value in values_of(fresh).items():
        if path.startswith("head/"):
            assert same_bits(now[path], value)
    assert np.count_nonzero(now["head/out/kernel"]) == now["head/out/kernel"].size

    ema = RestoreSource.model_validate({"from": "../pre/run", "exclude": ["head/*"], "ema_to_model": True})
    plan = plan_restore(loaded, targets_of(loaded), [(run, ema)])
    assert [(r.path, r.key) for r in plan.rows if r.status == "restored"] == [
        ("conv1/kernel", "ema/conv1/kernel"), ("conv1/bias", "conv1/bias")]
    apply_plan(plan, model.variables_by_path())
    assert same_bits(model.conv1_kernel.numpy(), pretrained["ema/conv1/kernel"])


@pytest.mark.parametrize("order", [("slim", "ours"), ("ours", "slim")])
def test_later_sources_override_earlier_ones(tmp_path: Path, order: tuple[str, str]) -> None:
    slim_values = random_values(8, {"conv1/weights": SHAPES["conv1/kernel"], "conv1/biases": (4,),
                                    "fc/weights": SHAPES["fc/kernel"], "fc/biases": (3,)})
    ours_values = random_values(9, {"conv1/kernel": SHAPES["conv1/kernel"]})
    paths = {"slim": save_tf1(tmp_path / "slim.ckpt", slim_values), "ours": save_tf1(tmp_path / "ours.ckpt", ours_values)}
    sources = {"slim": RestoreSource.model_validate({"from": "slim.ckpt", "map": [
        {"pattern": "^(.*)/weights$", "to": r"\1/kernel"}, {"pattern": "^(.*)/biases$", "to": r"\1/bias"}]}),
               "ours": RestoreSource.model_validate({"from": "ours.ckpt"})}
    loaded = load(tmp_path, spec_text())
    plan = plan_restore(loaded, targets_of(loaded), [(paths[name], sources[name]) for name in order])
    assert plan.ok
    model = model_class(tmp_path, loaded)(seed=0)
    apply_plan(plan, model.variables_by_path())
    winner = ours_values["conv1/kernel"] if order[1] == "ours" else slim_values["conv1/weights"]
    assert same_bits(model.conv1_kernel.numpy(), winner)
    assert same_bits(model.fc_kernel.numpy(), slim_values["fc/weights"])
    loser = "slim.ckpt:conv1/weights" if order[1] == "ours" else "ours.ckpt:conv1/kernel"
    assert f"{loser}  float32[3, 3, 2, 4]  superseded by {order[1]}.ckpt:" in format_plan(plan)


def test_ema_to_model_on_a_checkpoint_without_shadows_says_raw_weights_on_each_row(tmp_path: Path) -> None:
    """A run without train.ema has no shadow to take: every row falls back to the raw weights, and says so (a
    checkpoint with shadows says "EMA shadow" on the rows that have one, above)."""
    values = random_values(8, {"conv1/kernel": SHAPES["conv1/kernel"], "conv1/bias": (4,)})
    checkpoint = save_tf1(tmp_path / "plain.ckpt", values)
    loaded = load(tmp_path, spec_text())
    for ema, note in ((True, "raw weights: the checkpoint holds no EMA shadows (ema_to_model)"), (False, "")):
        source = RestoreSource.model_validate({"from": "plain.ckpt", "ema_to_model": ema})
        plan = plan_restore(loaded, targets_of(loaded), [(checkpoint, source)])
        assert [(r.path, r.note) for r in plan.rows if r.status == "restored"] == [
            ("conv1/kernel", note), ("conv1/bias", note)]


def test_restore_plan_command(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
                              ) -> None:
    slim_checkpoint(tmp_path / "spec" / "tf1" / "model.ckpt", np.zeros((1, 6, 6, 2), np.float32))
    spec = tmp_path / "spec" / "spec.yaml"
    spec.write_text(spec_text(SLIM_MAP.replace("EMA", "false")))
    monkeypatch.chdir(tmp_path)  # relative paths resolve against the spec's folder, not here
    assert run_restore_plan(spec, None) == 0
    out = capsys.readouterr().out
    assert out.startswith("variable      status    source (checkpoint:key)")
    assert "conv1/kernel  restored  tf1/model.ckpt:conv1/weights" in out
    assert out.rstrip().endswith("restored 4, initialized 0, unused 2, mismatched 0")

    bad = save_tf1(tmp_path / "bad.ckpt", random_values(10, SHAPES | {"fc/kernel": (100, 3)}))
    assert run_restore_plan(spec, bad) == 1
    out = capsys.readouterr().out
    assert "fc/kernel     mismatched" in out and "float32[144, 3] here, float32[100, 3] in the checkpoint" in out
    assert out.rstrip().endswith("restored 3, initialized 0, unused 0, mismatched 1")

    with pytest.raises(SpecError, match=r"nope.ckpt: error: checkpoint .*nope.ckpt not found"):
        run_restore_plan(spec, tmp_path / "nope.ckpt")
    spec.write_text(spec.read_text().replace("tf1/model.ckpt", "tf1/nothing.ckpt"))
    with pytest.raises(SpecError, match=r"spec.yaml:12:13: error: checkpoint.restore\[0\]: checkpoint .*nothing.ckpt "
                                        r"not found: expected a checkpoint prefix"):
        run_restore_plan(spec, None)
    spec.write_text(spec_text())
    with pytest.raises(SpecError, match=r"nothing to restore from: the spec has no 'checkpoint\.restore' section"):
        run_restore_plan(spec, None)


def test_plan_without_sources_initializes_everything(tmp_path: Path) -> None:
    loaded = load(tmp_path, spec_text())
    plan = plan_restore(loaded, targets_of(loaded))
    assert isinstance(plan, RestorePlan) and plan.ok
    assert {r.status for r in plan.rows} == {"initialized"}


def test_a_strict_source_stops_on_a_variable_it_has_no_key_for(tmp_path: Path) -> None:
    """`strict: true` (what `specgen import keras` writes): a variable the source has no key for is an error of the
    plan, so train and export assign nothing (issue 28: an imported model lacking a weight exported a random one);
    naming it in `exclude` is the opt-out, and any other gap still stops; without strict it is `initialized`."""
    pretrained_run(tmp_path)
    loose = load(tmp_path / "fine", spec_text("  restore:\n    - {from: ../pre/run}\n", head="head/new", units=3))
    assert summary_line(plan_restore(loose, targets_of(loose))) == "restored 2, initialized 2, unused 4, mismatched 0"

    strict = load(tmp_path / "fine", spec_text("  restore:\n    - {from: ../pre/run, strict: true}\n", head="head/new",
                                               units=3))
    plan = plan_restore(strict, targets_of(strict))
    assert not plan.ok and plan.errors == [
        "../pre/run (strict): no key for 2 of the model's variables ('head/new/kernel', 'head/new/bias'); restore "
        "them from it, or name them in this entry's exclude to keep their initializers"]
    assert [(r.status, r.note) for r in plan.rows if r.path.startswith("head/")] == [
        ("initialized", "strict: ../pre/run has no key for it")] * 2
    model = model_class(tmp_path / "fine", strict)(seed=3)
    before = values_of(model)
    with pytest.raises(SpecError, match=r"the restore plan above has problems \(restored 2, initialized 2, unused 4, "
                                        r"mismatched 0, errors 1\); nothing was restored"):
        apply_plan(plan, model.variables_by_path())
    assert all(same_bits(values_of(model)[p], v) for p, v in before.items())  # nothing assigned

    excluded = load(tmp_path / "fine", spec_text(
        "  restore:\n    - {from: ../pre/run, strict: true, exclude: ['head/*']}\n", head="head/new", units=3))
    plan = plan_restore(excluded, targets_of(excluded))
    assert plan.ok and summary_line(plan) == "restored 2, initialized 2, unused 4, mismatched 0"
    only_kernel = load(tmp_path / "fine", spec_text(
        "  restore:\n    - {from: ../pre/run, strict: true, exclude: ['head/*/kernel']}\n", head="head/new", units=3))
    assert plan_restore(only_kernel, targets_of(only_kernel)).errors == [
        "../pre/run (strict): no key for 1 of the model's variables ('head/new/bias'); restore them from it, or name "
        "them in this entry's exclude to keep their initializers"]
