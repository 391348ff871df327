"""The `images` reader: class folders listed and checked up front, then the images streamed and decoded.

Before the first step every file's header is read (format, and the pixel bound: runtime/sources/decode.py)
and every image is decoded once in a tf.data pass that keeps nothing, so a bad image is named before
training rather than mid-run, and the example count is exact (a skipped image changes it). Training
then reads the files again, in an order shuffled with train.seed (file names only: decoded images
are never all held), decoding in parallel.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specgen.runtime.sources.base import DataError, Source
from specgen.runtime.sources.context import SourceContext
from specgen.runtime.sources.decode import EXTENSIONS, as_input, check_header, decode_error, decode_image, undecodable

if TYPE_CHECKING:
    import tensorflow as tf

SHOWN = 5  # skipped or ignored files named in a message


def read(context: SourceContext) -> Source:
    import tensorflow as tf

    spec = _spec(context, context.stage)
    if not context.path.is_dir():
        raise context.fail((context.kind,), "no such folder; expected a folder with one subfolder of images per class, "
                           "relative to the spec's folder")
    classes = _classes(context, spec)
    files, labels = _files(context, classes)
    files, labels = _good(context, spec, files, labels, _channels(context))
    context.enough(len(files))
    names = tf.constant([str(f) for f in files])
    paths = tf.data.Dataset.from_tensor_slices((names, tf.constant(labels, tf.int64)))
    if context.stage == "train" and context.training.train is not None:  # the file names, not the images
        # One seeded order for every epoch (training's buffer reshuffles the examples each epoch): a reshuffling
        # shuffle nested under that reshuffling one does not restore exactly from a saved iterator, so a kill -9
        # and --resume would not end where an uninterrupted run ends (tests/test_source_registry.py checks this).
        paths = paths.shuffle(len(files), seed=context.training.train.seed, reshuffle_each_iteration=False)
    return Source(paths.map(_example(context, spec), num_parallel_calls=tf.data.AUTOTUNE), len(files))


def _spec(context: SourceContext, stage: str) -> Any:
    """The stage's spec model (its image_size, classes, skip_bad and max_pixels are not in the IR)."""
    return getattr(context.loaded.spec.data, stage)


def _channels(context: SourceContext) -> int:
    (name,) = context.source.features  # the spec checks refuse more than one image input (kinds/sources/images.py)
    return int(next(i for i in context.ir.inputs if i.name == name).shape[-1])


def _example(context: SourceContext, spec: Any) -> Any:
    import tensorflow as tf

    (image,) = context.source.features
    dtype = next(i for i in context.ir.inputs if i.name == image).dtype
    channels, size = _channels(context), tuple(spec.image_size)
    label = next(iter(context.source.labels), None)

    def example(path: tf.Tensor, class_id: tf.Tensor) -> tuple[dict[str, tf.Tensor], dict[str, tf.Tensor]]:
        pixels = decode_image(tf.io.read_file(path), size, channels)
        return {image: as_input(pixels, dtype)}, ({label: class_id} if label else {})

    return example


def _subfolders(folder: Path) -> list[str]:
    return sorted(entry.name for entry in os.scandir(folder) if entry.is_dir() and not entry.name.startswith("."))


def _classes(context: SourceContext, spec: Any) -> list[str]:
    """Class names in id order: `classes`, else train's (eval must not add one), else the sorted folders."""
    found = _subfolders(context.path)
    train = _spec(context, "train")
    if spec.classes is not None:
        classes = list(spec.classes)
    elif context.stage == "eval" and hasattr(train, "image_size"):  # an images train source sets the ids
        train_path = context.training.data["train"].path
        classes = list(train.classes) if train.classes else _subfolders(train_path) if train_path.is_dir() else found
        extra = [c for c in found if c not in classes]
        if extra:
            raise context.fail((context.kind,), f"class folder '{extra[0]}' is not a class of data.train "
                               f"({', '.join(classes)}); eval classes must be train's (or list them in `classes`)")
    else:
        classes = found
    if not classes:
        raise context.fail((context.kind,), "the folder has no subfolders; expected one subfolder of images per class")
    missing = [c for c in classes if c not in found and not (context.stage == "eval" and spec.classes is None)]
    if missing:
        raise context.fail(("classes",), f"class '{missing[0]}' has no folder {context.path / missing[0]}")
    wanted = context.expected()
    label = next(iter(context.source.labels), None)
    bound = wanted[label].bound if label in wanted else None
    if bound is not None and len(classes) > bound:
        shown = ", ".join(classes[:SHOWN]) + (", ..." if len(classes) > SHOWN else "")
        raise context.fail((context.kind,), f"{len(classes)} classes ({shown}) but "
                           f"{wanted[label].why}; the output needs one unit per class")
    return classes


def _files(context: SourceContext, classes: list[str]) -> tuple[list[Path], list[int]]:
    """Every image file (sorted, subfolders included, as Keras walks them) and its class id."""
    files: list[Path] = []
    labels: list[int] = []
    ignored: list[str] = []
    for class_id, name in enumerate(classes):
        folder = context.path / name
        if not folder.is_dir():
            continue  # an eval folder without some of train's classes
        found = sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))
        images = [p for p in found if p.suffix.lower() in EXTENSIONS]
        ignored += [str(p.relative_to(context.path)) for p in found if p.suffix.lower() not in EXTENSIONS]
        if not images:
            raise context.fail((context.kind,), f"class folder '{name}' holds no images (files ending in "
                               f"{', '.join(EXTENSIONS)}); add images or remove the folder")
        files += images
        labels += [class_id] * len(images)
    if ignored:  # said, not silent: a stray README or .txt beside the images is common and harmless
        print(f"data.{context.stage}: ignored {len(ignored)} files that are not images by their extension: "
              f"{', '.join(ignored[:SHOWN])}{', ...' if len(ignored) > SHOWN else ''}")
    return files, labels


def _good(context: SourceContext, spec: Any, files: list[Path], labels: list[int],
          channels: int) -> tuple[list[Path], list[int]]:
    """The files whose header passes and that decode; the others are an error, or skipped with skip_bad."""
    bad: dict[int, str] = {}
    for index, path in enumerate(files):
        try:
            check_header(path, spec.max_pixels)
        except DataError as exc:
            if spec.skip_bad and "max_pixels" not in str(exc):  # an image over the bound is never skipped
                bad[index] = str(exc)
                continue
            raise context.fail((context.kind,), f"{path.relative_to(context.path)} {exc}") from None
    for index in _undecodable([f for i, f in enumerate(files) if i not in bad], channels):
        original = [i for i in range(len(files)) if i not in bad][index]
        why = decode_error(files[original].read_bytes(), channels) or "does not decode"
        if not spec.skip_bad:
            raise context.fail((context.kind,), f"{files[original].relative_to(context.path)} does not decode: "
                               f"{why}; replace or remove the file (or set skip_bad: true on the source)")
        bad[original] = why
    if bad:
        shown = [str(files[i].relative_to(context.path)) for i in sorted(bad)[:SHOWN]]
        print(f"data.{context.stage}: skipped {len(bad)} of {len(files)} images that do not decode (skip_bad): "
              f"{', '.join(shown)}{', ...' if len(bad) > SHOWN else ''}")
    keep = [i for i in range(len(files)) if i not in bad]
    return [files[i] for i in keep], [labels[i] for i in keep]


def _undecodable(files: list[Path], channels: int) -> list[int]:
    """Indexes of the files that do not decode (decode.undecodable, reading each file)."""
    import tensorflow as tf

    return undecodable([str(f) for f in files], channels, read=tf.io.read_file)
