"""Errors of the rendering stage (kept apart so the CLI can catch them without importing onnx)."""


class RenderError(Exception):
    """Generated output failed its own check: a specgen bug, never a spec mistake."""
