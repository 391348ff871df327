"""Keras' LSTM, GRU and SimpleRNN cell math over [batch, time, features] (generated modules call these).

Written out rather than calling keras.layers: generated code depends on TensorFlow only, and the
weights stay specgen's tf.Variables with Keras' layouts. A static time length up to UNROLL_STEPS runs
unrolled (one input projection for every step, then straight-line cell math); any other length, dynamic
included, runs in a tf.while_loop as Keras' backend.rnn does, so the graph does not grow with the sequence.
Both were chosen by measurement (bench/recurrent_step.py; bench/RESULTS.md "Sequence models").
go_backwards reads the sequence reversed and returns outputs in reading order (Keras').
A mask ([batch, time] bool, runtime/lib/masks.py) works as in Keras' backend.rnn: at a masked step every state
keeps its previous value and the output repeats the previous step's output, carried apart from the states and
starting at zeros: before the first real step it is zeros even when initial_state is not (the states hold it
there), and a row with no real step returns zeros as its output and its initial states as its states.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

import tensorflow as tf

Activation = Callable[[tf.Tensor], tf.Tensor]
Result: TypeAlias = tf.Tensor | tuple[tf.Tensor, ...]  # the output, or with return_state (output, *states)
States = tuple[tf.Tensor, ...]
Step = Callable[[States, tf.Tensor], States]  # a cell: (states, projected input) -> new states
ACTIVATIONS: dict[str, Activation] = {
    "tanh": tf.tanh, "sigmoid": tf.sigmoid, "relu": tf.nn.relu,
    "hard_sigmoid": lambda x: tf.nn.relu6(x + 3.0) / 6.0,  # Keras 3's definition
}


UNROLL_STEPS = 16  # a static time length up to this runs as straight-line ops (measured: bench/recurrent_step.py)


def _keep(new: tuple[tf.Tensor, ...], old: tuple[tf.Tensor, ...], keep: tf.Tensor | None) -> tuple[tf.Tensor, ...]:
    """A masked example keeps every state it had (Keras' rnn backend)."""
    if keep is None:
        return new
    return tuple(tf.where(keep[:, None], n, o) for n, o in zip(new, old, strict=True))


def _output(new: tuple[tf.Tensor, ...], previous: tf.Tensor, keep: tf.Tensor | None) -> tf.Tensor:
    """A step's output: the cell's (its new h) at a real step, the previous step's output at a masked one;
    not the kept state, which holds initial_state until the first real step, where Keras' output is zeros."""
    return new[0] if keep is None else tf.where(keep[:, None], new[0], previous)


def _unrolled(step: Step, elems: tf.Tensor, mask: tf.Tensor | None, initial: tuple[tf.Tensor, ...],
              return_sequences: bool) -> tuple[tf.Tensor, States]:
    """Short fixed lengths as straight-line ops: no loop frame, TensorArray or per-iteration bookkeeping,
    which at 8 steps of a small layer cost more than the cell math (forward and gradient alike)."""
    state, outputs = initial, []
    # The previous step's output: masked, Keras' zeros before the first step; unmasked, every step sets it.
    output = tf.zeros_like(initial[0]) if mask is not None else initial[0]
    keeps = tf.unstack(mask) if mask is not None else [None] * elems.shape[1]
    for z, keep in zip(tf.unstack(elems, axis=1), keeps, strict=True):  # batch-major: no transpose copy
        new = step(state, z)
        output, state = _output(new, output, keep), _keep(new, state, keep)
        outputs.append(output)
    return (tf.stack(outputs, axis=1) if return_sequences else output), state


def _looped(step: Step, elems: tf.Tensor, mask: tf.Tensor | None, initial: tuple[tf.Tensor, ...],
            return_sequences: bool, project: Callable[[tf.Tensor], tf.Tensor]) -> tuple[tf.Tensor, States]:
    """Any length: a tf.while_loop over TensorArrays as Keras' backend.rnn runs it (parallel_iterations 32,
    swap_memory). Unlike tf.scan it stores only the output, not every state, and none when only the last
    output is returned. Each step projects its own input inside the loop (Keras' implementation 2): measured
    faster, forward and gradient, than one projection before the loop, whose [time, batch, gates*units]
    result (4x the units wide) has to be copied into and, for the gradient, out of TensorArrays.
    Masked, the loop also carries the previous step's output (starting at zeros) ahead of the states;
    unmasked, the output is the new h, states[0]."""
    steps = tf.shape(elems)[0]
    inputs = tf.TensorArray(elems.dtype, size=steps).unstack(elems)
    masks = tf.TensorArray(tf.bool, size=steps).unstack(mask) if mask is not None else None
    outputs = tf.TensorArray(elems.dtype, size=steps if return_sequences else 1)
    previous = (tf.zeros_like(initial[0]),) if masks is not None else ()

    def body(t: tf.Tensor, outputs: tf.TensorArray, *carried: tf.Tensor) -> tuple[tf.Tensor | tf.TensorArray, ...]:
        state = carried[len(previous):]
        keep = masks.read(t) if masks is not None else None
        new = step(state, project(inputs.read(t)))
        output = _output(new, carried[0], keep)
        kept = (output, *_keep(new, state, keep)) if keep is not None else new
        return (t + 1, outputs.write(t, output) if return_sequences else outputs, *kept)

    start = (tf.constant(0), outputs, *previous, *initial)
    _, outputs, *carried = tf.while_loop(lambda t, *_: t < steps, body, start, maximum_iterations=steps,
                                         parallel_iterations=32, swap_memory=True)
    last = carried[0]  # the last output, masked or not (unmasked, it is h: the first state)
    return (tf.transpose(outputs.stack(), [1, 0, 2]) if return_sequences else last), tuple(carried[len(previous):])


def _run(x: tf.Tensor, kernel: tf.Variable, bias: tf.Tensor | None, step: Step, initial: tuple[tf.Tensor, ...],
         *, return_sequences: bool, go_backwards: bool, mask: tf.Tensor | None = None,
         return_state: bool = False) -> Result:
    """Project each step's input, run `step` over time, return the last output or all of them
    (with return_state, followed by each state after the last step read: Keras' [output, *states])."""
    kernel = tf.convert_to_tensor(kernel)  # read once, not once per step

    def project(v: tf.Tensor) -> tf.Tensor:
        return v @ kernel + bias if bias is not None else v @ kernel

    if go_backwards:
        x = tf.reverse(x, axis=[1])
    if mask is not None:  # in reading order, time-major like the inputs
        mask = tf.transpose(tf.reverse(mask, axis=[1]) if go_backwards else mask)
    steps = x.shape[1]
    if steps is not None and 0 < steps <= UNROLL_STEPS:  # one matmul for every step (cuDNN's way)
        out, state = _unrolled(step, project(x), mask, initial, return_sequences)
    else:
        out, state = _looped(step, tf.transpose(x, [1, 0, 2]), mask, initial, return_sequences, project)
    return (out, *state) if return_state else out


def _zeros(x: tf.Tensor, units: int) -> tf.Tensor:
    return tf.zeros(tf.stack([tf.shape(x)[0], units]), x.dtype)


def lstm(x: tf.Tensor, kernel: tf.Variable, recurrent_kernel: tf.Variable, bias: tf.Variable | None, *,
         units: int, return_sequences: bool, go_backwards: bool, activation: str = "tanh",
         recurrent_activation: str = "sigmoid", mask: tf.Tensor | None = None, return_state: bool = False,
         initial_state: tuple[tf.Tensor, ...] | None = None) -> Result:
    act, rec = ACTIVATIONS[activation], ACTIVATIONS[recurrent_activation]
    recurrent = tf.convert_to_tensor(recurrent_kernel)  # read once, not once per step

    def step(state: tuple[tf.Tensor, tf.Tensor], z_x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        h, c = state
        i, f, g, o = tf.split(z_x + tf.matmul(h, recurrent), 4, axis=-1)  # Keras' gate order
        c = rec(f) * c + rec(i) * act(g)
        return rec(o) * act(c), c

    initial = initial_state or (_zeros(x, units), _zeros(x, units))  # Keras' initial_state=, else zeros
    return _run(x, kernel, bias, step, initial, return_sequences=return_sequences, go_backwards=go_backwards,
                mask=mask, return_state=return_state)


def gru(x: tf.Tensor, kernel: tf.Variable, recurrent_kernel: tf.Variable, bias: tf.Variable | None, *,
        units: int, return_sequences: bool, go_backwards: bool, activation: str = "tanh",
        recurrent_activation: str = "sigmoid", reset_after: bool = True,
        mask: tf.Tensor | None = None, return_state: bool = False,
        initial_state: tuple[tf.Tensor, ...] | None = None) -> Result:
    act, rec = ACTIVATIONS[activation], ACTIVATIONS[recurrent_activation]
    input_bias, recurrent_bias = (bias[0], bias[1]) if bias is not None and reset_after else (bias, None)
    recurrent = tf.convert_to_tensor(recurrent_kernel)  # read (and sliced) once, not once per step
    recurrent_zr, recurrent_h = recurrent[:, :2 * units], recurrent[:, 2 * units:]

    def step(state: tuple[tf.Tensor], x_all: tf.Tensor) -> tuple[tf.Tensor]:
        (h,) = state
        x_z, x_r, x_h = tf.split(x_all, 3, axis=-1)
        if reset_after:  # r gates the recurrent projection (with its own bias)
            inner = tf.matmul(h, recurrent)
            if recurrent_bias is not None:
                inner = inner + recurrent_bias
            r_z, r_r, r_h = tf.split(inner, 3, axis=-1)
            z, r = rec(x_z + r_z), rec(x_r + r_r)
            r_h = r * r_h
        else:  # r gates the state before its projection
            r_z, r_r = tf.split(tf.matmul(h, recurrent_zr), 2, axis=-1)
            z, r = rec(x_z + r_z), rec(x_r + r_r)
            r_h = tf.matmul(r * h, recurrent_h)
        return (z * h + (1 - z) * act(x_h + r_h),)

    return _run(x, kernel, input_bias, step, initial_state or (_zeros(x, units),),
                return_sequences=return_sequences, go_backwards=go_backwards, mask=mask, return_state=return_state)


def simple_rnn(x: tf.Tensor, kernel: tf.Variable, recurrent_kernel: tf.Variable, bias: tf.Variable | None, *,
               units: int, return_sequences: bool, go_backwards: bool, activation: str = "tanh",
               mask: tf.Tensor | None = None, return_state: bool = False,
               initial_state: tuple[tf.Tensor, ...] | None = None) -> Result:
    act = ACTIVATIONS[activation]
    recurrent = tf.convert_to_tensor(recurrent_kernel)  # read once, not once per step

    def step(state: tuple[tf.Tensor], x_t: tf.Tensor) -> tuple[tf.Tensor]:
        return (act(x_t + tf.matmul(state[0], recurrent)),)

    return _run(x, kernel, bias, step, initial_state or (_zeros(x, units),),
                return_sequences=return_sequences, go_backwards=go_backwards, mask=mask, return_state=return_state)


Weights = tuple[tf.Variable, tf.Variable, tf.Variable | None]  # kernel, recurrent_kernel, bias


def merge(mode: str, y: tf.Tensor, y_rev: tf.Tensor) -> tf.Tensor:
    """Keras' merge modes, its expressions (a function, not a table of lambdas, which AutoGraph cannot parse)."""
    if mode == "concat":
        return tf.concat([y, y_rev], axis=-1)
    if mode == "sum":
        return y + y_rev
    if mode == "mul":
        return y * y_rev
    return (y + y_rev) / 2  # ave


def bidirectional(layer: Callable[..., Result], x: tf.Tensor, forward: Weights, backward: Weights, *,
                  merge_mode: str, return_sequences: bool, go_backwards: bool, mask: tf.Tensor | None = None,
                  return_state: bool = False, **keywords: object) -> Result:
    """Keras' Bidirectional: the layer forward, a copy reading backwards (its outputs flipped back to input
    order when it returns sequences), merged; merge_mode "none" returns both, forward first. With
    return_state the forward layer's states follow, then the backward one's (Keras' order)."""
    y = layer(x, *forward, return_sequences=return_sequences, go_backwards=go_backwards, mask=mask,
              return_state=return_state, **keywords)
    y_rev = layer(x, *backward, return_sequences=return_sequences, go_backwards=not go_backwards, mask=mask,
                  return_state=return_state, **keywords)
    states: tuple[tf.Tensor, ...] = ()
    if return_state:
        (y, *forward_states), (y_rev, *backward_states) = y, y_rev
        states = (*forward_states, *backward_states)
    if return_sequences:
        y_rev = tf.reverse(y_rev, axis=[1])
        if mask is not None:  # Keras' Bidirectional sets zero_output_for_mask on both layers when returning sequences
            keep = mask[:, :, None]
            y, y_rev = tf.where(keep, y, tf.zeros_like(y)), tf.where(keep, y_rev, tf.zeros_like(y_rev))
    outputs = (y, y_rev) if merge_mode == "none" else (merge(merge_mode, y, y_rev),)
    return outputs[0] if len(outputs) + len(states) == 1 else (*outputs, *states)
