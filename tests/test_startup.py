"""TensorFlow starts without the packages Keras imports only for features specgen never calls (specgen/startup.py),
and those packages import as usual once it has started.

Each check runs in a fresh interpreter: TensorFlow starts once per process, and this one (a pytest worker) may
have started it already.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from specgen import startup

ROOT = Path(__file__).resolve().parents[1]


def python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                            env={"PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_skipped_packages_are_installed_so_the_trim_has_something_to_skip() -> None:
    """Otherwise the checks below would pass for want of the packages (MLflow installs scikit-learn and pandas)."""
    assert all(importlib.util.find_spec(name) is not None for name in startup.SKIPPED)


@pytest.mark.slow
def test_tensorflow_starts_without_them_and_they_import_after() -> None:
    out = python(
        "import sys\n"
        "from specgen.startup import SKIPPED, trimmed\n"
        "with trimmed():\n"
        "    import tensorflow as tf\n"
        "    print(sorted(n for n in SKIPPED if n in sys.modules))\n"
        "    import sklearn, pandas, matplotlib.pyplot\n"  # after the start, still inside a command: as usual
        "    print(sorted(n for n in SKIPPED if n in sys.modules))\n"
        "    layer = tf.keras.layers.Dense(2, kernel_initializer='ones')\n"  # Keras itself works
        "    print(layer(tf.ones([1, 3])).numpy().tolist())\n")
    assert out.splitlines() == ["[]", "['matplotlib', 'pandas', 'sklearn']", "[[3.0, 3.0]]"]


def test_outside_tensorflow_s_start_nothing_is_skipped() -> None:
    out = python("import sys\nfrom specgen.startup import trimmed\nwith trimmed():\n"
                 "    import pandas, matplotlib\n    print('pandas' in sys.modules, 'matplotlib' in sys.modules)\n"
                 "print(sorted(type(finder).__name__ for finder in sys.meta_path if 'Skip' in type(finder).__name__))\n")
    assert out.splitlines() == ["True True", "[]"]  # imported as usual; the finder is gone after the block


@pytest.mark.slow
def test_every_command_starts_tensorflow_trimmed(tmp_path: Path) -> None:
    """Through the CLI: `specgen data` reads the digits through tf.data, then reports what was imported."""
    out = python(
        "import atexit, sys\n"
        "from specgen.startup import SKIPPED\n"
        "atexit.register(lambda: print('imported:', sorted(n for n in SKIPPED if n in sys.modules), "
        "'tensorflow' in sys.modules))\n"
        "from specgen.cli import main\n"
        f"sys.exit(main(['data', {str(ROOT / 'examples' / 'specs' / 'digits_mlp.yaml')!r}]))\n")
    assert out.splitlines()[-1] == "imported: [] True"
