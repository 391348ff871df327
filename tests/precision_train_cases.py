"""Shared pieces of the train.precision tests (tests/test_precision_train*.py): the digits CNN spec at a chosen
precision, its generated model and trainer loaded from files, and the first digits batches in a fixed order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.spec.load import load_spec_text

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "specs" / "digits_cnn.yaml"
DIGITS = ROOT / "examples" / "data" / "digits.npz"
BATCH = 32


def spec_text(precision: str = "float32", *, jit: bool = False, accumulate: int = 1, loss_weight: float = 1.0,
              dropout: float = 0.2, pool: str = "max_pool", run: Path | None = None, evaluate: bool = True) -> str:
    """digits_cnn.yaml (two optimizers, clip, EMA, dropout, batch norm) with the train keys under test."""
    text = EXAMPLE.read_text().replace("../data/digits.npz", str(DIGITS))
    text = text.replace("  batch_size: 64\n", f"  batch_size: {BATCH}\n")
    text = text.replace("  accumulate: 1\n", f"  accumulate: {accumulate}\n  precision: {precision}\n"
                        f"  jit_compile: {str(jit).lower()}\n")
    text = text.replace("op: dropout, rate: 0.2}", f"op: dropout, rate: {dropout}}}")
    text = text.replace("op: max_pool, size: 2}", f"op: {pool}, size: 2}}")
    if loss_weight != 1.0:
        text = text.replace("  labels: label\n", f"  labels: label\n  weight: {loss_weight}\n")
    if not evaluate:  # no eval stage: a run ends without tracing and running evaluation
        text = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("  eval: {npz:"))
    if run is not None:
        text = text.replace("dir: ../../runs/digits_cnn", f"dir: {run}").replace("  keep: 3\n", "  keep: 10\n")
    return text


def build(folder: Path, text: str) -> tuple[Any, Any]:
    """The spec's generated model and trainer, written to `folder` and imported from there."""
    from specgen.runtime.lib.generated import load_generated

    folder.mkdir(parents=True, exist_ok=True)
    ir = build_ir(load_spec_text(text, "spec.yaml", folder / "spec.yaml"))
    for name, content in render_files(ir).items():
        (folder / name).write_bytes(content)
    model = getattr(load_generated(folder / "model.py"), ir.class_name)(seed=0)
    trainer = getattr(load_generated(folder / "train.py"), f"{ir.class_name}Training")(model)
    return model, trainer


def batches(count: int) -> list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]:
    """The first `count` training batches of BATCH examples, unshuffled."""
    with np.load(DIGITS) as data:
        x, y = data["x_train"], data["y_train"]
    return [({"image": x[i * BATCH:(i + 1) * BATCH]}, {"label": y[i * BATCH:(i + 1) * BATCH]}) for i in range(count)]


def snapshot(model: Any, trainer: Any) -> dict[str, np.ndarray]:
    """Every checkpointed value by key (model variables and training state)."""
    return {k: v.numpy().copy() for k, v in (model.variables_by_path() | trainer.state_by_path()).items()}


def train(trainer: Any, steps: int, accumulate: int = 1) -> list[float]:
    """`steps` micro-batches through the trainer's own step functions; each micro-batch's loss."""
    import tensorflow as tf

    losses = []
    for i, (features, labels) in enumerate(batches(steps)):
        seed = tf.constant([i, 0], tf.int64)
        if accumulate == 1:
            losses.append(float(trainer.train_step(features, labels, seed)))
            continue
        losses.append(float(trainer.accumulate_step(features, labels, seed)))
        if (i + 1) % accumulate == 0:
            trainer.apply_accumulated()
    return losses
