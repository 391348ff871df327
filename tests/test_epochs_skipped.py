"""An epoch is one pass also when mixed_float16 skips updates (docs/training.md, "A skipped update").

A skipped update reads its micro-batches but does not advance the global step: the loop counts attempts (made and
skipped updates) for epochs, so each eval comes at a pass's end and `--epochs E` reads E passes; `--steps N` still
makes N updates; a resume continues from step + skipped (both checkpointed), bitwise as the uninterrupted run.

The spec: 203 rows, batch 8, accumulate 4 (6 whole updates a pass, micro-batch 24 and rows 200-202 left out), a
loss weight of 32 that overflows float16's gradients at the first loss scales (2**15 by 8-fold or more): the
first updates are skipped until the scale is low enough, the next ones are made (measured: 4 skipped, at 2**15
to 2**12, the 4th after one made update). Dropout, so that a resume that drew other masks would show.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_epochs_replicas import scalars, train, variables, write_data

tf = pytest.importorskip("tensorflow")

ROWS, BATCH, K, PER_PASS = 203, 8, 4, 6  # 25 full batches a pass, 6 whole updates of 4, 1 micro-batch left out
SPEC = """\
specgen: 1
name: skipping
inputs: {x: {shape: [4]}}
outputs: {logits: out}
layers:
  - {name: h, op: dense, units: 8, activation: relu}
  - {name: drop, op: dropout, rate: 0.25}
  - {name: out, op: dense, units: 3}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label, weight: 32}
optimizers: {all: {kind: sgd, learning_rate: 0.005, momentum: 0.9}}
train:
  batch_size: 8
  epochs: 2
  accumulate: 4
  precision: mixed_float16
  shuffle_buffer: 1
  seed: 3
  metrics: [accuracy, mean_loss]
data:
  train: {npz: train.npz, features: {x: x}, labels: {label: y}}
  eval: {npz: eval.npz, features: {x: x}, labels: {label: y}}
checkpoint: {dir: run, every_steps: 3, keep: 10}
"""


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What a run reads and does, in order: the rows of each micro-batch, ("apply", global step after it) at each
    update attempt (the step stays where it was on a skipped one), and "eval" once per eval stage."""
    from specgen.runtime.placement.default import Distribution

    log: list[Any] = []
    run, updates = Distribution.run, Distribution.updates
    trainers: list[Any] = []

    def noting(self: Distribution, trainer: Any, *args: Any) -> Any:
        trainers[:] = [trainer]
        return updates(self, trainer, *args)

    def recording(self: Distribution, name: str, step: Any, *args: Any) -> Any:
        result = run(self, name, step, *args)
        if name == "accumulate":
            log.append(tuple(int(r) for r in np.rint(args[0]["x"].numpy()[:, 0] * 256)))
        elif name == "apply":
            log.append(("apply", int(trainers[0].global_step.numpy())))
        elif name == "eval" and (not log or log[-1] != "eval"):
            log.append("eval")
        return result

    monkeypatch.setattr(Distribution, "updates", noting)
    monkeypatch.setattr(Distribution, "run", recording)
    return log


def cut(attempts: range) -> list[tuple[int, ...]]:
    """The micro-batches of update attempts `attempts` by the documented cut, unshuffled: attempt a reads
    micro-batches (a % 6) * 4 .. + 3 of the rows its pass keeps, whether it is made or skipped; the 11 rows a pass
    leaves out rotate (runtime/data.py's _rotated: rows 192-202 in the first pass, 181-191 in the second)."""
    left = ROWS - PER_PASS * K * BATCH
    batches = []
    for a in attempts:
        start = (ROWS - left * (a // PER_PASS + 1)) % ROWS
        rows = [r for r in range(ROWS) if (r - start) % ROWS >= left]
        batches += [tuple(rows[m * BATCH:(m + 1) * BATCH]) for m in range((a % PER_PASS) * K, (a % PER_PASS + 1) * K)]
    return batches


def split(log: list[Any]) -> tuple[list[tuple[int, ...]], list[int], list[int]]:
    """(the micro-batches read, the global step after each attempt, the attempts after which an eval ran)."""
    rows = [e for e in log if isinstance(e, tuple) and e[0] != "apply"]
    steps = [e[1] for e in log if isinstance(e, tuple) and e[0] == "apply"]
    evals = [sum(1 for e in log[:i] if isinstance(e, tuple) and e[0] == "apply") for i, e in enumerate(log) if e == "eval"]
    return rows, steps, evals


def write_spec(folder: Path, text: str = SPEC) -> Path:
    write_data(folder / "train.npz", ROWS, 1)
    write_data(folder / "eval.npz", 101, 2)
    (folder / "spec.yaml").write_text(text)
    return folder / "spec.yaml"


def test_epochs_end_at_pass_ends_and_steps_count_made_updates(tmp_path: Path, recorded: list[Any],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """--epochs 2: 12 attempts (2 passes) reading the documented cut, evals after attempts 6 and 12. The skipped ones
    come first (2**15 overflows 8-fold or more; measured: 4 skipped, the last at 4096). Old: 12 made updates (16
    attempts, 4 updates into a third pass), and an eval after each chunk that left the step at 0 (a multiple of 6)."""
    spec = write_spec(tmp_path)
    assert train(spec, "--epochs", "2") == 0
    rows, steps, evals = split(recorded)
    assert len(steps) == 2 * PER_PASS and rows == cut(range(2 * PER_PASS)) and evals == [PER_PASS, 2 * PER_PASS]
    made = steps[-1]
    skipped = 2 * PER_PASS - made
    assert steps[:2] == [0, 0] and steps[-2] == made - 1, steps  # skips in the first pass; the last update made
    out = capsys.readouterr().out
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("eval at")] == [
        f"eval at step {steps[PER_PASS - 1]}", f"eval at step {made}"]
    assert f"done: {made} updates, {skipped} skipped, in " in out
    assert scalars(tmp_path / "run", "train")["skipped_updates"][made] == skipped
    assert sorted(scalars(tmp_path / "run", "eval")["accuracy"]) == [steps[PER_PASS - 1], made]
    final = variables(tmp_path / "run")
    assert (final["global_step"], final["loss_scale/skipped_updates"]) == (made, skipped)

    # --steps 4: four made updates, whatever was skipped on the way (the same attempts as above: a run is
    # deterministic); the pass's end comes between, with its eval.
    recorded.clear()
    assert train(spec, "--steps", "4", "--set", "checkpoint.dir=run4") == 0
    tried = steps.index(4) + 1
    assert split(recorded) == (cut(range(tried)), steps[:tried], sorted({min(PER_PASS, tried), tried}))
    assert int(variables(tmp_path / "run4")["global_step"]) == 4
    assert f"done: 4 updates, {tried - 4} skipped, in " in capsys.readouterr().out

    # Stopped at step 1 (mid-pass, after skips), then resumed to the same last step: it goes on at the attempt it
    # stopped before (step 1 + the skipped count), its eval comes at the pass end, and every checkpointed value
    # (weights, momentum, loss scale, skip count) and every eval equals the uninterrupted run's, bitwise (dropout
    # draws by attempt).
    recorded.clear()
    assert train(spec, "--steps", "1", "--set", "checkpoint.dir=run1") == 0
    tried = steps.index(1) + 1
    assert 1 < tried < PER_PASS and split(recorded)[1] == steps[:tried]
    recorded.clear()
    assert train(spec, "--resume", "--steps", str(made - 1), "--set", "checkpoint.dir=run1") == 0
    assert split(recorded) == (cut(range(tried, 2 * PER_PASS)), steps[tried:],
                               [PER_PASS - tried, 2 * PER_PASS - tried])
    resumed = variables(tmp_path / "run1")
    assert resumed.keys() == final.keys()
    for path, value in final.items():
        assert np.array_equal(resumed[path], value), path
    whole, parts = scalars(tmp_path / "run", "eval"), scalars(tmp_path / "run1", "eval")
    assert {tag: {s: v for s, v in values.items() if s != 1} for tag, values in parts.items()} == whole  # 1: its stop


def test_one_graph_chunks_end_epochs_at_pass_ends_and_resume_bitwise(tmp_path: Path) -> None:
    """accumulate 1: a chunk of updates is one graph call, its dropout seeded in the graph from the chunk's first
    attempt on. 25 updates a pass; each eval comes where its step plus the updates skipped by then is 25 and 50
    (measured: 4 skipped, evals at steps 21 and 46; old: at 25 and 50). Stopped at step 2 (inside the uninterrupted
    run's first chunk of 10 attempts, after skips) and resumed: bitwise (seeded by step, the resumed chunk would
    draw other masks than the uninterrupted run did for the same attempts)."""
    spec = write_spec(tmp_path, SPEC.replace("accumulate: 4", "accumulate: 1").replace("every_steps: 3", "every_steps: 10"))
    assert train(spec, "--epochs", "2") == 0
    run, stopped = tmp_path / "run", tmp_path / "run2"
    evals, skipped = sorted(scalars(run, "eval")["accuracy"]), scalars(run, "train")["skipped_updates"]
    assert [step + skipped[step] for step in evals] == [25, 50] and skipped[evals[0]] > 0, (evals, skipped)
    final = variables(run)
    made = int(final["global_step"])
    assert made == evals[-1]
    assert train(spec, "--steps", "2", "--set", f"checkpoint.dir={stopped}") == 0
    assert variables(stopped)["loss_scale/skipped_updates"] > 0
    assert train(spec, "--resume", "--steps", str(made - 2), "--set", f"checkpoint.dir={stopped}") == 0
    resumed = variables(stopped)
    assert resumed.keys() == final.keys()
    for path, value in final.items():
        assert np.array_equal(resumed[path], value), path
    parts = scalars(stopped, "eval")
    assert {tag: {s: v for s, v in values.items() if s != 2} for tag, values in parts.items()} == scalars(run, "eval")
