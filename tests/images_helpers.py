"""Image folders written at test time for tests/test_images_*.py: real PNG/JPEG/BMP/GIF files, and broken ones."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image


def encoded(pixels: np.ndarray, fmt: str) -> bytes:
    """`pixels` (uint8 [h, w] or [h, w, 3]) encoded as `fmt` (a Pillow format name)."""
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, fmt)
    return buffer.getvalue()


def pixels(seed: int, height: int, width: int, channels: int = 1) -> np.ndarray:
    shape = (height, width) if channels == 1 else (height, width, channels)
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    """Files under `root` by relative path ("cat/1.png" -> bytes)."""
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def spec_text(train: str, eval_: str | None = None, shape: str = "[4, 4, 1]", batch: int = 2) -> str:
    """A one-layer classifier over 3 classes reading the given sources."""
    return f"""\
specgen: 1
name: folders
inputs: {{image: {{shape: {shape}}}}}
outputs: {{logits: out}}
layers:
  - {{name: flat, op: flatten, input: image}}
  - {{name: out, op: dense, units: 3}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers: {{all: {{variables: "*", kind: sgd, learning_rate: 0.1}}}}
train: {{batch_size: {batch}, seed: 3}}
data:
  train: {train}
""" + (f"  eval: {eval_}\n" if eval_ else "")
