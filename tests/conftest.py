"""Shared fixtures. TensorFlow is imported lazily, once per session, by the tests that need it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # bit-stable CPU kernels across runs

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "specs"


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT
