"""`images`: one subfolder per class of encoded images (JPEG, PNG, BMP, GIF), decoded and resized as streamed.

The image feeds the model's one image input and the class id (the position of the folder's name in the
sorted folder names, or in `classes`) feeds the label the loss reads. `features` and `labels` default to
those (`complete`, run once the spec is parsed), so the usual spec names neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field

from specgen.fields.base import FilePath, Flag, Identifier, PositiveInt
from specgen.kinds.augment import output_size
from specgen.kinds.sources.base import Refusal, SourceDef, SourceSpec, file_source

IMAGE, CLASS = "image", "class"  # what a feature and a label of this kind name
CHANNELS = (1, 3)  # grayscale or RGB, as Keras' image_dataset_from_directory decodes
MAX_PIXELS = 40_000_000  # decoded pixels per image (docs/security.md: decompression bombs)
ClassName = Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f/\\]+$")]


class ImagesSource(SourceSpec):
    images: FilePath = Field(description="A folder with one subfolder of images per class.")
    image_size: Annotated[list[PositiveInt], Field(min_length=2, max_length=2)] = Field(
        description="[height, width] every image is resized to (bilinear, as Keras).")
    classes: Annotated[list[ClassName], Field(min_length=1)] | None = Field(
        None, description="Subfolder names in class-id order; default: the sorted subfolder names.")
    features: dict[Identifier, Literal["image"]] = Field(
        default_factory=dict, description="Input name -> image; default: the model's one input.")
    labels: dict[Identifier, Literal["class"]] = Field(
        default_factory=dict, description="Label name -> class; default: the label the loss reads.")
    skip_bad: Flag = Field(False, description="Skip images that do not decode (and say which) instead of stopping.")
    max_pixels: PositiveInt = Field(MAX_PIXELS, description="Largest decoded image (height x width) accepted.")


def complete(source: ImagesSource, inputs: Mapping[str, Any], labels: list[str]) -> ImagesSource:
    """The defaults that need the rest of the spec: the one input, the one label the loss reads."""
    update: dict[str, Any] = {}
    if not source.features and len(inputs) == 1:
        update["features"] = {next(iter(inputs)): IMAGE}
    if not source.labels and len(labels) == 1:
        update["labels"] = {labels[0]: CLASS}
    return source.model_copy(update=update) if update else source


def refuse(source: ImagesSource, inputs: Mapping[str, Any]) -> list[Refusal]:
    """The image input must be [height, width, 1 or 3] at `image_size` (or dynamic there); a class is listed once."""
    problems: list[Refusal] = _repeated_classes(source.classes or [])
    if len(source.features) > 1:
        problems.append((("features",), f"an images source feeds one input; received {len(source.features)} "
                         f"({', '.join(source.features)})"))
    for name in source.features:
        shape = getattr(inputs.get(name), "shape", None)
        if shape is None:
            continue  # not an input: reported by the data checks
        size = [d if isinstance(d, int) else None for d in shape[:2]]
        fed = output_size(source.augment, (source.image_size[0], source.image_size[1]))  # a random_crop sets it
        if len(shape) != 3 or shape[2] not in CHANNELS or any(d not in (None, s) for d, s in
                                                             zip(size, fed, strict=True)):
            after = "" if list(fed) == source.image_size else f" and its augment (a crop to {list(fed)})"
            problems.append((("image_size",), f"input '{name}' has shape {list(shape)}; an images source with "
                             f"image_size {source.image_size}{after} feeds [{fed[0]}, {fed[1]}, "
                             "1 or 3] (channels: 1 grayscale, 3 RGB)"))
    return problems


def _repeated_classes(classes: list[str]) -> list[Refusal]:
    """A class folder listed twice would feed each of its images twice, under two class ids: refused at the second."""
    first: dict[str, int] = {}
    problems: list[Refusal] = []
    for index, name in enumerate(classes):
        if name in first:
            problems.append((("classes", index), f"class '{name}' is listed twice (classes[{first[name]}] and "
                             f"classes[{index}]); each class folder is one class id: list it once"))
        first.setdefault(name, index)
    return problems


KINDS = (SourceDef(
    name="images",
    spec=ImagesSource,
    doc="`images: <folder>` (one subfolder per class), `image_size: [<height>, <width>]` (required), "
        "`classes: [<folder>, ...]` (default: sorted subfolder names), `features: {<input name>: image}` "
        "(default: the one input), `labels: {<label name>: class}` (default: the label the loss reads), "
        f"`skip_bad` (default false), `max_pixels` (default {MAX_PIXELS:,})",
    expects="a folder with one subfolder of images per class",
    example={"images": "photos", "image_size": [8, 8], "features": {"x": "image"}, "labels": {"label": "class"}},
    reader="specgen.runtime.sources.images.read",
    resolve=file_source("images"),
    refuse=refuse,
    complete=complete,
    resized=lambda source: ("image_size", {name: (source.image_size, ("image_size",)) for name in source.features}),
),)
