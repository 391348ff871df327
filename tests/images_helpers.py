"""Image folders written at test time for tests/test_images_*.py: real PNG/JPEG/BMP/GIF files, and broken ones."""

from __future__ import annotations

import io
import struct
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


def gif(frames: list[tuple[int, int]], screen: tuple[int, int] = (1, 1), comment_blocks: int = 0) -> bytes:
    """A GIF written block by block (GIF89a), for the shapes Pillow does not write: every frame (width, height)
    at the top left, filled with one grey, whatever the logical screen (`screen`) declares; `comment_blocks`
    1-byte sub-blocks of a comment extension before the first frame."""
    head = b"GIF89a" + struct.pack("<HHBBB", *screen, 0xF7, 0, 0) + bytes(v for c in range(256) for v in (c, c, c))
    comment = b"!\xfe" + b"\x01c" * comment_blocks + b"\x00" if comment_blocks else b""
    body = b"".join(b"," + struct.pack("<HHHHB", 0, 0, width, height, 0) + _lzw(bytes([7 * k]) * (width * height))
                    for k, (width, height) in enumerate(frames))
    return head + comment + body + b";"


def _lzw(indexes: bytes) -> bytes:
    """Image data that is LZW without compressing: 8-bit literals, a clear code before every 254, so the code
    width stays 9 bits (valid for any decoder), in sub-blocks of up to 255 bytes."""
    codes = [code for i in range(0, len(indexes), 254) for code in (256, *indexes[i:i + 254])] + [257]
    packed = sum(code << (9 * i) for i, code in enumerate(codes)).to_bytes((9 * len(codes) + 7) // 8, "little")
    blocks = b"".join(bytes([len(packed[i:i + 255])]) + packed[i:i + 255] for i in range(0, len(packed), 255))
    return b"\x08" + blocks + b"\x00"


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
