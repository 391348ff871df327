"""How far Keras' own float32 output is from float64 for a zoo model prepared as bench/zoo.py prepares it.

A row that specgen's export gate refuses (onnxruntime and TensorFlow disagree) is either a conversion
error or a model whose float32 evaluation has lost its digits. This script tells them apart without
specgen's graph: the constructor's weights after zoo.py's `randomize_statistics`, run by Keras in float32
and again in float64 (the same weights, cast), compared at every residual `*_add` and at the output;
and Keras float32 against itself with each input moved one float32 step (`np.nextafter`).

    python bench/float32_floor.py EfficientNetV2L EfficientNetV2M      # 32x32, batch 2, zoo.py's inputs
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def floor(name: str, size: int, every: int) -> list[tuple[str, float, float]]:
    """(layer, max |float64 activation|, max |f32 - f64| / max |f64|) at each probe; the output last."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    from zoo import randomize_statistics

    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    keras.config.set_dtype_policy("float32")
    net = getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3))
    randomize_statistics(net)
    keras.config.set_dtype_policy("float64")
    net64 = getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3))
    keras.config.set_dtype_policy("float32")
    net64.set_weights([w.astype(np.float64) for w in net.get_weights()])
    adds = [layer.name for layer in net.layers if layer.name.endswith("_add")][every - 1::every]
    probes = [*adds, net.layers[-1].name]

    def run(model: Any, x: np.ndarray) -> list[np.ndarray]:
        probe = keras.Model(model.input, [model.get_layer(n).output for n in probes])
        return [np.asarray(v, np.float64) for v in probe(x, training=False)]

    x = np.random.default_rng(0).standard_normal((2, size, size, 3)).astype(np.float32)  # zoo.py's parity batch
    ours, exact = run(net, x), run(net64, x.astype(np.float64))
    rows = [(n, float(np.max(np.abs(b))), float(np.max(np.abs(a - b)) / np.max(np.abs(b))))
            for n, a, b in zip(probes, ours, exact, strict=True)]
    stepped = net(np.nextafter(x, np.float32(np.inf)), training=False).numpy()
    rows.append(("output, float32, inputs one step away", float(np.max(np.abs(ours[-1]))),
                 float(np.max(np.abs(stepped - ours[-1])) / np.max(np.abs(ours[-1])))))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--every", type=int, default=4, help="print every n-th residual add (default 4)")
    args = parser.parse_args()
    for name in args.models:
        print(f"\n{name} at {args.size}x{args.size}: Keras float32 against Keras float64\n")
        print("| layer | max abs (float64) | max rel diff |\n|---|---|---|")
        for layer, size, rel in floor(name, args.size, args.every):
            print(f"| {layer} | {size:.3g} | {rel:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
