"""How `specgen train` places the generated steps: one interface for one device and for replicas.

TensorFlow's default-strategy idea (`tf.distribute.get_strategy()` answers even where no strategy
was made): `Distribution` is the one device and calls the generated steps as they are;
`specgen.runtime.placement.replicas.Replicas` overrides it to run them on every replica of a tf.distribute
strategy. The session and the loop call the same methods on either and never ask which they hold.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import tensorflow as tf

from specgen.ir.training.model import TrainIR
from specgen.kinds.features import accumulate
from specgen.runtime.lib.interface import AccumulatingTrainer, SteppingTrainer
from specgen.runtime.placement.positions import Positions
from specgen.runtime.sources.base import Source
from specgen.spec.load import LoadedSpec

__all__ = ["Distribution"]


class Distribution:
    """One device, no strategy: the generated steps called as they are (the default; `Replicas` overrides).

    The interface every run uses: where variables are created (`scope`), where this process writes,
    how updates and eval steps run, and which errors mean a lost peer (none here: `except ()` catches nothing).
    """

    chief = True  # this process writes the run folder
    count = 1  # replicas in sync
    distributed = False  # under a tf.distribute strategy (Replicas), even of one replica
    workers = 1  # processes that train together
    lost: tuple[type[Exception], ...] = ()
    positions: Positions | None = None  # set when each worker saves its own data position (file-sharded data)
    unsharded = ""  # why the workers each read all the data where they could read shares (Replicas)

    def describe(self) -> list[str]:
        """Lines `specgen train` prints about where it runs (none for one device)."""
        return []

    def training_data(self, source: Source, batch: int, train: TrainIR, run: Path, name: str = "") -> tuple[Source, int]:
        """This process's training examples and its batch: all of them, the global batch (`Replicas` may shard).
        `run`: the run folder; `name`: the source, for the line that says how it is read."""
        return source, batch

    def scope(self, update_paths: frozenset[str]) -> contextlib.AbstractContextManager[None]:
        """Where the model and trainer variables are created (`update_paths`: the batch-norm statistics)."""
        return contextlib.nullcontext()

    def write_folder(self, run: Path) -> Path:
        """Where this process writes checkpoints and summaries."""
        return run

    def close(self) -> None:
        """Remove what this process wrote only for itself."""

    def saved(self, checkpoint: Path) -> None:
        """A checkpoint this process just wrote in its `write_folder` (the run's: kept)."""

    def updates(self, trainer: Any, iterator: Any, step: int, count: int, train: TrainIR) -> tf.Tensor:
        """`count` updates from update `step` (Session.attempts: the global step plus the updates mixed_float16
        skipped); the last micro-batch's loss (a tensor: no host sync per step).

        An accumulating trainer (AccumulatingTrainer) is called per micro-batch; every other step kind runs
        whole chunks through its own `train_steps` (the gradient step: one graph; Levenberg-Marquardt: one
        graph call an iteration, so that Ctrl-C stops it between two). Seeds are the same either way:
        [update * K + micro-batch, seed].
        """
        if isinstance(trainer, AccumulatingTrainer):
            return self.accumulated_updates(trainer, iterator, step, count, accumulate.of(train), train.seed)
        return self.train_steps(cast(SteppingTrainer, trainer), iterator, tf.constant(step, tf.int64),
                                tf.constant(count, tf.int64), train.seed)

    def train_steps(self, trainer: SteppingTrainer, iterator: Any, counter: tf.Tensor, steps: tf.Tensor,
                    seed: int) -> tf.Tensor:
        """`steps` updates through the trainer's own `train_steps` (which seeds them the same way)."""
        return trainer.train_steps(iterator, counter, steps)

    def accumulated_updates(self, trainer: AccumulatingTrainer, iterator: Any, step: int, count: int,
                            accumulate: int, seed: int) -> tf.Tensor:
        """`count` updates of `accumulate` micro-batches each, from global step `step`; each micro-batch and
        each apply through `run` (on every replica under a strategy)."""
        loss = tf.constant(0.0)
        for update in range(step, step + count):
            for micro in range(int(trainer.micro_batches.numpy()), accumulate):  # a resumed run may start mid-update
                features, labels = next(iterator)
                micro_seed = tf.constant([update * accumulate + micro, seed], tf.int64)
                loss = self.run("accumulate", trainer.accumulate_step, features, labels, micro_seed)
            self.run("apply", trainer.apply_accumulated)
        return loss

    def eval_step(self, trainer: Any, features: Any, labels: Any) -> tf.Tensor:
        return self.run("eval", trainer.eval_step, features, labels)

    def run(self, name: str, step: Callable[..., Any], *args: Any) -> Any:
        """One generated step (`name` keys a strategy's cache of wrapped steps)."""
        return step(*args)

    def lost_worker(self, loaded: LoadedSpec, exc: Exception) -> BaseException:
        """What to raise for an error in `lost` (empty here: one device has no peer to lose)."""
        return exc
