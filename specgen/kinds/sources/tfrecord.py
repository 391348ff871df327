"""`tfrecord`: `tf.train.Example` records in one file, a glob or a list of shards, streamed (never read whole).

Shards are interleaved (`cycle_length` read at once), shuffled with `train.shuffle_buffer` and prefetched
with autotuning (runtime/sources/tfrecord.py, runtime/data.py); `compression` says how the files were written
(none, gzip, zlib); `cache` keeps the parsed examples after the first pass, in memory or in files at a path
(keyed to the shards and settings they come from: runtime/sources/tfrecord_cache.py). A feature is a number
array (`features: {x: key}`) or an encoded image (`features: {image: {key: image/encoded, decode: image,
size: [h, w]}}`), decoded and resized as the `images` source does (runtime/sources/decode.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

from pydantic import Field, StringConstraints, model_validator

from specgen.fields.base import FilePath, Flag, Identifier, PositiveInt, SpecModel
from specgen.fields.unions import ONE_ITEM, by_shape, scalar_or_list, scalar_or_mapping
from specgen.kinds.augment import output_size
from specgen.kinds.sources.base import Refusal, Resized, Resolved, SourceDef, SourceSpec, refs
from specgen.kinds.sources.images import CHANNELS, MAX_PIXELS

CYCLE_LENGTH = 4  # shards read at once by default: enough to mix shards, few open files
# A key inside the file. Not an Identifier: the usual keys have slashes (TF Object Detection's `image/encoded`,
# `image/class/label`). A key reaches only tf.io.parse_example and messages, never generated code; it is
# bounded and free of control characters so messages stay one line.
FeatureKey = Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f]+$")]


class ImageFeature(SpecModel):
    """A bytes feature holding one encoded image (JPEG, PNG, BMP, GIF), decoded and resized as `images` does."""

    key: FeatureKey = Field(description="The bytes feature's key (image/encoded).")
    decode: Literal["image"] = Field(description="`image`: the bytes are an encoded image.")
    size: Annotated[list[PositiveInt], Field(min_length=2, max_length=2)] = Field(
        description="[height, width] every image is resized to (bilinear, as Keras).")

    @model_validator(mode="before")
    @classmethod
    def _says_decode(cls, value: Any) -> Any:
        """`size` without `decode` reads as a number feature given a size: say what the mapping form is."""
        if isinstance(value, dict) and "decode" not in value:
            raise ValueError(f"a feature mapping is an encoded image and needs `decode: image`; received the keys "
                             f"{', '.join(map(str, value))}; a number-array feature is the key alone (x: some/key)")
        return value


# A feature: a key (a number array) or an encoded image, picked by the value's shape so an error names one form.
if TYPE_CHECKING:  # by_shape picks a branch at run time; statically, the union of its branches
    Feature: TypeAlias = str | ImageFeature
else:
    Feature = by_shape(scalar_or_mapping, "a feature key or {key: <feature key>, decode: image, size: [<height>, "
                       "<width>]}", scalar=FeatureKey, mapping=ImageFeature)


if TYPE_CHECKING:  # by_shape picks a branch at run time; statically, the union of its branches
    Files: TypeAlias = str | list[str]
else:  # by the value's shape, so that a wrong value is told about its own branch (`tfrecord: ""` was "expected a list")
    Files = by_shape(scalar_or_list, "a file, a glob or a list of them", ONE_ITEM, scalar=FilePath,
                     list=Annotated[list[FilePath], Field(min_length=1)])


class TfRecordSource(SourceSpec):
    tfrecord: Files = Field(
        description="A .tfrecord file, a glob of shards (train-*.tfrecord) or a list of files and globs.")
    features: dict[Identifier, Feature] = Field(
        description="Input name -> feature key (a number array), or {key, decode: image, size} (an encoded image).")
    labels: dict[Identifier, FeatureKey] = Field(default_factory=dict)
    cycle_length: PositiveInt = Field(CYCLE_LENGTH, description="Shards read at once (interleaved).")
    cache: FilePath | None = Field(None, description="`memory`, or a path: the parsed examples kept after the "
                                                     "first pass (a path writes TensorFlow cache files there, keyed "
                                                     "to the shards and settings they come from).")
    compression: Literal["none", "gzip", "zlib"] = Field(
        "none", description="How the files were written: none, gzip or zlib (TFRecordWriter's options).")
    skip_bad: Flag = Field(False, description="Skip records that do not parse or whose image does not decode (and "
                                              "say which) instead of stopping; a damaged shard still stops.")
    max_pixels: PositiveInt = Field(MAX_PIXELS, description="Largest decoded image (height x width) accepted.")


def entries(source: TfRecordSource) -> list[str]:
    """The declared files and globs, in order."""
    return [source.tfrecord] if isinstance(source.tfrecord, str) else list(source.tfrecord)


def images(source: Any) -> dict[str, ImageFeature]:
    """Input name -> its image feature, for the features that are encoded images."""
    return {name: f for name, f in source.features.items() if isinstance(f, ImageFeature)}


def resized(source: TfRecordSource) -> Resized:
    """The image features' `size`: every decoded image is resized to it."""
    return "size", {name: (f.size, ("features", name, "size")) for name, f in images(source).items()}


def resolve(source: TfRecordSource, folder: Path) -> Resolved:
    """The path messages show: the one entry, or the first of a list (the reader names each shard itself)."""
    keys = {name: f if isinstance(f, str) else f.key for name, f in source.features.items()}
    return Resolved(folder / entries(source)[0], refs(keys), refs(source.labels))


def refuse(source: TfRecordSource, inputs: Mapping[str, Any]) -> list[Refusal]:
    """An image feature's input must be [height, width, 1 or 3] at its `size` (after a random_crop), or dynamic."""
    problems: list[Refusal] = []
    for name, feature in images(source).items():
        shape = getattr(inputs.get(name), "shape", None)
        if shape is None:
            continue  # not an input: reported by the data checks
        fed = output_size(source.augment, (feature.size[0], feature.size[1]))
        size = [d if isinstance(d, int) else None for d in shape[:2]]
        if len(shape) != 3 or shape[2] not in CHANNELS or any(d not in (None, s) for d, s in
                                                             zip(size, fed, strict=True)):
            after = "" if list(fed) == feature.size else f" and the augment (a crop to {list(fed)})"
            problems.append((("features", name, "size"), f"input '{name}' has shape {list(shape)}; an image feature "
                             f"with size {feature.size}{after} feeds [{fed[0]}, {fed[1]}, 1 or 3] (channels: "
                             "1 grayscale, 3 RGB); make the input's shape and the size agree"))
    return problems


def describe(source: Any) -> list[str]:
    """`specgen data`'s lines for this kind's own keys."""
    cache = source.cache or "none"
    packed = "" if source.compression == "none" else f", {source.compression}-compressed"
    lines = [f"streamed, up to {source.cycle_length} shard(s) read at once (cycle_length), cache {cache}{packed}"]
    lines += [f"{name} <- {f.key}: decoded (JPEG, PNG, BMP, GIF's first frame), resized to {f.size} (bilinear), "
              f"at most {source.max_pixels:,} pixels" for name, f in images(source).items()]
    if source.skip_bad:
        lines.append("skip_bad: records that do not parse or whose image does not decode are skipped")
    return lines


KINDS = (SourceDef(
    name="tfrecord",
    spec=TfRecordSource,
    doc="`tfrecord: <path, glob or list>`, `features: {<input name>: <feature key> or {key: <feature key>, "
        "decode: image, size: [<height>, <width>]}}` (required), "
        f"`labels: {{<label name>: <feature key>}}` (default `{{}}`), `cycle_length` (default {CYCLE_LENGTH}), "
        f"`cache` (`memory` or a path; default none), `compression` (`none`, `gzip` or `zlib`; default none), "
        f"`skip_bad` (default false), `max_pixels` (default {MAX_PIXELS:,})",
    expects="a .tfrecord file, a glob of shards or a list of them",
    example={"tfrecord": "data.tfrecord", "features": {"x": "x"}, "labels": {"label": "y"}},
    reader="specgen.runtime.sources.tfrecord.read",
    resolve=resolve,
    refuse=refuse,
    describe=describe,
    resized=resized,
),)
