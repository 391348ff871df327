"""The training side of the IR (specgen/ir/training/): resolved once, one key scheme, defaults in one place."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from specgen.diagnostics import SpecError
from specgen.ir.resolve import build_ir
from specgen.ir.training import keys
from specgen.ir.training.build import run_folder
from specgen.kinds.features import accumulate, ema
from specgen.spec.load import load_spec, load_spec_text

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "specgen"
CNN = ROOT / "examples" / "specs" / "digits_cnn.yaml"

BASE = """\
specgen: 1
name: net
inputs: {x: {shape: [4]}}
outputs: {y: out}
layers:
  - {name: hidden, op: dense, input: x, units: 3}
  - {name: out, op: dense, units: 2}
loss: {kind: sparse_softmax_cross_entropy, logits: y, labels: label}
"""


def resolve(extra: str = "", folder: Path = Path("/specs")):
    return build_ir(load_spec_text(BASE + textwrap.dedent(extra), "net.yaml", folder / "net.yaml"))


def test_the_example_resolves_loss_optimizers_schedule_ema_and_data() -> None:
    ir = build_ir(load_spec(CNN))
    training = ir.training
    assert training is not None and training.can_train
    assert training.loss is not None
    assert (training.loss.output, training.loss.field, training.loss.labels) == ("logits", "logits", "label")
    assert training.loss.target == "sparse" and training.loss.logits == "logits"
    body, head = training.optimizers
    assert body.kind == "sgd" and body.paths == ir.optimizers["body"] and body.param("momentum") == 0.9
    assert body.schedule is not None and body.schedule.kind == "cosine_decay" and body.learning_rate == 0.05
    assert [s.key for s in body.slots] == ["optimizers/body/momentum"]
    assert head.kind == "adam" and head.schedule is None and head.weight_decay == 0.0001
    assert [s.name for s in head.slots] == ["m", "v"]
    assert training.train is not None and training.train.ema is not None and training.train.ema.eval
    assert [m.name for m in training.train.metrics] == ["accuracy", "mean_loss"]
    assert training.train.clip is not None and (training.train.clip.kind, training.train.clip.value) == ("global_norm", 5.0)
    assert training.data["train"].path == CNN.parent / "../data/digits.npz"
    assert training.data["eval"].features == {"image": "x_test"}
    assert training.checkpoint.dir == (CNN.parent / "../../runs/digits_cnn").resolve()
    assert (training.checkpoint.every_steps, training.checkpoint.keep) == (100, 3)
    assert (training.export.opset, training.export.ir_version) == (ir.opset, ir.ir_version)


def test_regression_loss_reads_predictions_and_has_no_logits() -> None:
    text = BASE.replace("kind: sparse_softmax_cross_entropy, logits: y", "kind: mean_squared_error, predictions: y")
    training = build_ir(load_spec_text(text, "net.yaml")).training
    assert training is not None and training.loss is not None
    assert (training.loss.output, training.loss.field, training.loss.logits) == ("y", "predictions", None)


def test_checkpoint_defaults_come_from_the_spec_model() -> None:
    ir = resolve()
    assert ir.training is not None
    checkpoint = ir.training.checkpoint
    assert checkpoint.dir == Path("/specs/runs/net").resolve()
    assert (checkpoint.every_steps, checkpoint.keep, checkpoint.restore) == (1000, 3, ())
    assert run_folder(load_spec_text(BASE, "net.yaml", Path("/specs/net.yaml"))) == checkpoint.dir


def test_checkpoint_defaults_are_written_once_in_the_package() -> None:
    """`every_steps` and `keep` get their defaults in spec/io.py only (no `else 1000` fallbacks elsewhere)."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        for line in path.read_text().splitlines():
            if re.search(r"\b(every_steps|keep)\b.*\b(1000|3)\b", line) or re.search(r"\belse (1000|3)\b", line):
                found.append(f"{path.relative_to(ROOT)}: {line.strip()}")
    assert len(found) == 2 and all(f.startswith("specgen/spec/io.py") for f in found), found


def test_training_state_paths_follow_the_one_key_scheme() -> None:
    ir = resolve("""\
        optimizers: {all: {kind: adam, learning_rate: 0.1}}
        train: {batch_size: 2, accumulate: 2, ema: {decay: 0.9}, metrics: [accuracy]}
        """)
    trainable = ir.collections["trainable"]
    state = [v.path for v in ir.variables if "model" not in v.collections]
    expected = [keys.STEP, keys.learning_rate("all"), keys.iterations("all")]
    expected += [f"{keys.slot_prefix('all', s)}/{p}" for s in ("m", "v") for p in trainable]
    expected += [accumulate.accumulator(p) for p in trainable] + [accumulate.MICRO_BATCHES]
    expected += [ema.shadow(p) for p in trainable]
    expected += [keys.metric("accuracy", a) for a in ("total", "count")]
    assert state == expected


def test_key_prefixes_are_spelled_only_in_keys_py() -> None:
    """Outside ir/training/keys.py (and a feature's own module, by its ROOT) no module builds a training-state
    path from a literal prefix."""
    pattern = re.compile(r"""f?["']((optimizers|accumulators|ema|pruning)/|global_step["'])""")
    found = [f"{p.relative_to(ROOT)}" for p in PACKAGE.rglob("*.py")
             if p.name != "keys.py" and any(pattern.search(line) and not line.lstrip().startswith("#")
                                            for line in p.read_text().splitlines())]
    assert found == []


def test_schedules_resolve_their_first_rate_and_warmup() -> None:
    ir = resolve("""\
        optimizers:
          a: {kind: sgd, learning_rate: {schedule: piecewise_constant, boundaries: [10], values: [0.5, 0.1], warmup_steps: 3}}
        train: {batch_size: 2}
        """)
    assert ir.training is not None
    opt = ir.training.optimizer("a")
    assert opt.learning_rate == 0.5 and opt.schedule is not None
    assert (opt.schedule.kind, opt.schedule.warmup_steps) == ("piecewise_constant", 3)
    assert dict(opt.schedule.args) == {"boundaries": [10], "values": [0.5, 0.1]}
    assert opt.slots == ()  # sgd without momentum keeps none


def test_errors_across_sections_keep_their_positions() -> None:
    text = BASE.replace("logits: y", "logits: z")
    with pytest.raises(SpecError) as caught:
        build_ir(load_spec_text(text, "net.yaml"))
    message = str(caught.value)
    assert "net.yaml:8:" in message and "loss logits 'z' is not an output" in message


def test_render_imports_nothing_from_the_spec() -> None:
    offenders = [str(p.relative_to(ROOT)) for p in (PACKAGE / "render").rglob("*.py")
                 if re.search(r"^\s*(from|import) specgen\.spec\b", p.read_text(), re.M)]
    assert offenders == []


def test_runtime_uses_no_private_generated_attribute_names() -> None:
    """The runtime reaches generated classes through specgen/runtime/lib/interface.py only."""
    private = re.compile(r"getattr\([^)]*opt_|\.opt_\w+|ema_shadows|EMA_EVAL")
    offenders = [f"{p.relative_to(ROOT)}: {line.strip()}" for p in (PACKAGE / "runtime").rglob("*.py")
                 if p.name != "interface.py" for line in p.read_text().splitlines() if private.search(line)]
    assert offenders == []


@pytest.mark.parametrize("name", ["digits_cnn", "digits_mlp"])
def test_generated_classes_satisfy_the_declared_interface(name: str) -> None:
    pytest.importorskip("tensorflow")
    from specgen.runtime.lib.generated import load_generated
    from specgen.runtime.lib.interface import AccumulatingTrainer, GeneratedModel, GeneratedTrainer, SteppingTrainer

    folder = ROOT / "generated" / name
    ir = build_ir(load_spec(ROOT / "examples" / "specs" / f"{name}.yaml"))
    model = getattr(load_generated(folder / "model.py"), ir.class_name)(seed=0)
    trainer = getattr(load_generated(folder / "train.py"), f"{ir.class_name}Training")(model)
    assert isinstance(model, GeneratedModel) and isinstance(trainer, GeneratedTrainer)
    assert ir.training is not None and ir.training.train is not None
    accumulating = ir.training.train.accumulate > 1
    assert isinstance(trainer, AccumulatingTrainer) == accumulating
    assert isinstance(trainer, SteppingTrainer) != accumulating
    for opt in ir.training.optimizers:
        assert trainer.learning_rate(opt.name) is trainer.state_by_path()[opt.learning_rate_key]
    assert len(trainer.ema_variables()) == (len(trainer.trainable) if ir.training.train.ema else 0)
