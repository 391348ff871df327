"""The augmentation registry: one module per kind of `data.train.augment` entry.

Each module defines its spec model (one field, named after the kind) and a `KINDS` tuple holding its
`AugmentDef`; modules are found by listing the package (kinds/collect.py). Derived here: `REGISTRY`,
`Augment` (the union one list entry parses as), the validate-time checks of a source's list (`refusals`),
the image size after the list (`output_size`) and docs/spec.md's table. The runtime, which imports
TensorFlow and Keras, is specgen/runtime/augment/. docs/extending.md says what a new one needs;
tests/test_augment_registry.py names what one lacks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specgen.fields.unions import by_key, by_shape
from specgen.kinds.augment.base import AugmentDef, Size
from specgen.kinds.collect import collect

__all__ = ["REGISTRY", "SCHEMA_ORDER", "Augment", "AugmentDef", "as_fed", "at_eval", "describe", "image_inputs",
           "kind_of", "markdown", "output_size", "refusals"]

# The order of the list (and of the schema's union); later kinds follow alphabetically.
SCHEMA_ORDER = ("random_flip", "random_crop", "random_rotation", "random_zoom", "random_translation",
                "random_brightness", "random_contrast", "mixup", "cutmix")

REGISTRY: dict[str, AugmentDef] = collect(__name__, __path__, SCHEMA_ORDER)

Augment = by_shape(by_key(*REGISTRY), "an augmentation: a mapping with exactly one of the keys "
                   + ", ".join(f"'{k}'" for k in REGISTRY), **{k: d.spec for k, d in REGISTRY.items()})

# A refusal: where it points inside the source's entry (after ("data", stage)), and its message.
Refusal = tuple[tuple[str | int, ...], str]


def kind_of(item: Any) -> AugmentDef:
    """The kind of a validated entry (an instance of one registered spec model)."""
    return next(d for d in REGISTRY.values() if isinstance(item, d.spec))


def describe(item: Any) -> str:
    """One line for `specgen report` and `specgen data`."""
    kind = kind_of(item)
    return kind.describe(kind.value(item))


def image_inputs(features: Mapping[str, Any], inputs: Mapping[str, Any]) -> list[str]:
    """The inputs a source feeds that are images: [height, width, channels]."""
    return [name for name in features if len(getattr(inputs.get(name), "shape", ())) == 3]


def output_size(items: Sequence[Any] | None, size: Size) -> Size:
    """The image's [height, width] after the list (random_crop sets it)."""
    for item in items or ():
        kind = kind_of(item)
        size = kind.size(kind.value(item), size)
    return size


def at_eval(items: Sequence[Any] | None) -> list[Any]:
    """The entries of data.train.augment that still act on eval (and export) examples: those whose Keras
    layer does something at inference (random_crop's centered window resized to its size)."""
    return [item for item in items or () if kind_of(item).inference is not None]


def as_fed(source: Any, stage: str, train: Any) -> Any:
    """`source` as its kind's size checks should see it: an eval source carries train's entries that act at
    eval (its images reach the model at the crop's size, whatever size the source decodes them at)."""
    crops = at_eval(getattr(train, "augment", None)) if stage == "eval" else []
    return source.model_copy(update={"augment": crops}) if crops and hasattr(source, "augment") else source


def refusals(source: Any, inputs: Mapping[str, Any], stage: str) -> list[Refusal]:
    """What validate refuses in a source's `augment` (an image size it knows comes from `image_size`)."""
    items = getattr(source, "augment", None)
    if not items:
        return []
    if stage != "train":
        return [(("augment",), f"augmentation runs on training batches only; received data.{stage}.augment; "
                 "expected it under data.train")]
    images = image_inputs(source.features, inputs)
    if len(images) != 1:
        fed = ", ".join(f"'{n}' {list(getattr(inputs.get(n), 'shape', []))}" for n in source.features) or "none"
        return [(("augment",), f"augmentation needs exactly one image input ([height, width, channels]) among "
                 f"the features; received {len(images)} (features: {fed})")]
    size = getattr(source, "image_size", None)
    return [] if size is None else _sizes(items, (size[0], size[1]))


def _sizes(items: Sequence[Any], size: Size) -> list[Refusal]:
    for i, item in enumerate(items):
        kind = kind_of(item)
        if (why := kind.refuse(kind.value(item), size)) is not None:
            return [(("augment", i, kind.name), why)]
        size = kind.size(kind.value(item), size)
    return []


def markdown() -> str:
    """docs/spec.md's table of the augmentations (tests/test_augment_registry.py keeps it current)."""
    rows = ["| augmentation | value |", "|---|---|"] + [f"| `{d.name}` | {d.doc} |" for d in REGISTRY.values()]
    return "\n".join(rows) + "\n"
