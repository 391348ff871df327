"""TensorFlow's start-up without the imports Keras makes for features specgen never calls.

`import tensorflow` imports Keras eagerly (tensorflow/__init__.py, "Do an eager load for Keras' code"), and
Keras then imports, when they are installed, scikit-learn (for `keras.wrappers`' scikit-learn estimators),
pandas (for DataFrames passed to `Model.fit`) and matplotlib (for `keras.visualization`'s image galleries);
MLflow installs the first two, specgen's pictures the third. Keras imports each inside `try: ... except
ImportError`, specgen uses none of those features, and together they cost about 2.8 s of the 6.4 s that
`python -c "import tensorflow"` takes on a 2-core machine: 3.6 s with `trimmed()` around the import
(medians of three, 2026-12-07; docs/cli.md).

While TensorFlow's own import runs, `trimmed()` makes those imports fail as if the packages were not installed;
Keras carries on without those features. Once TensorFlow has started they import as usual: specgen's pictures
import matplotlib later, MLflow imports pandas, and a user's plugin may import scikit-learn. Where TensorFlow is
already imported (a caller of `cli.main` in the same process) nothing changes.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
from collections.abc import Iterator, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

# Imported by Keras at start-up only for features specgen never calls (the module docstring).
SKIPPED = frozenset({"sklearn", "pandas", "matplotlib"})


class _SkipWhileTensorFlowStarts(importlib.abc.MetaPathFinder):
    """Fails an import of SKIPPED while `tensorflow` is being imported; leaves every other import alone."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname in SKIPPED and starting("tensorflow"):
            raise ModuleNotFoundError(f"{fullname} is not imported while TensorFlow starts (specgen.startup)",
                                      name=fullname)
        return None  # the other finders resolve it as usual


def starting(name: str) -> bool:
    """Whether module `name` is being imported right now (its code is running, not finished).

    importlib marks a module's spec `_initializing` while the module executes; were that ever to change, this
    reads False and TensorFlow simply starts untrimmed (tests/test_startup.py would say so)."""
    spec = getattr(sys.modules.get(name), "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


@contextlib.contextmanager
def trimmed() -> Iterator[None]:
    """For the duration of a command: TensorFlow, if it starts, starts without SKIPPED."""
    finder = _SkipWhileTensorFlowStarts()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
