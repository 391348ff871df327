"""Import generated modules (model.py, train.py) from files, under unique module names."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_generated(path: Path) -> ModuleType:
    """Import a generated file as a module (it imports TensorFlow)."""
    digest = hashlib.sha1(str(path.resolve()).encode() + path.read_bytes()).hexdigest()[:12]
    name = f"specgen_generated_{path.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
