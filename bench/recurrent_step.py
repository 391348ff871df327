"""One recurrent layer alone: forward + gradients of every weight (one training step's work) and tf.function
inference, specgen's runtime/lib/recurrent.py against Keras' own layer with the same weights.

Medians of interleaved repetitions (each repetition times every variant once, in turn, so load changes hit all
of them alike); ratio = Keras time / specgen time (>= 1.0: specgen at least as fast).

    python bench/recurrent_step.py                                  # lstm, gru, simple_rnn at batch 32, 8 steps
    python bench/recurrent_step.py --ops lstm --time 8 32 --mask --repeats 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def build(op: str, units: int, features: int, masked: bool) -> tuple[Callable, Callable, list[Any]]:
    """(specgen fn, keras fn, weights) both taking (x, mask) and returning the layer's sequence output."""
    import keras
    import tensorflow as tf

    from specgen.runtime.lib import recurrent

    layer = {"lstm": keras.layers.LSTM, "gru": keras.layers.GRU, "simple_rnn": keras.layers.SimpleRNN}[op]
    k = layer(units, return_sequences=True, use_cudnn=False) if op != "simple_rnn" else layer(units, return_sequences=True)
    k.build((None, None, features))
    weights = k.trainable_weights
    variables = [tf.Variable(w.numpy()) for w in weights]
    fn = getattr(recurrent, op)

    def ours(x: Any, mask: Any) -> Any:
        return fn(x, *variables, units=units, return_sequences=True, go_backwards=False,
                  mask=mask if masked else None)

    def theirs(x: Any, mask: Any) -> Any:
        return k(x, mask=mask if masked else None)

    return ours, theirs, [variables, weights]


def timed(fn: Callable, args: tuple, calls: int) -> float:
    fn(*args)
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - start) / calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="+", default=["lstm", "gru", "simple_rnn"])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--time", type=int, nargs="+", default=[8])
    parser.add_argument("--features", type=int, default=8)
    parser.add_argument("--units", type=int, default=64)
    parser.add_argument("--mask", action="store_true", help="also time with a mask (a third of steps padded)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=100, help="calls per timing")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    load = os.getloadavg()
    print(f"tensorflow {tf.__version__}, {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"batch {args.batch}, {args.features} features, {args.units} units, {args.repeats} repetitions x {args.calls} calls")
    print(f"{'op':<11}{'time':>5} {'mask':<5}{'mode':<7}{'specgen':>11}{'keras':>11}  ratio (min-max)")
    rng = np.random.default_rng(0)
    for op in args.ops:
        for masked in (False, True) if args.mask else (False,):
            ours, theirs, (v_ours, v_theirs) = build(op, args.units, args.features, masked)
            cases = {}
            for mode in ("train", "infer"):
                for name, fn, variables in (("specgen", ours, v_ours), ("keras", theirs, v_theirs)):
                    cases[mode, name] = tf.function(_train(fn, variables) if mode == "train" else fn)
            for steps in args.time:
                x = tf.constant(rng.standard_normal((args.batch, steps, args.features)), tf.float32)
                lengths = rng.integers(steps - steps // 3, steps + 1, args.batch)
                mask = tf.constant(np.arange(steps)[None, :] < lengths[:, None])
                samples: dict[tuple[str, str], list[float]] = {key: [] for key in cases}
                for _ in range(args.repeats):
                    for key, fn in cases.items():
                        samples[key].append(timed(fn, (x, mask), args.calls))
                for mode in ("train", "infer"):
                    a, b = samples[mode, "specgen"], samples[mode, "keras"]
                    ratios = [k / s for s, k in zip(a, b, strict=True)]
                    print(f"{op:<11}{steps:>5} {'yes' if masked else 'no':<5}{mode:<7}"
                          f"{statistics.median(a) * 1e3:8.3f} ms{statistics.median(b) * 1e3:8.3f} ms  "
                          f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")
    end = os.getloadavg()
    print(f"load average at the end {end[0]:.2f} {end[1]:.2f} {end[2]:.2f}")
    return 0


def _train(fn: Callable, variables: list[Any]) -> Callable:
    import tensorflow as tf

    def step(x: Any, mask: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(fn(x, mask)))
        return tape.gradient(loss, variables)
    return step


if __name__ == "__main__":
    raise SystemExit(main())
