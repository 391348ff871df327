"""TFRecord shards written at test time (tests/test_tfrecord_*.py): `tf.train.Example`s of a float feature
`x` and an int64 label `y`, split into shards in order."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def example(row: np.ndarray, label: int) -> bytes:
    import tensorflow as tf

    return tf.train.Example(features=tf.train.Features(feature={
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=row.reshape(-1).tolist())),
        "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
    })).SerializeToString()


def write_shards(folder: Path, x: np.ndarray, y: np.ndarray, shards: int, stem: str = "train") -> list[Path]:
    """`shards` files <stem>-0000i.tfrecord in `folder`, example k in shard k * shards // len(x)."""
    import tensorflow as tf

    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{stem}-{i:05d}.tfrecord" for i in range(shards)]
    for i, path in enumerate(paths):
        with tf.io.TFRecordWriter(str(path)) as writer:
            for k in range(i * len(x) // shards, (i + 1) * len(x) // shards):
                writer.write(example(x[k], int(y[k])))
    return paths


def digits(count: int) -> tuple[np.ndarray, np.ndarray]:
    """The first `count` training digits of the bundled set (8x8x1 floats, labels 0-9)."""
    arrays = np.load(Path(__file__).resolve().parents[1] / "examples" / "data" / "digits.npz")
    return arrays["x_train"][:count].astype(np.float32), arrays["y_train"][:count].astype(np.int64)
