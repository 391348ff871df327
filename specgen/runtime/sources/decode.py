"""Decoding encoded images, for every reader that reads them: the header checked first, then decoded and resized.

`check_header` reads only an image's header (Pillow parses it lazily, without decoding pixels): its format
must be one TensorFlow decodes and its pixel count within the source's bound, so a small file that would
decode into gigabytes (a decompression bomb) is refused before any decoding (docs/security.md).
`decode_image` is the in-graph decode, the same ops Keras' `image_dataset_from_directory` runs: decode
(a GIF's first frame), then a bilinear resize to the size without cropping to the aspect ratio, giving
float32 values in [0, 255].

A GIF is bounded by every frame, although only its first frame is used (as Keras, expand_animations=False):
TensorFlow's decoder (giflib's DGifSlurp) reads every frame's pixels into memory before it keeps the first,
one byte a pixel, and its canvas is the largest frame's width by the largest frame's height, not the size
in the GIF's header that Pillow reports. So `_gif_size` walks the GIF's blocks (no LZW decoding) and the
bound counts the pixels of all frames together (`Header.pixels`), and the canvas on its own.
"""

from __future__ import annotations

import re
import struct
import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from specgen.runtime.sources.base import DataError

if TYPE_CHECKING:
    import tensorflow as tf

    from specgen.ir.model import Input

# Pillow's names for the formats tf.io.decode_image reads; MPO is a camera JPEG with extra pictures after it.
FORMATS = {"JPEG": "JPEG", "MPO": "JPEG", "PNG": "PNG", "BMP": "BMP", "GIF": "GIF"}
READ_BACK = 1024  # decoded indexes read back together
# Frames and extension blocks of one GIF: giflib keeps every one in memory (about 50 to 150 bytes each, even for
# an empty frame or a 1-byte block of a comment), which the pixel count does not see: 10 MB of 1-byte comment
# blocks took TensorFlow's decoder 280 MB. A frame takes 2 or 3 (its own, its timing extension's), so
# 100,000 is over 30,000 frames (20 minutes at 25 frames a second) and at most about 15 MB.
MAX_BLOCKS = 100_000
EXTENSIONS = (".bmp", ".gif", ".jpeg", ".jpg", ".png")  # the files Keras' image_dataset_from_directory reads


class OverBound(DataError):
    """An image whose header declares more pixels than the bound: never skipped (skip_bad), only refused."""


@dataclass(frozen=True)
class Header:
    format: str  # a value of FORMATS
    height: int  # of the decoded image (a GIF: TensorFlow's canvas)
    width: int
    frames: int = 1  # a GIF's frames; the others have one
    blocks: int = 0  # a GIF's frames and extension blocks, which its decoder keeps
    pixels: int = 0  # what the decoder holds: height x width, or a GIF's frames together; 0: height x width

    def __post_init__(self) -> None:
        if not self.pixels:
            object.__setattr__(self, "pixels", self.height * self.width)


def check_header(file: Path | IO[bytes], max_pixels: int) -> Header:
    """The image's format and size from its header, or DataError saying what is wrong with it.

    A file object must be seekable (a GIF's frames are read after Pillow's header parse); it is left open."""
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            # Pillow's own bomb check warns at 89 megapixels and raises at twice that; the bound is ours.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with _opened(file) as stream, Image.open(stream) as image:
                found, (width, height) = image.format or "unknown", image.size
                header = _gif_size(stream) if found == "GIF" else Header(FORMATS.get(found, found), height, width)
    except Image.DecompressionBombError:
        raise OverBound(f"the image has more than {2 * (Image.MAX_IMAGE_PIXELS or 0):,} pixels, over the bound of "
                        f"{max_pixels:,} (max_pixels)") from None
    except UnidentifiedImageError:
        raise DataError("is not an image (JPEG, PNG, BMP or GIF expected)") from None
    except OSError as exc:
        raise DataError(f"is damaged: its header does not read ({exc})") from None
    if found not in FORMATS:
        raise DataError(f"is a {found} image; JPEG, PNG, BMP and GIF are read (convert it to one of them)")
    _within(header, max_pixels)
    return header


def _within(header: Header, max_pixels: int) -> None:
    """OverBound unless what the decoder holds for the image is within `max_pixels` (and a GIF's MAX_BLOCKS)."""
    size = header.width * header.height
    if header.blocks > MAX_BLOCKS:
        raise OverBound(f"is a GIF of more than {MAX_BLOCKS:,} frames and extension blocks, which TensorFlow's "
                        "decoder keeps in memory; keep its first frame only (the one used)")
    if size > max_pixels:
        raise OverBound(f"is {header.width}x{header.height} ({size:,} pixels), over the bound of {max_pixels:,} "
                        "decoded pixels per image; raise max_pixels on the source if the image is trusted")
    if header.pixels > max_pixels:
        raise OverBound(f"is an animated GIF of {header.frames:,} frames up to {header.width}x{header.height} "
                        f"({header.pixels:,} pixels in all), over the bound of {max_pixels:,} decoded pixels per "
                        "image: TensorFlow's decoder reads every frame before it keeps the first (the one used); "
                        "keep its first frame only, or raise max_pixels on the source if the image is trusted")


def _opened(file: Path | IO[bytes]) -> AbstractContextManager[IO[bytes]]:
    """A binary stream of `file` for a `with`: a path opened here (and closed), a stream as given (left open)."""
    return open(file, "rb") if isinstance(file, Path) else nullcontext(file)


def channels_of(node_input: Input) -> int:
    """An image input's channels: its last dimension, which validate holds to 1 or 3 (kinds/sources)."""
    channels = node_input.shape[-1]
    assert isinstance(channels, int)  # never a named dynamic dimension (validate refuses it)
    return channels


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


def _gif_size(stream: IO[bytes]) -> Header:
    """A GIF's frames, extension blocks and TensorFlow's canvas, from its blocks (GIF89a: headers and sub-block
    lengths).

    Reads the headers and hops over each data sub-block without decoding, so the time is linear in the number
    of sub-blocks and the memory is the stream's buffer; it stops at the trailer, at the end of the file, at a
    block giflib would refuse (the frames before it are what giflib reads), and past MAX_BLOCKS."""
    stream.seek(0)
    screen = stream.read(13)  # signature, version, logical screen descriptor
    _skip_table(stream, screen[10] if len(screen) == 13 else 0)
    frames = blocks = pixels = width = height = 0
    while blocks <= MAX_BLOCKS:
        block = stream.read(1)
        if block == b"!":  # an extension: its label, then sub-blocks, each kept by giflib
            stream.read(1)
            blocks += 1 + _skip_blocks(stream, MAX_BLOCKS - blocks)
        elif block == b",":  # an image descriptor: left, top, width, height, flags
            descriptor = stream.read(9)
            if len(descriptor) < 9:
                break
            frame_width, frame_height = struct.unpack("<HH", descriptor[4:8])
            _skip_table(stream, descriptor[8])
            stream.read(1)  # LZW minimum code size
            _skip_blocks(stream)  # the pixels: decoded into the frame's raster, not kept as blocks
            frames, blocks, pixels = frames + 1, blocks + 1, pixels + frame_width * frame_height
            width, height = max(width, frame_width), max(height, frame_height)
        else:  # the trailer, the end of the file, or garbage
            break
    return Header("GIF", height, width, max(frames, 1), blocks, max(pixels, width * height, 1))


def _skip_table(stream: IO[bytes], flags: int) -> None:
    """Past a colour table, when `flags` (a screen's or a frame's) says one follows: 3 x 2^(size + 1) bytes."""
    if flags & 0x80:
        stream.seek(3 << ((flags & 7) + 1), 1)


def _skip_blocks(stream: IO[bytes], limit: int | None = None) -> int:
    """Past a run of data sub-blocks (a length byte, then that many bytes) and its empty terminator; the number
    of sub-blocks, counting stopped just past `limit`."""
    count = 0
    while (length := stream.read(1)) and length[0] and (limit is None or count <= limit):
        stream.seek(length[0], 1)
        count += 1
    return count
