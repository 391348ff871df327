"""Training steps/s of small sequence classifiers: specgen's generated step against Keras `fit` on the same model.

bench/train_step.py's machinery (its Specgen driver, KerasFit, variants, interleaved measurement and report)
on two specs written by this script, both reading the bundled digits as 8 steps of 8 features (batch 32,
one Adam at 0.001 over every variable, sparse softmax cross-entropy, metric accuracy):

  lstm         lstm(64, return_sequences), lstm(64), dense 10
  transformer  dense 32 on rank 3, one post-norm encoder layer (bench/sequence.py's `encoder_layers`:
               multi_head_attention 4 heads, add, layer_norm, dense 64 gelu, dense 32, add, layer_norm),
               global_avg_pool over time, dense 10

The Keras side is the same model in keras.layers (bench/sequence.py's builders, with a head). Target: what
`specgen train` runs (specgen train()) >= 1.0x Keras fit. The issue's `examples/specs/digits_lstm.yaml` and
transformer example are not on main yet; these specs stand in for them.

    python bench/sequence_train.py                     # both models, 5 repetitions
    python bench/sequence_train.py --models lstm --repeats 3 --steps 100
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_step
from sequence import Config, encoder_layers, gelu, lstm_layers

from specgen.spec.load import LoadedSpec, load_spec

MODELS = {"lstm": Config("lstm", 2, 64, features=8), "transformer": Config("encoder", 1, 32, heads=4, intermediate=64)}
BATCH, STEPS, FEATURES = 32, 8, 8


def layers_of(key: str) -> list[dict[str, Any]]:
    c = MODELS[key]
    if key == "lstm":
        return lstm_layers(c)
    body = encoder_layers(c)
    body[0] = {**body[0], "input": "proj"}
    body[1] = {**body[1], "inputs": ["proj", body[0]["name"]]}
    return [{"name": "proj", "op": "dense", "units": c.hidden, "input": "x"}, *body,
            {"name": "pool", "op": "global_avg_pool"}, {"name": "out", "op": "dense", "units": 10}]


def write_spec(key: str, folder: Path) -> LoadedSpec:
    """The training spec of `key` and its data (digits as [8 steps, 8 features]) in `folder`."""
    with np.load(train_step.ROOT / "examples" / "data" / "digits.npz") as digits:
        np.savez(folder / "digits_seq.npz", x=digits["x_train"].reshape(-1, STEPS, FEATURES), y=digits["y_train"])
    document = {
        "specgen": 1, "name": f"bench_train_{key}", "inputs": {"x": {"shape": [STEPS, FEATURES]}},
        "outputs": {"logits": "out"}, "layers": layers_of(key),
        "loss": {"kind": "sparse_softmax_cross_entropy", "logits": "logits", "labels": "label"},
        "optimizers": {"all": {"variables": ["*"], "kind": "adam", "learning_rate": train_step.LEARNING_RATE}},
        "train": {"batch_size": BATCH, "epochs": 1, "accumulate": 1, "metrics": ["accuracy"], "seed": 0},
        "data": {"train": {"npz": "digits_seq.npz", "features": {"x": "x"}, "labels": {"label": "y"}}},
        "checkpoint": train_step.run_section(folder),
    }
    path = folder / f"{key}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return load_spec(path)


def keras_model(key: str) -> Any:
    import keras
    from keras import layers

    c = MODELS[key]
    x = inputs = keras.Input((STEPS, FEATURES), name="x")
    if key == "lstm":
        for i in range(c.layers):
            x = layers.LSTM(c.hidden, return_sequences=i + 1 < c.layers, name=f"lstm{i + 1}")(x)
    else:
        x = layers.Dense(c.hidden, name="proj")(x)
        a = layers.MultiHeadAttention(c.heads, c.hidden // c.heads, name="l0_attn")(x, x)
        x = layers.LayerNormalization(epsilon=1e-5, name="l0_ln1")(layers.Add()([x, a]))
        h = layers.Dense(c.hidden, name="l0_ffn2")(layers.Dense(c.intermediate, activation=gelu, name="l0_ffn1")(x))
        x = layers.GlobalAveragePooling1D(name="pool")(layers.LayerNormalization(epsilon=1e-5, name="l0_ln2")(
            layers.Add()([x, h])))
    return keras.Model(inputs, layers.Dense(10, name="out")(x), name=f"keras_{key}")


def keras_dataset(loaded: LoadedSpec) -> Any:
    """train_step.keras_dataset's chain (the one specgen's data.training_batches builds) on this spec's npz."""
    import tensorflow as tf

    spec = loaded.spec.train
    with np.load(loaded.folder / "digits_seq.npz") as npz:
        x, y = npz["x"].astype(np.float32), npz["y"].astype(np.int64)
    return (tf.data.Dataset.from_tensor_slices((x, y))
            .shuffle(min(spec.shuffle_buffer, len(x)), seed=spec.seed, reshuffle_each_iteration=True)
            .batch(spec.batch_size, drop_remainder=True).repeat().prefetch(2))


def setup(key: str, folder: Path, k: int) -> tuple[list[train_step.Variant], dict[int, Any], Any]:
    loaded = write_spec(key, folder)
    ours = train_step.Specgen(loaded)
    dataset, fits = keras_dataset(loaded), {}
    for spe in (1, k):
        net = keras_model(key)
        train_step.compile_keras(net, spe)
        train_step.check_same_variables(ours.model, net)
        fits[spe] = train_step.KerasFit(net, dataset, spe)
    V = train_step.Variant
    variants = [V("specgen loop", train_step.timed_runs(ours.loop)),
                V("specgen train()", train_step.timed_runs(ours.train_loop)),
                V(f"specgen graph[{k}]", train_step.timed_runs(ours.graph(k)), quantum=k),
                V("keras fit", fits[1].timed), V(f"keras fit[{k}]", fits[k].timed, quantum=k)]
    return variants, fits, ours


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=tuple(MODELS), default=list(MODELS))
    parser.add_argument("--steps", type=int, default=200, help="timed steps per measurement (default 200)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed steps before each measurement (default 20)")
    parser.add_argument("--repeats", type=int, default=5, help="measurements per variant (default 5)")
    parser.add_argument("--k", type=int, default=50, help="steps per tf.function call / steps_per_execution")
    args = parser.parse_args(argv)
    if args.steps < args.k:  # graph[k] and fit[k] time whole calls of k steps: fewer steps would time none
        parser.error("--steps must be at least --k")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    started, load = time.perf_counter(), os.getloadavg()
    import keras

    keras.utils.set_random_seed(0)
    print(f"Keras {keras.__version__}, {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"{args.warmup} warm-up + {args.steps} timed steps, {args.repeats} repetitions interleaved, k = {args.k}")
    results = []
    with tempfile.TemporaryDirectory(prefix="specgen-bench-sequence-train-") as tmp:
        for key in args.models:
            (folder := Path(tmp) / key).mkdir()
            variants, fits, ours = setup(key, folder, args.k)
            train_step.measure(variants, args)
            results += train_step.report(key, ours, fits, variants, args.k)
            ours.close()
    print(f"\ntarget: specgen train() >= {train_step.TARGET_RATIO:g}x keras fit")
    for label, ratio, paired in results:
        print(f"  {label:<46}{ratio:7.3f}x {paired:7.3f}x paired  "
              f"{'met' if ratio >= train_step.TARGET_RATIO else 'NOT met'}")
    end = os.getloadavg()
    print(f"\nwhole run {time.perf_counter() - started:.0f} s; load average at the end {end[0]:.2f} {end[1]:.2f} {end[2]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
