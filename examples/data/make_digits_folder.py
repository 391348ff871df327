"""Write the bundled digits (examples/data/digits.npz) as a class-folder tree of 8x8 grayscale PNG files.

`python examples/data/make_digits_folder.py [OUT]` writes OUT/train/<digit>/<n>.png and OUT/test/<digit>/<n>.png
(default OUT: examples/data/digits_folder, which git ignores), the layout the `images` source and Keras'
image_dataset_from_directory read: 1,437 training and 360 test images, pixel values 0-1 stored as 0-255;
and OUT/test.npz, the same test pixels as a client sends them to `specgen infer` (`image`: uint8 [360, 8, 8, 1],
`label`: int64 [360]).
Generated where it is used (the tests, CI, docs/finetune.md), never committed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent


def write(out: Path, limit: int | None = None) -> dict[str, int]:
    """Write the tree (the first `limit` images of each split, when given); images written per split."""
    digits = np.load(HERE / "digits.npz")
    counts = {}
    for split, (x, y) in {"train": ("x_train", "y_train"), "test": ("x_test", "y_test")}.items():
        images, labels = digits[x][:limit], digits[y][:limit]
        pixels = np.round(images[..., 0] * 255).astype(np.uint8)  # [N, 8, 8]
        for n, (image, label) in enumerate(zip(pixels, labels, strict=True)):
            folder = out / split / str(int(label))
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(image).save(folder / f"{n:04d}.png")
        counts[split] = len(labels)
        if split == "test":
            np.savez(out / "test.npz", image=pixels[..., None], label=labels.astype(np.int64))
    return counts


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "digits_folder"
    counts = write(out)
    print(f"wrote {os.path.relpath(out)}: {counts['train']} train, {counts['test']} test PNG images")


if __name__ == "__main__":
    main()
