"""What an augmentation kind declares: `AugmentDef`, and the argument models several kinds share.

An augmentation is one module of this package (specgen/kinds/augment/<name>.py) with
`KINDS = (AugmentDef(...),)`. Its spec form is a one-key mapping, `{<name>: <value>}`, in `data.train.augment`.
Each is the Keras 3 preprocessing layer of the same name (keras.layers.RandomFlip, ...): the def names that
layer and its arguments; specgen/runtime/augment/ builds it and draws its randomness statelessly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from specgen.fields.base import SpecModel, bounds
from specgen.fields.unions import by_shape, scalar_or_mapping

Size = tuple[int, int]  # [height, width]
# A fraction as Keras' factors take it: a scalar x means the range [-x, x] (rotation: of a full turn).
Fraction = Annotated[float, *bounds(float, ge=0, le=1)]
FillMode = Literal["reflect", "wrap", "constant", "nearest"]


class ValueRange(SpecModel):
    """The pixel range brightness and contrast keep images in (Keras' default: 0..255)."""

    value_range: Annotated[list[Annotated[float, *bounds(float)]], Field(min_length=2, max_length=2)] = Field(
        [0.0, 255.0], description="[low, high] of the pixel values (Keras' default [0, 255]).")


@dataclass(frozen=True)
class AugmentDef:
    """One augmentation kind: its spec model and the Keras layer it is."""

    name: str  # the spec key, e.g. random_flip
    spec: type  # its pydantic model: one field, named `name`
    doc: str  # its value, one cell of docs/spec.md's table (kinds/augment.markdown())
    example: Any  # a valid value: tests/test_augment_registry.py parses `{name: example}`
    # (the value of its spec key) -> (keras.layers class name, its keyword arguments)
    keras: Callable[[Any], tuple[str, dict[str, Any]]]
    # (the value) -> one line for `specgen report` and `specgen data`
    describe: Callable[[Any], str]
    # (the value, the image's [height, width] before it) -> [height, width] after it
    size: Callable[[Any, Size], Size] = lambda value, size: size
    # (the value, the image's [height, width] before it) -> why it cannot run on that image, or None
    refuse: Callable[[Any, Size], str | None] = lambda value, size: None
    mixes_labels: bool = False  # mixup, cutmix: labels become mixed one-hot (soft) labels
    pad: Callable[[Any], int] = lambda value: 0  # zero padding on each side before the Keras layer runs
    # (the value) -> the Keras layer that stands for the entry on eval (and export) examples, as Keras defines
    # the layer's inference; None: it does nothing there, as Keras' random layers do at training=False
    inference: Callable[[Any], tuple[str, dict[str, Any]]] | None = None

    def value(self, item: Any) -> Any:
        """The value of a validated `{name: value}` entry."""
        return getattr(item, self.name)


def factor_or(model: type, doc: str) -> Any:
    """A value that is either the layer's main factor (a number) or a mapping of its arguments."""
    return Annotated[by_shape(scalar_or_mapping, doc, scalar=Fraction, mapping=model), Field(description=doc)]


def args(value: Any, model: type) -> Any:
    """The arguments model of a factor-or-mapping value (a number is `{factor: number}`)."""
    return value if isinstance(value, model) else model(factor=value)


def plus_minus(x: float) -> str:
    return f"±{x:g}"
