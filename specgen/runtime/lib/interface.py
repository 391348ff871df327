"""The declared interface of generated modules: what `specgen train`, `export` and `restore` may use.

The commands reach generated classes only through these Protocols, never through attribute names
the templates happen to choose (`opt_<name>_learning_rate`, `ema_shadows`): a template can rename
its internals without breaking the runtime, and tests/test_ir_training.py checks that the runtime
does not reach past the interface. Runtime-checkable, so a test can check a generated class.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

Tensor = Any  # tf.Tensor / tf.Variable: kept as Any so that importing this module does not import TensorFlow


@runtime_checkable
class GeneratedModel(Protocol):
    """model.py's class: `<Name>(seed=0)`."""

    def __call__(self, inputs: Mapping[str, Tensor], training: bool = False,
                 seed: Tensor | None = None) -> dict[str, Tensor]: ...

    def variables_by_path(self) -> dict[str, Tensor]:
        """Every model variable under its spec path (the checkpoint keys of the model)."""
        ...

    def layer_outputs(self, inputs: Mapping[str, Tensor], training: bool = False,
                      seed: Tensor | None = None) -> dict[str, Tensor]:
        """Every layer's output by layer name (`__call__` picks the outputs from these)."""
        ...


@runtime_checkable
class PrunedModel(GeneratedModel, Protocol):
    """model.py's class for a spec with `prune`: its forward pass reads each pruned weight times its mask."""

    masks: dict[str, Tensor]  # pruned weight path -> its mask (checkpoint key `pruning/<path>`)


@runtime_checkable
class GeneratedTrainer(Protocol):
    """train.py's class: `<Name>Training(model)`; what every spec's training module offers."""

    global_step: Tensor
    trainable: list[Tensor]  # the trained weights, in optimizer order
    trainable_paths: list[str]
    metrics: list[Any]  # specgen.runtime.lib.metrics objects

    def state_by_path(self) -> dict[str, Tensor]:
        """Training state by checkpoint key (ir/training/keys.py), metrics left out."""
        ...

    def learning_rate(self, name: str) -> Tensor:
        """Optimizer `name`'s learning-rate variable."""
        ...

    def ema_variables(self) -> list[Tensor]:
        """The EMA shadows in `trainable` order; empty without train.ema."""
        ...

    def eval_step(self, features: Mapping[str, Tensor], labels: Mapping[str, Tensor]) -> Tensor: ...

    def gradients(self, features: Mapping[str, Tensor], labels: Mapping[str, Tensor],
                  seed: Tensor | None = None) -> tuple[Tensor, list[Tensor | None]]:
        """One batch's training-mode loss and each `trainable` weight's gradient (None: not on the loss's path)."""
        ...

    def apply(self, gradients: list[Tensor]) -> None:
        """One update from gradients in `trainable` order: clipping, weight decay, optimizers, step, EMA."""
        ...


@runtime_checkable
class SteppingTrainer(GeneratedTrainer, Protocol):
    """A spec with `train.accumulate: 1`: whole chunks of updates in one graph."""

    def train_steps(self, iterator: Any, counter: Tensor, steps: Tensor) -> Tensor: ...

    def train_step(self, features: Mapping[str, Tensor], labels: Mapping[str, Tensor], seed: Tensor) -> Tensor:
        """One update; under a tf.distribute strategy the runtime runs it on every replica (runtime/placement/replicas.py)."""
        ...


@runtime_checkable
class AccumulatingTrainer(GeneratedTrainer, Protocol):
    """A spec with `train.accumulate > 1`: micro-batches add gradients, `apply_accumulated` updates."""

    micro_batches: Tensor

    def accumulate_step(self, features: Mapping[str, Tensor], labels: Mapping[str, Tensor],
                        seed: Tensor) -> Tensor: ...

    def apply_accumulated(self) -> None: ...


@runtime_checkable
class TargetFollowingTrainer(GeneratedTrainer, Protocol):
    """A spec with `targets:`: target variables that follow online ones (specgen/ir/targets.py)."""

    def target_pairs(self) -> list[tuple[str, str]]:
        """(online path, target path) of every target variable, in `targets:` order."""
        ...


@runtime_checkable
class ProgressReporter(Protocol):
    """A trainer with values for the progress line and TensorBoard (mixed_float16: the loss scale, skipped updates)."""

    def progress_values(self) -> dict[str, Tensor]: ...


@runtime_checkable
class OptionalState(Protocol):
    """A trainer with checkpoint keys a run under other settings did not write (train.precision's loss scale):
    a resume from such a checkpoint leaves them at their first values."""

    def optional_state(self) -> list[str]: ...


@runtime_checkable
class TermReporter(Protocol):
    """A spec whose loss is more than one term with data labels and weight 1 (docs/spec.md#loss-terms)."""

    def loss_terms(self) -> dict[str, Tensor]:
        """Each loss term's value at the last training micro-batch, before weighting, by term name."""
        ...
