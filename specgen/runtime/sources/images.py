"""The `images` reader: class folders listed and checked up front, then the images streamed and decoded.

Before the first step every file's header is read (format, and the pixel bound: runtime/sources/decode.py)
and every image is decoded once in a tf.data pass that keeps nothing, so a bad image is named before
training rather than mid-run, and the example count is exact (a skipped image changes it). Training
then reads the files again, in an order shuffled with train.seed (file names only: decoded images
are never all held), decoding in parallel.

The folder confines what is read (docs/security.md, section 7). The listing never follows a link
blindly: a symbolic link (to a class folder, a subfolder or a file) whose target resolves outside the
folder is refused with one line naming it, before anything is decoded; links that stay inside are read
(files) or not walked (folders below a class folder, as Keras' `follow_links=False`). An entry named as
an image that is not a regular file (a named pipe, a device, a socket, a broken link) is refused, never
opened, because opening a pipe blocks and a device reads without end. TensorFlow is handed the real
path of each checked file, as bytes (a file name need not be UTF-8), and the header check opens that
path without following a link and checks that it opened a regular file: what specgen checks is what
it reads, except for a file replaced by someone else while specgen runs (TensorFlow's reads follow
whatever is there then).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from specgen.kinds.sources import kind_of
from specgen.paths import shown
from specgen.runtime.sources import sizes
from specgen.runtime.sources.base import MISSING, REGULAR, DataError, Source, file_kind
from specgen.runtime.sources.context import SourceContext
from specgen.runtime.sources.decode import (
    EXTENSIONS,
    OverBound,
    as_input,
    channels_of,
    check_header,
    decode_error,
    decode_image,
    undecodable,
)
from specgen.text import printable

if TYPE_CHECKING:
    import tensorflow as tf

SHOWN = 5  # skipped or ignored files named in a message
IRREGULAR = "an image must be a regular file (replace it with the image, or remove it)"
OUTSIDE = ("outside the folder; an images source reads only what lies inside its folder (copy what the link "
           "points to into the folder, or remove the link)")


class Unopened(DataError):
    """A listed file that cannot be opened as the regular file it was: refused, never skipped (skip_bad skips
    images that do not decode, and specgen could not look at this one)."""


@dataclass(frozen=True)
class Image:
    """One image file: its name under the folder (for messages) and the real path read."""

    name: str  # `<class folder>/.../<file>` as listed, undecodable bytes as surrogates (os.fsdecode)
    path: str  # absolute, links resolved: the file checked, and the one TensorFlow reads


def read(context: SourceContext) -> Source:
    import tensorflow as tf

    spec = _spec(context, context.stage)
    sizes.resized(context, *kind_of(spec).resized(spec))
    root = _root(context)
    classes = _classes(context, spec)
    # Each class folder's own problems first (an empty one, a link out of the folder): a class count that misfits
    # the output may be their doing, and the count's message would point at the output instead.
    files, labels = _files(context, root, classes)
    _class_count(context, classes)
    files, labels = _good(context, spec, files, labels, _channels(context))
    context.enough(len(files))
    names = tf.constant([os.fsencode(f.path) for f in files])  # bytes: TensorFlow would encode a str as UTF-8
    paths = tf.data.Dataset.from_tensor_slices((names, tf.constant(labels, tf.int64)))
    if context.stage == "train" and context.training.train is not None:  # the file names, not the images
        # One seeded order for every epoch (training's buffer reshuffles the examples each epoch): a reshuffling
        # shuffle nested under that reshuffling one does not restore exactly from a saved iterator, so a kill -9
        # and --resume would not end where an uninterrupted run ends (tests/test_source_registry.py checks this).
        paths = paths.shuffle(len(files), seed=context.training.train.seed, reshuffle_each_iteration=False)
    counts = np.bincount(np.asarray(labels, np.int64), minlength=len(classes))
    # The class names as `specgen data` prints them: a folder name may hold any character but `/`.
    shown_classes = tuple((printable(name), int(count)) for name, count in zip(classes, counts, strict=True))
    return Source(paths.map(_example(context, spec), num_parallel_calls=tf.data.AUTOTUNE), len(files),
                  classes=shown_classes)


def _spec(context: SourceContext, stage: str) -> Any:
    """The stage's spec model (its image_size, classes, skip_bad and max_pixels are not in the IR)."""
    return getattr(context.loaded.spec.data, stage)


def _channels(context: SourceContext) -> int:
    (name,) = context.source.features  # the spec checks refuse more than one image input (kinds/sources/images.py)
    return channels_of(next(i for i in context.ir.inputs if i.name == name))


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


def _root(context: SourceContext) -> str:
    """The folder's real path (links in the path the spec names are the user's choice, so they are followed)."""
    if not os.path.isdir(context.path):
        what = file_kind(context.path)
        expected = "expected a folder with one subfolder of images per class"
        raise context.fail((context.kind,), f"no such folder; {expected}, relative to the spec's folder"
                           if what == MISSING else f"the path is {what}, not a folder; {expected}")
    return os.path.realpath(context.path)


def _scan(context: SourceContext, folder: str | os.PathLike[str], name: str) -> list[os.DirEntry[str]]:
    """The entries of `folder` (`name`: how messages call it), or one line when it cannot be listed."""
    try:
        with os.scandir(folder) as entries:
            return list(entries)
    except OSError as exc:
        raise context.fail((context.kind,), f"{name} cannot be listed ({exc.strerror}); the images source reads "
                           "every folder below its folder (give specgen read access, or move it out)") from None


def _subfolders(context: SourceContext, folder: str | os.PathLike[str]) -> list[str]:
    return sorted(entry.name for entry in _scan(context, folder, "the folder")
                  if entry.is_dir() and not entry.name.startswith("."))


def _classes(context: SourceContext, spec: Any) -> list[str]:
    """Class names in id order: `classes`, else train's (eval must not add one), else the sorted folders."""
    found = _subfolders(context, context.path)
    train = _spec(context, "train")
    if spec.classes is not None:
        classes = list(spec.classes)
    elif context.stage == "eval" and hasattr(train, "image_size"):  # an images train source sets the ids
        train_path = context.training.data["train"].path
        classes = (list(train.classes) if train.classes else _subfolders(context, train_path) if train_path.is_dir()
                   else found)
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
    return classes


def _class_count(context: SourceContext, classes: list[str]) -> None:
    """More classes than the output has units: refused (after the folders were checked one by one)."""
    wanted = context.expected()
    label = next(iter(context.source.labels), None)
    want = wanted[label] if label is not None and label in wanted else None
    if want is not None and want.bound is not None and len(classes) > want.bound:
        listed = ", ".join(classes[:SHOWN]) + (", ..." if len(classes) > SHOWN else "")
        raise context.fail((context.kind,), f"{len(classes)} classes ({listed}) but "
                           f"{want.why}; the output needs one unit per class")


def _files(context: SourceContext, root: str, classes: list[str]) -> tuple[list[Image], list[int]]:
    """Every image file (sorted, subfolders included, as Keras walks them) and its class id."""
    files: list[Image] = []
    labels: list[int] = []
    # Files beside the class folders belong to no class: left out, and said so with the other entries left out.
    ignored = [f"{shown(entry.name)} (beside the class folders, in none)"
               for entry in sorted(_scan(context, root, "the folder"), key=lambda e: e.name)
               if not entry.name.startswith(".") and not entry.is_dir()]
    owners: dict[str, str] = {}  # a class folder's real path -> the class that has it
    for class_id, name in enumerate(classes):
        folder = _class_folder(context, root, name)
        if folder is None:
            continue  # an eval folder without some of train's classes
        if (shared := _shared(root, folder, name, owners)) is not None:  # `classes: [a, a]` under another name
            raise context.fail((context.kind,), f"{shared}; each image is in one class, and these would be read "
                               "twice, under two class ids (remove the link, or copy in the images it should hold)")
        owners[folder] = name
        images, others = _walk(context, root, folder, name)
        ignored += others
        if not images:
            raise context.fail((context.kind,), f"class folder '{name}' holds no images (files ending in "
                               f"{', '.join(EXTENSIONS)}); add images or remove the folder")
        files += images
        labels += [class_id] * len(images)
    if ignored:  # said, not silent: a stray README or .txt beside the images is common and harmless
        what = "entry that is not an image file" if len(ignored) == 1 else "entries that are not image files"
        print(f"data.{context.stage}: ignored {len(ignored)} {what}: {', '.join(ignored[:SHOWN])}"
              f"{', ...' if len(ignored) > SHOWN else ''}")
    return files, labels


def _class_folder(context: SourceContext, root: str, name: str) -> str | None:
    """The real path of class folder `name`; None when there is no such folder (eval may lack a class)."""
    path = os.path.join(root, name)
    if os.path.islink(path):
        path = _inside(context, root, path, name)
    return path if os.path.isdir(path) else None


def _shared(root: str, folder: str, name: str, owners: dict[str, str]) -> str | None:
    """Why class folder `name` (real path `folder`) shares images with a class before it (`owners`: real path ->
    class), or None: one of the two is a link to the other's folder, into it, or to a folder that holds it."""
    for other, owner in owners.items():
        if folder == other or folder.startswith(os.path.join(other, "")) or other.startswith(os.path.join(folder, "")):
            link, target = (name, folder) if os.path.islink(os.path.join(root, name)) else (owner, other)
            return (f"class folders '{printable(owner)}' and '{printable(name)}' share images (class folder "
                    f"'{printable(link)}' is a link to {shown(os.path.relpath(target, root))})")
    return None


def _walk(context: SourceContext, root: str, folder: str, name: str) -> tuple[list[Image], list[str]]:
    """The images below one class folder, and the names of the entries left out (shown, sorted).

    Names starting with `.` are left out unsaid, as before; every other entry is an image, refused, or named
    as left out. The listing is os.scandir's, whose entry types come without following links."""
    images: list[tuple[tuple[str, ...], str]] = []
    ignored: list[tuple[tuple[str, ...], str]] = []
    stack: list[tuple[str, tuple[str, ...]]] = [(folder, (name,))]
    while stack:  # each folder's entries in name order, then its subfolders in order: the first problem is stable
        directory, parts = stack.pop()
        subfolders: list[tuple[str, tuple[str, ...]]] = []
        for entry in sorted(_scan(context, directory, shown(os.path.join(*parts))), key=lambda e: e.name):
            here = (*parts, entry.name)
            if entry.name.startswith("."):
                continue
            if entry.is_dir(follow_symlinks=False):
                subfolders.append((entry.path, here))
                continue
            link = entry.is_symlink()
            target = _inside(context, root, entry.path, os.path.join(*here)) if link else entry.path
            if link and os.path.isdir(target):  # a link to a folder inside: not walked, as Keras' follow_links=False
                ignored.append((here, " (a link to a folder, not followed)"))
            elif os.path.splitext(entry.name)[1].lower() not in EXTENSIONS:
                ignored.append((here, ""))
            elif (what := _kind(entry, target)) != REGULAR:
                raise context.fail((context.kind,), _irregular(here, what, target if link else None))
            else:
                images.append((here, target))
        stack += reversed(subfolders)
    return ([Image(os.path.join(*parts), path) for parts, path in sorted(images)],
            [shown(os.path.join(*parts)) + note for parts, note in sorted(ignored)])


def _kind(entry: os.DirEntry[str], target: str) -> str:
    """What an entry named as an image is (base.file_kind's words), found by stat, which never opens it (stat on
    a named pipe does not block): a regular file's type comes with the listing."""
    return REGULAR if entry.is_file(follow_symlinks=False) else file_kind(target)


def _inside(context: SourceContext, root: str, path: str, name: str) -> str:
    """The real path of link `path` (`name` under the folder), refused unless it lies inside the folder."""
    target = os.path.realpath(path)
    if target != root and not target.startswith(os.path.join(root, "")):
        raise context.fail((context.kind,), f"{shown(name)} is a symbolic link to {shown(target)}, {OUTSIDE}")
    return target


def _irregular(here: tuple[str, ...], what: str, link: str | None) -> str:
    """Why an entry named as an image is refused: it is not a regular file (and was never opened)."""
    name = shown(os.path.join(*here))
    if link is None:
        return f"{name} is {what}, not a regular file; {IRREGULAR}"
    if what == MISSING:
        return f"{name} is a symbolic link to {shown(link)}, which does not exist; {IRREGULAR}"
    return f"{name} is a symbolic link to {shown(link)}, which is {what}, not a regular file; {IRREGULAR}"


def _open(image: Image) -> IO[bytes]:
    """The checked file, opened without following a link and without blocking, or DataError: the real path
    was a regular file when listed, and anything else now (a link, a pipe swapped in) is refused."""
    flags = os.O_RDONLY | sum(getattr(os, name, 0) for name in ("O_NOFOLLOW", "O_NONBLOCK", "O_CLOEXEC"))  # POSIX
    try:
        fd = os.open(image.path, flags)
    except OSError as exc:
        raise Unopened(f"cannot be opened ({exc.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Unopened(f"is no longer a regular file (it was when the folder was listed); {IRREGULAR}")
    return os.fdopen(fd, "rb")


def _good(context: SourceContext, spec: Any, files: list[Image], labels: list[int],
          channels: int) -> tuple[list[Image], list[int]]:
    """The files whose header passes and that decode; the others are an error, or skipped with skip_bad."""
    bad: dict[int, str] = {}
    for index, image in enumerate(files):
        try:
            with _open(image) as file:
                check_header(file, spec.max_pixels)
        except DataError as exc:
            if spec.skip_bad and not isinstance(exc, OverBound | Unopened):  # those are never skipped
                bad[index] = str(exc)
                continue
            raise context.fail((context.kind,), f"{shown(image.name)} {exc}") from None
    kept = [i for i in range(len(files)) if i not in bad]
    for index in _undecodable([files[i] for i in kept], channels):
        original = kept[index]
        try:
            with _open(files[original]) as file:
                why = decode_error(file.read(), channels) or "does not decode"
        except DataError as exc:
            raise context.fail((context.kind,), f"{shown(files[original].name)} {exc}") from None
        if not spec.skip_bad:
            raise context.fail((context.kind,), f"{shown(files[original].name)} does not decode: "
                               f"{why}; replace or remove the file (or set skip_bad: true on the source)")
        bad[original] = why
    if bad:
        names = [shown(files[i].name) for i in sorted(bad)[:SHOWN]]
        print(f"data.{context.stage}: skipped {len(bad)} of {len(files)} images that do not decode (skip_bad): "
              f"{', '.join(names)}{', ...' if len(bad) > SHOWN else ''}")
    keep = [i for i in range(len(files)) if i not in bad]
    return [files[i] for i in keep], [labels[i] for i in keep]


def _undecodable(files: list[Image], channels: int) -> list[int]:
    """Indexes of the files that do not decode (decode.undecodable, reading each file by its real path)."""
    import tensorflow as tf

    return undecodable([os.fsencode(f.path) for f in files], channels, read=tf.io.read_file)
