"""The runtime never names a feature (issue 18 item 4): the session, the loop and the one-device Distribution
branch on no training feature and on no strategy; the features' runtime pieces sit behind runtime/hooks.py.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from specgen.ir.resolve import build_ir
from specgen.kinds import compat
from specgen.kinds.features import REGISTRY
from specgen.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = ROOT / "specgen" / "runtime"
# The files that drive a run whatever the spec holds; the features' own code is in hooks.py and lib/.
DRIVERS = [RUNTIME / "commands" / "session.py", RUNTIME / "commands" / "train.py", RUNTIME / "placement" / "default.py"]
# Words that would mean a branch on a feature (registry and compatibility-table names) or on the strategy.
WORDS = sorted({*REGISTRY, *compat.FEATURE_OF, "replica", "target", "mask", "shadow", "terms"} - {"distribute"})


def _branch_names(path: Path) -> list[str]:
    """`line: name` for each identifier read by an if / elif / ternary / while / comprehension condition."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        tests = [node.test] if isinstance(node, ast.If | ast.IfExp | ast.While) else \
            list(node.ifs) if isinstance(node, ast.comprehension) else []
        for test in tests:
            for leaf in ast.walk(test):
                name = leaf.id if isinstance(leaf, ast.Name) else leaf.attr if isinstance(leaf, ast.Attribute) else None
                if name is not None:
                    found.append(f"{path.name}:{leaf.lineno}: {name}")
    return found


def test_the_run_drivers_branch_on_no_feature_and_no_strategy() -> None:
    pattern = re.compile("|".join(WORDS), re.IGNORECASE)
    offenders = [hit for path in DRIVERS for hit in _branch_names(path) if pattern.search(hit.split(": ")[1])]
    assert offenders == []


def test_the_check_sees_a_feature_branch(tmp_path: Path) -> None:
    """The check above can fail: the session's `if replicas` and per-feature branches before issue 18."""
    path = tmp_path / "sample.py"
    path.write_text("if replicas:\n    pass\nx = 1 if self.ir.pruning else 0\n"
                    "if isinstance(t, TargetFollowingTrainer):\n    pass\n")
    pattern = re.compile("|".join(WORDS), re.IGNORECASE)
    hits = sorted(hit for hit in _branch_names(path) if pattern.search(hit.split(": ")[1]))
    assert hits == ["sample.py:1: replicas", "sample.py:3: pruning", "sample.py:4: TargetFollowingTrainer"]


def test_runtime_refusals_come_from_the_compatibility_table() -> None:
    pytest.importorskip("tensorflow")
    from specgen.runtime import hooks

    lm = build_ir(load_spec(ROOT / "tests" / "golden" / "specs" / "lm_fit.yaml"))
    assert hooks.refusal(lm, "distribute") == ("levenberg_marquardt solves on the whole batch in one process; train "
                                               "it with the default strategy")
    assert hooks.refusal(lm, "probe") == ("--probe shows one gradient update; a levenberg_marquardt iteration is a "
                                          "damped solve over the whole training set: train a few epochs and read the "
                                          "loss instead")
    cnn = build_ir(load_spec(ROOT / "examples" / "specs" / "digits_cnn.yaml"))
    assert hooks.refusal(cnn, "distribute") is None and hooks.refusal(cnn, "probe") is None
