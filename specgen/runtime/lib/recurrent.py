"""Keras' LSTM, GRU and SimpleRNN cell math over [batch, time, features] (generated modules call these).

Written out rather than calling keras.layers: generated code depends on TensorFlow only, and the
weights stay specgen's tf.Variables with Keras' layouts. The input projection of every step is one
matmul before the loop (as Keras' implementation 2 does per step); the loop is tf.scan, a
tf.while_loop under tf.function, so the graph does not grow with the sequence and the time length
may be dynamic. go_backwards reads the sequence reversed and returns outputs in reading order (Keras').
A mask ([batch, time] bool, runtime/lib/masks.py) works as in Keras: at a masked step every state keeps its
previous value, so the output there repeats the last real one (zeros before the first).
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

Activation = Callable[[tf.Tensor], tf.Tensor]
Result = tf.Tensor | tuple[tf.Tensor, ...]  # the output, or with return_state (output, *states)
ACTIVATIONS: dict[str, Activation] = {
    "tanh": tf.tanh, "sigmoid": tf.sigmoid, "relu": tf.nn.relu,
    "hard_sigmoid": lambda x: tf.nn.relu6(x + 3.0) / 6.0,  # Keras 3's definition
}


def _masked(step: Callable) -> Callable:
    """`step` over (input, mask) pairs: a masked example keeps every state it had (Keras' rnn backend)."""
    def run(state: tuple[tf.Tensor, ...], elems: tuple[tf.Tensor, tf.Tensor]) -> tuple[tf.Tensor, ...]:
        z, keep = elems
        new = step(state, z)
        return tuple(tf.where(keep[:, None], n, old) for n, old in zip(new, state, strict=True))
    return run


def _run(x: tf.Tensor, kernel: tf.Variable, bias: tf.Tensor | None, step: Callable, initial: tuple[tf.Tensor, ...],
         *, return_sequences: bool, go_backwards: bool, mask: tf.Tensor | None = None,
         return_state: bool = False) -> Result:
    """Project every step's input, scan `step` over time, return the last output or all of them
    (with return_state, followed by each state after the last step read: Keras' [output, *states])."""
    if go_backwards:
        x = tf.reverse(x, axis=[1])
    projected = tf.matmul(x, kernel)  # [batch, time, gates*units]
    if bias is not None:
        projected = projected + bias
    elems = tf.transpose(projected, [1, 0, 2])
    if mask is not None:  # in reading order, time-major like the inputs
        mask = tf.transpose(tf.reverse(mask, axis=[1]) if go_backwards else mask)
        step, elems = _masked(step), (elems, mask)
    states = tf.scan(step, elems, initializer=initial)
    outputs = states[0]  # [time, batch, units]: the first state is each layer's output
    out = tf.transpose(outputs, [1, 0, 2]) if return_sequences else outputs[-1]
    return (out, *(s[-1] for s in states)) if return_state else out


def _zeros(x: tf.Tensor, units: int) -> tf.Tensor:
    return tf.zeros(tf.stack([tf.shape(x)[0], units]), x.dtype)


def lstm(x: tf.Tensor, kernel: tf.Variable, recurrent_kernel: tf.Variable, bias: tf.Variable | None, *,
         units: int, return_sequences: bool, go_backwards: bool, activation: str = "tanh",
         recurrent_activation: str = "sigmoid", mask: tf.Tensor | None = None, return_state: bool = False,
         initial_state: tuple[tf.Tensor, ...] | None = None) -> Result:
    act, rec = ACTIVATIONS[activation], ACTIVATIONS[recurrent_activation]

    def step(state: tuple[tf.Tensor, tf.Tensor], z_x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        h, c = state
        i, f, g, o = tf.split(z_x + tf.matmul(h, recurrent_kernel), 4, axis=-1)  # Keras' gate order
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

    def step(state: tuple[tf.Tensor], x_all: tf.Tensor) -> tuple[tf.Tensor]:
        (h,) = state
        x_z, x_r, x_h = tf.split(x_all, 3, axis=-1)
        if reset_after:  # r gates the recurrent projection (with its own bias)
            inner = tf.matmul(h, recurrent_kernel)
            if recurrent_bias is not None:
                inner = inner + recurrent_bias
            r_z, r_r, r_h = tf.split(inner, 3, axis=-1)
            z, r = rec(x_z + r_z), rec(x_r + r_r)
            r_h = r * r_h
        else:  # r gates the state before its projection
            r_z, r_r = tf.split(tf.matmul(h, recurrent_kernel[:, :2 * units]), 2, axis=-1)
            z, r = rec(x_z + r_z), rec(x_r + r_r)
            r_h = tf.matmul(r * h, recurrent_kernel[:, 2 * units:])
        return (z * h + (1 - z) * act(x_h + r_h),)

    return _run(x, kernel, input_bias, step, initial_state or (_zeros(x, units),),
                return_sequences=return_sequences, go_backwards=go_backwards, mask=mask, return_state=return_state)


def simple_rnn(x: tf.Tensor, kernel: tf.Variable, recurrent_kernel: tf.Variable, bias: tf.Variable | None, *,
               units: int, return_sequences: bool, go_backwards: bool, activation: str = "tanh",
               mask: tf.Tensor | None = None, return_state: bool = False,
               initial_state: tuple[tf.Tensor, ...] | None = None) -> Result:
    act = ACTIVATIONS[activation]

    def step(state: tuple[tf.Tensor], x_t: tf.Tensor) -> tuple[tf.Tensor]:
        return (act(x_t + tf.matmul(state[0], recurrent_kernel)),)

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
