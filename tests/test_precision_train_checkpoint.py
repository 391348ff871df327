"""Checkpoints are interchangeable between train.precision values: `specgen train` runs of the digits CNN that
resume each other float32 -> mixed_float16 -> mixed_float16 -> float32, one update each; the loss scale state is
saved, resumed exactly, and started fresh when the checkpoint came from a float32 run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from precision_train_cases import spec_text

from specgen.cli import main

tf = pytest.importorskip("tensorflow")

PRECISIONS = ("float32", "mixed_float16", "mixed_float16", "float32")


def _read(run: Path, step: int) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(str(run / f"ckpt-{step:08d}" / "variables"))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("precision_checkpoint")
    run, spec, printed = folder / "run", folder / "spec.yaml", {}
    for step, precision in enumerate(PRECISIONS, start=1):
        spec.write_text(spec_text(precision, run=run, evaluate=False))
        capture = folder / f"out{step}.txt"
        with capture.open("w") as out:
            import contextlib

            with contextlib.redirect_stdout(out):
                assert main(["train", str(spec), "--steps", "1", *(["--resume"] if step > 1 else [])]) == 0
        printed[step] = capture.read_text()
    return {"run": run, "printed": printed, "ckpt": {s: _read(run, s) for s in range(1, 5)}}


def test_each_run_resumed_the_previous_one(runs: dict[str, Any]) -> None:
    for step in (2, 3, 4):
        assert f"resumed from {runs['run']}/ckpt-{step - 1:08d} at step {step - 1}\n" in runs["printed"][step]
    assert [int(runs["ckpt"][s]["global_step"]) for s in range(1, 5)] == [1, 2, 3, 4]
    for step in (2, 3, 4):  # every run trained on from the weights the previous one saved
        assert not np.array_equal(runs["ckpt"][step]["head/out/kernel"], runs["ckpt"][step - 1]["head/out/kernel"])


def test_the_loss_scale_is_saved_resumed_exactly_and_absent_from_float32_runs(runs: dict[str, Any]) -> None:
    ckpt = runs["ckpt"]
    keys = ("loss_scale/scale", "loss_scale/good_steps", "loss_scale/skipped_updates")
    assert not set(keys) & set(ckpt[1]) and not set(keys) & set(ckpt[4])
    # From a float32 checkpoint the scale starts at 2**15 and counts one good update; the next run resumes
    # that count (2), not a fresh one (1).
    assert [(float(ckpt[s][keys[0]]), int(ckpt[s][keys[1]]), int(ckpt[s][keys[2]])) for s in (2, 3)] == [
        (32768.0, 1, 0), (32768.0, 2, 0)]
    assert {v.dtype.name for k, v in ckpt[3].items() if k not in keys and v.dtype.kind == "f"} == {"float32"}


def test_the_progress_line_and_tensorboard_show_the_scale(runs: dict[str, Any]) -> None:
    assert "loss_scale 32768.0000  skipped_updates 0.0000" in runs["printed"][3]
    assert "loss_scale" not in runs["printed"][4]
    tags = {value.tag for path in (runs["run"] / "tensorboard" / "train").iterdir()
            for event in tf.compat.v1.train.summary_iterator(str(path)) for value in event.summary.value}
    assert {"loss_scale", "skipped_updates"} <= tags
