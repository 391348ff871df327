"""Generated Python reads as hand-written to a linter: a user's repo that commits generated/ and runs `ruff check .`
must not fail on it.

The rules: ruff's pyflakes (F), pycodestyle errors and warnings (E, W) and import sorting (I), without E501 (line
length: the generated comments and docstrings run to 173 characters; a repo picks its own limit). That is more than
ruff's default set (E4, E7, E9, F). specgen counts as a third-party package, as it is in a user's repo (in this one
it is first-party, and isort would want a blank line after `import tensorflow`: this repo's pyproject.toml keeps
`extend-exclude = ["generated"]` for that, for E501 at 130 and for B905). The committed files are what the
templates render (tests/test_build.py and tests/test_golden.py check that), so linting them lints the templates.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from specgen.render.environment import environment

ROOT = Path(__file__).resolve().parents[1]
RULES = ["--isolated", "--no-cache", "--select", "F,E,W,I", "--ignore", "E501",
         "--config", "lint.isort.known-third-party = ['specgen']", "--output-format", "concise"]


def test_generated_python_passes_ruff() -> None:
    pytest.importorskip("ruff")
    folders = [ROOT / "generated", ROOT / "tests" / "golden" / "generated"]
    assert sum(1 for f in folders for _ in f.rglob("*.py")) > 80  # every example and golden spec's model.py, train.py
    done = subprocess.run([sys.executable, "-m", "ruff", "check", *RULES, *map(str, folders)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def _lib(names: list[str], body: str) -> str:
    return str(environment().get_template("tf/imports.py.j2").module.lib(names, body))  # type: ignore[attr-defined]


def test_the_import_lines_name_only_what_the_body_uses() -> None:
    body = ('"""Updates EMA, metrics."""\n'  # a docstring's word is no use
            "x = losses.cross_entropy(y)\n"
            "self.metrics = [m for m in eval_metrics.all]\n"  # an attribute or a longer name is no use either
            "path = 'schedules.yaml'\n"
            "w = init.zeros([2])\n")
    assert _lib(["initializers as init", "layers"], body) == "from specgen.runtime.lib import initializers as init\n"
    assert _lib(["losses", "metrics", "optimizers", "schedules"], body) == "from specgen.runtime.lib import losses\n"
    assert _lib(["layers"], body) == ""


def test_a_long_import_line_is_wrapped_as_isort_wraps_it() -> None:
    names = ["losses", "metrics", "optimizers", "pruning", "schedules", "target_networks"]
    body = "".join(f"x = {n}.f()\n" for n in names)
    assert _lib(names, body) == "from specgen.runtime.lib import (\n" + "".join(f"    {n},\n" for n in names) + ")\n"
    assert _lib(names[:4], body) == "from specgen.runtime.lib import losses, metrics, optimizers, pruning\n"
