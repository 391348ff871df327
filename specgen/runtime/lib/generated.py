"""Import generated modules (model.py, train.py) from files, under unique module names."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import CodeType, ModuleType


class _SourceOnly(SourceFileLoader):
    """Compiles the file's current bytes, never a __pycache__ .pyc. Python trusts a .pyc whose recorded source mtime
    (whole seconds) and size match: a spec edited and rebuilt within a second to a file of the same size (a learning
    rate 0.05 made 0.01) would run the old code. Generated files are small; compiling them costs milliseconds."""

    def get_code(self, fullname: str) -> CodeType:
        return self.source_to_code(self.get_data(self.path), self.path)


def load_generated(path: Path) -> ModuleType:
    """Import a generated file as a module (it imports TensorFlow)."""
    digest = hashlib.sha1(str(path.resolve()).encode() + path.read_bytes()).hexdigest()[:12]
    name = f"specgen_generated_{path.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path, loader=_SourceOnly(name, str(path)))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
