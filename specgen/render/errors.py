"""Errors of the rendering stage (kept apart so the CLI can catch them without importing onnx)."""

from specgen.errors import SpecgenError


class RenderError(SpecgenError):
    """Generated output failed its own check: a specgen bug, never a spec mistake."""
