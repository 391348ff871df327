"""bench/sequence.py in its --quick mode: it runs end to end, and its parity gate stops it when weights differ.

The peers are limited to tf.function (tf2onnx is the bench extra, not installed in CI) and each path is
measured once for a few milliseconds: the test checks that the script works, not the figures.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

QUICK = ["--quick", "--peers", "tf", "--repeats", "1", "--seconds", "0.01"]


@pytest.fixture(scope="module")
def bench(root: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_sequence", root / "bench" / "sequence.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


def test_quick_run_checks_parity_then_times_every_point(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(QUICK) == 0
    out = capsys.readouterr().out
    worst = {m: float(v) for m, v in re.findall(r"^(\w+): .* parity vs Keras: worst relative (\S+) ", out, re.M)}
    assert sorted(worst) == ["encoder", "lstm"]
    assert all(0 <= v <= bench.TOLERANCE for v in worst.values()), worst
    # Both specs have a named length: the gate ran two lengths through one graph (longest and longest // 2 + 3).
    assert "over specgen @11, specgen @16, specgen tf @11, specgen tf @16" in out
    assert "over specgen @7, specgen @8, specgen tf @7, specgen tf @8" in out
    rows = re.findall(r"^(encoder|lstm) +(\d+) +(\d+) ", out, re.M)
    assert rows == [("encoder", "1", "16"), ("encoder", "4", "16"), ("lstm", "1", "8"), ("lstm", "4", "8")]
    # The target: one fused attention node per encoder layer in specgen's export (opset 23), no Softmax left.
    assert re.search(r"^  encoder +ort specgen: fused 1, softmax 0, \d+ nodes; ort: fused 1, softmax 0,", out, re.M)
    assert "one attention node per layer in specgen's export: met" in out


def test_parity_gate_fails_when_one_weight_differs(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main([*QUICK, "--models", "lstm", "--perturb"]) == 1
    captured = capsys.readouterr()
    message = captured.err.strip()
    assert re.fullmatch(r"bench/sequence.py: parity gate: lstm: specgen tf differs from Keras at sequence 8: max "
                        r"relative difference (\S+), expected <= 0.0001; nothing was timed", message), message
    assert float(message.split("difference ")[1].split(",")[0]) > 1e-2  # 0.05 added to a kernel: far above the gate
    assert "median seconds per call" not in captured.out


def test_relative_difference_of_nan_fails_the_gate(bench: ModuleType) -> None:
    expected = np.array([1.0, -2.0])
    assert bench.relative(np.array([1.0, -2.5], np.float32), expected) == 0.25
    assert not bench.relative(np.array([np.nan, -2.0], np.float32), expected) <= bench.TOLERANCE
