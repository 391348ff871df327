"""Convert the 8x8 digits that ship inside scikit-learn into examples/data/digits.npz.

Run once (`python examples/data/make_digits.py`); the .npz is committed so that
nothing is downloaded at run time. 1,797 images of 8x8 pixels, values 0-16,
scaled to [0, 1]; a fixed shuffle (seed 0) puts 1,437 in train and 360 in test.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits


def main() -> None:
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[..., np.newaxis]  # [N, 8, 8, 1]
    labels = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(labels))
    train, test = order[:1437], order[1437:]
    target = Path(__file__).with_name("digits.npz")
    np.savez_compressed(target, x_train=images[train], y_train=labels[train],
                        x_test=images[test], y_test=labels[test])
    print(f"wrote {target}: {len(train)} train, {len(test)} test images")


if __name__ == "__main__":
    main()
