"""train.precision (docs/training.md#mixed-precision-and-xla): the model read in a reduced compute type, and dynamic loss scaling.

Keras' mixed policies keep variables in float32 and cast them to the compute type where a layer reads them
(autocasting). specgen's generated model reads its tf.Variables as attributes, so `CastModel` runs the model's
own code on a copy of the instance whose float32 variables are replaced by casts: gradients flow back through
the casts to the float32 variables, and optimizers, slots, EMA shadows and checkpoints never see another type.
The loss scaling is Keras' LossScaleOptimizer's rule (initial 2**15, halved on a non-finite update, doubled after
`growth_interval` finite ones), written into the generated step so that accumulation, EMA, several optimizers and
pruning see one decision per update (Keras' wrapper decides per optimizer and per apply).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import tensorflow as tf

F = TypeVar("F", bound=Callable[..., Any])
COMPUTE = {"mixed_float16": tf.float16, "mixed_bfloat16": tf.bfloat16}
REDUCED = (tf.float16, tf.bfloat16)
INITIAL_SCALE = 2.0**15  # Keras' LossScaleOptimizer defaults
GROWTH_INTERVAL = 2000


def _cast(value: Any, dtype: tf.DType) -> Any:
    return tf.cast(value, dtype) if value.dtype == tf.float32 else value


class CastModel(tf.Module):  # type: ignore[misc]  # tensorflow ships no types: tf.Module is Any
    """A generated model called in `compute`: float inputs and weights cast down, float outputs cast back to
    float32 (losses and metrics compute in float32, as under Keras' policy). `keep`: variable paths read as
    they are (normalization layers, which compute in float32: runtime/lib/layers.py)."""

    def __init__(self, model: Any, compute: str, keep: tuple[str, ...] | list[str]) -> None:
        super().__init__(name="cast_model")
        self.model, self.compute = model, COMPUTE[compute]
        kept = {id(v) for path, v in model.variables_by_path().items() if path in keep}
        self.cast_names = [name for name, value in vars(model).items()
                           if isinstance(value, tf.Variable) and value.dtype == tf.float32 and id(value) not in kept]
        # Pruning masks (a dict of variables the forward pass multiplies the weights by) are read in the compute type.
        self.cast_dicts = [name for name, value in vars(model).items() if isinstance(value, dict) and value
                           and all(isinstance(v, tf.Variable) for v in value.values())]

    def _view(self) -> Any:
        """A copy of the model instance whose float32 variables read as casts; its methods are the model's own."""
        view = object.__new__(type(self.model))
        view.__dict__.update(vars(self.model))
        for name in self.cast_names:
            view.__dict__[name] = tf.cast(vars(self.model)[name], self.compute)
        for name in self.cast_dicts:
            view.__dict__[name] = {k: _cast(v, self.compute) for k, v in vars(self.model)[name].items()}
        return view

    def __call__(self, inputs: Mapping[str, tf.Tensor], training: bool = False,
                 seed: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
        cast = {name: _cast(x, self.compute) for name, x in inputs.items()}
        outputs = type(self.model).__call__(self._view(), cast, training, seed)
        return {name: tf.cast(y, tf.float32) if y.dtype in REDUCED else y for name, y in outputs.items()}

    def variables_by_path(self) -> dict[str, tf.Variable]:
        return dict(self.model.variables_by_path())

    def __getattr__(self, name: str) -> Any:
        """Anything else (masks, layer_outputs) is the model's own."""
        if name == "model":  # not set yet (tf.Module's __init__ looks attributes up first)
            raise AttributeError(name)
        return getattr(self.model, name)


def _scaled(gradient: Any, factor: tf.Tensor) -> Any:
    if isinstance(gradient, tf.IndexedSlices):  # an embedding's sparse gradient
        return tf.IndexedSlices(gradient.values * factor, gradient.indices, gradient.dense_shape)
    return None if gradient is None else gradient * factor


def _values(gradient: Any) -> tf.Tensor:
    return gradient.values if isinstance(gradient, tf.IndexedSlices) else gradient


def unscale(gradients: list[Any], scale: tf.Variable) -> tuple[list[Any], tf.Tensor]:
    """The gradients divided by the loss scale, and whether every entry of every one is finite."""
    inverse = 1.0 / scale.read_value()
    unscaled = [_scaled(g, inverse) for g in gradients]
    checks = [tf.reduce_all(tf.math.is_finite(_values(g))) for g in unscaled if g is not None]
    return unscaled, tf.reduce_all(tf.stack(checks)) if checks else tf.constant(True)


def adjust(finite: tf.Tensor, scale: tf.Variable, good_steps: tf.Variable, skipped: tf.Variable,
           growth_interval: int = GROWTH_INTERVAL) -> None:
    """Keras' dynamic rule: a non-finite update halves the scale and counts as skipped; `growth_interval`
    finite updates in a row double it."""
    good = tf.where(finite, good_steps + 1, tf.constant(0, tf.int64))
    grow = good >= growth_interval
    scale.assign(tf.where(finite, tf.where(grow, scale * 2.0, scale), scale / 2.0))
    good_steps.assign(tf.where(grow, tf.constant(0, tf.int64), good))
    skipped.assign_add(tf.where(finite, tf.constant(0, tf.int64), tf.constant(1, tf.int64)))


def guarded(finite: tf.Tensor, update: Any) -> None:
    """Run `update` only on finite gradients; otherwise nothing moves (weights, slots, shadows, step).

    On one device a tf.cond skips the update. Under a tf.distribute strategy the update's assignments to
    mirrored variables are synchronization points, which TensorFlow does not allow inside a cond in replica
    context: the decision is made in cross-replica context (merge_call), and the cond there runs the update
    on every replica or on none, as Keras' LossScaleOptimizer does.
    """
    context = tf.distribute.get_replica_context()
    if not tf.distribute.has_strategy() or context is None:
        tf.cond(finite, lambda: _run(update), lambda: tf.constant(False))
        return

    def cross_replica(strategy: tf.distribute.Strategy, finite: Any) -> None:
        everywhere = tf.reduce_all(tf.stack(strategy.experimental_local_results(finite)))
        tf.cond(everywhere, lambda: _run(lambda: strategy.extended.call_for_each_replica(update)),
                lambda: tf.constant(False))

    context.merge_call(cross_replica, args=(finite,))


def _run(update: Any) -> tf.Tensor:
    update()
    return tf.constant(True)


def in_float32(function: F) -> F:
    """`function(x, ...)` computed on x in float32, its result cast back to x's type: normalizations under a
    mixed policy (as Keras' BatchNormalization and LayerNormalization compute). float32 x passes straight through."""

    @functools.wraps(function)
    def wrapper(x: tf.Tensor, *args: Any, **kwargs: Any) -> tf.Tensor:
        if x.dtype not in REDUCED:
            return function(x, *args, **kwargs)
        return tf.cast(function(tf.cast(x, tf.float32), *args, **kwargs), x.dtype)

    return wrapper  # type: ignore[return-value]
