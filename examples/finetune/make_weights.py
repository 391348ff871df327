"""Write mobilenet_v2.keras: the "pretrained" Keras model that docs/finetune.md fine-tunes with specgen.

There is no network here to download ImageNet weights, so this script plays the part of whoever
published the weights: it builds `keras.applications.MobileNetV2` (alpha 0.35, 32x32x3, the
smallest MobileNetV2 Keras builds), pretrains it in Keras on a *source* task, digits 0 to 4 only
(5 classes), and saves it with `model.save`, as a Keras user would. specgen then transfers it to
the *target* task, all ten digits, through a new head on the frozen backbone. The user's side
never touches this script: it starts from the `.keras` file.

    python examples/finetune/make_weights.py                 # 20 epochs of pretraining (~1 min on 2 cores)
    python examples/finetune/make_weights.py --epochs 0      # Keras' seeded initial weights (what the test uses)

The images get the preprocessing the fine-tuning spec does in its graph: bilinear x4 to 32x32,
`x * 2 - 1` (MobileNetV2's `preprocess_input` range, [-1, 1]) and the gray channel three times.
Batch-norm momentum is 0.9 instead of Keras' 0.999, so that the moving statistics settle within
this short pretraining (with 0.999 they would still be 60% their initial zeros and ones after
500 steps, and the saved statistics would describe no data). Seeded and deterministic.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SOURCE_CLASSES = 5  # pretrain on digits 0..4; the fine-tuning spec learns all ten


def preprocess(images: np.ndarray) -> np.ndarray:
    """8x8x1 in [0, 1] -> 32x32x3 in [-1, 1], as the spec's resize / to_unit_range / to_rgb layers do to pixels."""
    import keras

    # UpSampling2D(bilinear) by 4 is tf.image.resize to 32x32 with half-pixel centers, as specgen's `resize`
    # computes it (the spec rescales the uint8 pixels after resizing; the same up to float32 rounding).
    resized = keras.ops.convert_to_numpy(keras.layers.UpSampling2D(4, interpolation="bilinear")(images))
    return np.repeat(resized * 2.0 - 1.0, 3, axis=-1).astype(np.float32)


def build(epochs: int, data: Path) -> object:
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    tf.config.experimental.enable_op_determinism()
    keras.backend.clear_session()
    model = keras.applications.MobileNetV2(weights=None, input_shape=(32, 32, 3), alpha=0.35,
                                           classes=SOURCE_CLASSES, classifier_activation=None)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.momentum = 0.9  # saved in the config, so the imported spec says 0.9 too
    if epochs > 0:
        arrays = np.load(data)
        source = arrays["y_train"] < SOURCE_CLASSES
        model.compile(optimizer=keras.optimizers.Adam(1e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
        model.fit(preprocess(arrays["x_train"][source]), arrays["y_train"][source], batch_size=32,
                  epochs=epochs, shuffle=True, verbose=2)
        held_out = arrays["y_test"] < SOURCE_CLASSES
        _, accuracy = model.evaluate(preprocess(arrays["x_test"][held_out]), arrays["y_test"][held_out], verbose=0)
        print(f"source task (digits 0-4) test accuracy in Keras: {accuracy:.4f}")
    return model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20, help="pretraining epochs; 0 keeps Keras' seeded initial weights")
    parser.add_argument("-o", "--out", type=Path, default=HERE / "mobilenet_v2.keras")
    parser.add_argument("--data", type=Path, default=HERE.parent / "data" / "digits.npz")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    model = build(args.epochs, args.data)
    model.save(args.out)  # type: ignore[attr-defined]
    print(f"wrote {os.path.relpath(args.out)}: MobileNetV2 alpha 0.35, 32x32x3, {SOURCE_CLASSES} classes, {args.epochs} epochs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
