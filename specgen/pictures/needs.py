"""The pictures' optional packages: one line naming the extra to install, never an ImportError's traceback."""

from __future__ import annotations

from specgen.errors import SpecgenError
from specgen.extras import need


class PicturesUsageError(SpecgenError, ValueError):
    """An output name curves cannot write, or the pictures extra missing."""


def need_matplotlib(what: str) -> None:
    """One line naming the extra, instead of an ImportError's traceback (specgen.extras, as every command's)."""
    need(what, "matplotlib")


def need_tensorboard(what: str) -> None:
    """The event files' protos come from the tensorboard package (the train extra, not the pictures one)."""
    try:
        import tensorboard.compat.proto.event_pb2  # noqa: F401
    except ImportError:
        raise PicturesUsageError(f"{what} reads TensorBoard event files with the tensorboard package, which is not "
                                 "installed; expected: pip install tensorboard (or 'specgen[train]')") from None
