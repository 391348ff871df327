"""Dotted pointers from a registered kind to the runtime function that runs it.

Kinds name their runtime function as a string (`specgen.runtime.lib.optimizers.sgd`) because the
registries must not import TensorFlow; generated code calls it through the module the generated
file imports (`optimizers.sgd`), and the completeness tests import it to check that it exists.
"""

from __future__ import annotations

import importlib
from typing import Any

LIB = "specgen.runtime.lib."  # generated files import `from specgen.runtime.lib import <module>, ...`


def call_name(pointer: str) -> str:
    """How generated code names the function: `<lib module>.<function>`, e.g. `optimizers.adam`."""
    if not pointer.startswith(LIB) or pointer[len(LIB):].count(".") != 1:
        raise ValueError(f"runtime pointer {pointer!r} is not '{LIB}<module>.<function>'")
    return pointer[len(LIB):]


def resolve(pointer: str) -> Any:
    """The object a pointer names (imports its module: TensorFlow, for the runtime library)."""
    module, _, name = pointer.rpartition(".")
    return getattr(importlib.import_module(module), name)
