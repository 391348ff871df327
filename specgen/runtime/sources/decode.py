"""Decoding encoded images, for every reader that reads them: the header checked first, then decoded and resized.

`check_header` reads only an image's header (Pillow parses it lazily, without decoding pixels): its format
must be one TensorFlow decodes and its pixel count within the source's bound, so a small file that would
decode into gigabytes (a decompression bomb) is refused before any decoding (docs/security.md).
`decode_image` is the in-graph decode, the same ops Keras' `image_dataset_from_directory` runs: decode
(a GIF's first frame), then a bilinear resize to the size without cropping to the aspect ratio, giving
float32 values in [0, 255].
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from specgen.runtime.sources.base import DataError

if TYPE_CHECKING:
    import tensorflow as tf

# Pillow's names for the formats tf.io.decode_image reads; MPO is a camera JPEG with extra pictures after it.
FORMATS = {"JPEG": "JPEG", "MPO": "JPEG", "PNG": "PNG", "BMP": "BMP", "GIF": "GIF"}
READ_BACK = 1024  # decoded indexes read back together
EXTENSIONS = (".bmp", ".gif", ".jpeg", ".jpg", ".png")  # the files Keras' image_dataset_from_directory reads


class OverBound(DataError):
    """An image whose header declares more pixels than the bound: never skipped (skip_bad), only refused."""


@dataclass(frozen=True)
class Header:
    format: str  # a value of FORMATS
    height: int
    width: int


def check_header(file: Path | IO[bytes], max_pixels: int) -> Header:
    """The image's format and size from its header, or DataError saying what is wrong with it."""
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            # Pillow's own bomb check warns at 89 megapixels and raises at twice that; the bound is ours.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(file) as image:
                found, (width, height) = image.format or "unknown", image.size
    except Image.DecompressionBombError:
        raise OverBound(f"the image has more than {2 * (Image.MAX_IMAGE_PIXELS or 0):,} pixels, over the bound of "
                        f"{max_pixels:,} (max_pixels)") from None
    except UnidentifiedImageError:
        raise DataError("is not an image (JPEG, PNG, BMP or GIF expected)") from None
    except OSError as exc:
        raise DataError(f"is damaged: its header does not read ({exc})") from None
    if found not in FORMATS:
        raise DataError(f"is a {found} image; JPEG, PNG, BMP and GIF are read (convert it to one of them)")
    if width * height > max_pixels:
        raise OverBound(f"is {width}x{height} ({width * height:,} pixels), over the bound of {max_pixels:,} decoded "
                        "pixels per image; raise max_pixels on the source if the image is trusted")
    return Header(FORMATS[found], height, width)


def decode_image(encoded: tf.Tensor, size: Sequence[int], channels: int) -> tf.Tensor:
    """float32 [height, width, channels] in [0, 255] from one encoded image, as Keras' image_dataset_from_directory.

    Call `check_header` on the bytes first (a reader does it before the stream starts): the decode
    allocates whatever the header declares.
    """
    import tensorflow as tf

    image = _decode(encoded, channels)
    image = tf.image.resize(image, list(size), method="bilinear")
    image.set_shape([size[0], size[1], channels])
    return image


def as_input(pixels: tf.Tensor, dtype: str) -> tf.Tensor:
    """Decoded pixels as an input of `dtype` takes them: floats as they are, integers (uint8: raw pixels)
    rounded and saturated, as they were stored."""
    import tensorflow as tf

    if not dtype.startswith("float"):
        pixels = tf.saturate_cast(tf.round(pixels), dtype)
    return tf.cast(pixels, dtype)


def undecodable(encoded: Sequence[bytes] | Sequence[str] | tf.Tensor, channels: int,
                read: Callable[[tf.Tensor], tf.Tensor] | None = None) -> list[int]:
    """Indexes of the encoded images (a list of bytes or a string tensor) that do not decode: one parallel pass
    that keeps only each good one's index, read back in batches (one call per index costs milliseconds).
    `read`: each string's bytes (the images source passes file paths and tf.io.read_file)."""
    import numpy as np
    import tensorflow as tf

    def decodes(index: tf.Tensor, image: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        # The pixels are returned (one, summed) because tf.data prunes a stateless decode whose output nothing
        # reads, control dependencies included; a bad image raises instead, and ignore_errors drops its index.
        return index, tf.reduce_sum(decode_image(image if read is None else read(image), (1, 1), channels))

    count = len(encoded)
    if not count:
        return []
    images = tf.data.Dataset.from_tensor_slices((tf.range(count), tf.convert_to_tensor(encoded, tf.string)))
    good = np.zeros(count, bool)
    decoded = images.map(decodes, num_parallel_calls=tf.data.AUTOTUNE).ignore_errors()
    for indexes, _ in decoded.batch(READ_BACK).as_numpy_iterator():
        good[indexes] = True
    return [int(i) for i in np.flatnonzero(~good)]


def decode_error(encoded: bytes, channels: int) -> str | None:
    """TensorFlow's reason an image does not decode (its first line), or None when it decodes."""
    import tensorflow as tf

    try:
        _decode(tf.constant(encoded), channels)
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as exc:
        # Eager errors wrap the kernel's reason: "{{function_node ...}} <reason> [Op:DecodeImage] name: ".
        reason = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", exc.message.splitlines()[0])
        return re.sub(r"\s*\[Op:[^\]]*\].*$", "", reason)
    return None


def _decode(encoded: tf.Tensor, channels: int) -> tf.Tensor:
    """uint8 [h, w, channels]: tf.io.decode_image as Keras calls it, except that GIF and BMP, which TensorFlow
    decodes to RGB only, become grayscale through tf.image.rgb_to_grayscale where Keras would fail."""
    import tensorflow as tf

    def decode(wanted: int) -> tf.Tensor:
        return tf.io.decode_image(encoded, channels=wanted, expand_animations=False)

    if channels == 3:
        return decode(3)
    rgb_only = tf.logical_or(tf.equal(tf.strings.substr(encoded, 0, 3), b"GIF"),
                             tf.equal(tf.strings.substr(encoded, 0, 2), b"BM"))
    return tf.cond(rgb_only, lambda: tf.image.rgb_to_grayscale(decode(3)), lambda: decode(1))
