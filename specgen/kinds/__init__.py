"""Registries, one subpackage per extension axis: a kind is one module, and every list is derived from them.

Nothing here imports jinja2, TensorFlow or onnx: `specgen validate` and `build` import these registries.
"""
