"""A source's examples against the sizes the model takes on its named axes, before the first update.

A named dimension (`image: {shape: [h, w, 1]}`) is sized by the data. `valid` windows shrink an axis, so the model
needs a smallest size there (a 5-tap conv of dilation 2 needs h >= 9), and a positional_embedding takes at most its
max_length steps. runtime/lengths.py computes both (`minima`, `bounds`: the numbers `specgen export` stamps and
`specgen infer`/`serve` enforce); this module compares a source's sizes with them through the same functions
(`lengths.below`, `lengths.above`), so the three never disagree. Without it TensorFlow finds the shortfall inside
the first update (a long traceback, with the run folder already made) or, for the eval split, at the first
evaluation, after the updates, which were then lost with no checkpoint written.

Where the sizes come from, by source:
- in memory (npz; csv fills no named dimension): the arrays' shape, one size per file, checked whole (`from_arrays`);
- images, and a tfrecord image feature: the spec's `image_size` / `size`, every image resized to it; checked from
  the spec before a file is opened.
A random_crop of data.train sets the image's size at train and, through Keras' inference, at eval: the crop is what
is checked then (`fed`). No reader today feeds sizes that vary per example (csv columns and tfrecord number features
have no length of their own and refuse named dimensions); one that did would call `check` as it reads each example,
naming the file and record in `where`.

Every stage (train and eval) is read by runtime/data.py's read_stage before `specgen train` opens its run folder
(runtime/commands/session.py), so a refusal here leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from specgen.diagnostics import Diagnostic, SpecError
from specgen.kinds.augment import at_eval, image_inputs, output_size
from specgen.kinds.sources import kind_of
from specgen.runtime import lengths
from specgen.runtime.sources.base import source_text
from specgen.text import shape as shape_text

if TYPE_CHECKING:
    from specgen.ir.model import ModelIR
    from specgen.spec.load import LoadedSpec


class SourceContext(Protocol):
    """What the checks read of context.SourceContext, which calls them: named here, not imported, so the two
    modules do not import each other (tests/test_import_graph.py counts type-only imports too)."""

    loaded: LoadedSpec
    ir: ModelIR
    stage: str

    def fail(self, loc: tuple[str | int, ...], message: str) -> SpecError: ...

    def loc(self, name: str) -> tuple[str, str]: ...


def problem(ir: ModelIR, name: str, shape: tuple[int, ...]) -> tuple[str, bool] | None:
    """Why one example's shape (batch axis left out) for input `name` does not run (`8 along 'h', expected at
    least 9: layer 'c' (conv2d) needs at least 9`) and whether it is too small (else too large); None: it runs."""
    dims = next(i.shape[1:] for i in ir.inputs if i.name == name)
    if not any(isinstance(d, str) for d in dims):
        return None  # fixed sizes: the spec's shape rules (validate) and the source's shape check cover them
    minima = lengths.minima(ir)
    short = lengths.below(minima, dims, shape)
    if short is not None:
        return f"{shape[short[0]]} along '{short[1]}', {lengths.need_text(minima, short[1])}", True
    bounds = lengths.bounds(ir)
    long = lengths.above(bounds, dims, shape)
    if long is not None:
        return f"{shape[long[0]]} along '{long[1]}', {lengths.limit_text(bounds, long[1])}", False
    return None


def crops(context: SourceContext, name: str) -> list[Any]:
    """The augmentation entries that set input `name`'s height and width at this stage: data.train's for train; at
    eval, those whose Keras inference still acts (random_crop: the centered window resized to the crop)."""
    data = context.loaded.spec.data
    train = data.train if data is not None else None
    items = list(getattr(train, "augment", None) or ())
    if context.stage != "train":
        items = at_eval(items)
    features = train.features if train is not None else {}
    return items if items and name in image_inputs(features, context.loaded.spec.inputs) else []


def fed(context: SourceContext, name: str, shape: tuple[int, ...]) -> tuple[tuple[int, ...], str]:
    """The example shape the model sees for input `name` when the source holds `shape`, and how it got there."""
    items = crops(context, name)
    if not items or len(shape) != 3:
        return shape, ""
    size = output_size(items, (shape[0], shape[1]))
    if tuple(size) == shape[:2]:
        return shape, ""
    return (size[0], size[1], shape[2]), f", which data.train's augment crops to {shape_text(list(size))}"


EXAMPLES = ("feed larger examples", "feed shorter examples")  # what a refusal advises: too small, too large


def check(context: SourceContext, name: str, shape: tuple[int, ...], where: str,
          loc: tuple[str | int, ...] | None = None, advice: tuple[str, str] = EXAMPLES) -> None:
    """Refuse input `name`'s examples of `shape` (as the source holds them, batch axis left out) in one line,
    positioned at `loc` (default: the feature's key), when the model cannot run them. `where` says what holds that
    shape (`its examples are`, `image_size [4, 4] feeds`; a streaming reader: the file and record)."""
    seen, crop = fed(context, name, shape)
    found = problem(context.ir, name, seen)
    if found is None:
        return
    why, small = found
    if crop:  # the crop, not the data, sets the size the model sees
        advice = ("crop to a larger size", "crop to a smaller size")
    raise context.fail(loc or context.loc(name), f"'{name}' is {why} ({where} {shape_text(list(shape))}{crop}); "
                       f"the model cannot run these: {advice[0] if small else advice[1]}")


def resized(context: SourceContext, key: str, images: Mapping[str, tuple[Sequence[int], tuple[str | int, ...]]]) -> None:
    """Image inputs every image is resized to a size of the spec for (input -> [height, width] and the spec key that
    sets it, `key` as messages name it): the model's size is known before a file is opened, so it is checked then."""
    inputs = {i.name: i for i in context.ir.inputs}
    for name, (size, loc) in images.items():
        dims = inputs[name].shape if name in inputs else ()
        if len(dims) == 4 and isinstance(dims[3], int):  # [batch, height, width, channels] (validate: 1 or 3)
            shape = (size[0], size[1], dims[3])
            check(context, name, shape, f"{key} {list(size)} feeds", loc, (f"set a larger {key}", f"set a smaller {key}"))


class Declared:
    """A stage's source as `specgen validate` sees it: the spec and the IR, no file opened (SourceContext's `fail`
    and `loc`, so `resized` words its refusal as the reader at train does)."""

    def __init__(self, loaded: LoadedSpec, ir: ModelIR, stage: str):
        assert ir.training is not None
        self.loaded, self.ir, self.stage = loaded, ir, stage
        self.source = ir.training.data[stage]

    def fail(self, loc: tuple[str | int, ...], message: str) -> SpecError:
        return SpecError([self.loaded.diagnostic(("data", self.stage, *loc),
                                                 f"data.{self.stage} ({source_text(self.loaded, self.source)}): "
                                                 f"{message}")])

    def loc(self, name: str) -> tuple[str, str]:
        return ("features" if name in self.source.features else "labels", name)


def declared(loaded: LoadedSpec, ir: ModelIR) -> list[Diagnostic]:
    """Validate's share of this module: each stage's image sizes that the spec declares (images' `image_size`,
    a tfrecord image feature's `size`), against the model's smallest and largest sizes, so that `image_size: [2, 2]`
    under a 3x3 `valid` conv is refused by `specgen validate` and not first by `specgen train`."""
    data, found = loaded.spec.data, list[Diagnostic]()
    if data is None or ir.training is None:
        return found
    for stage in ("train", "eval"):
        source = getattr(data, stage, None)
        if source is None or stage not in ir.training.data:
            continue
        try:
            resized(Declared(loaded, ir, stage), *kind_of(source).resized(source))
        except SpecError as refused:
            found += refused.diagnostics
    return found
