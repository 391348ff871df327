"""Every registered export precision lacks nothing: its runtime module, its file, the spec's literal, its docs.

The lists come from specgen.kinds.precisions.REGISTRY (one module per precision, found by listing); each
failure names the precision and what it misses (docs/extending.md).
"""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path

import pytest

from specgen.kinds.precisions import FLOAT32, NAMES, REGISTRY
from specgen.runtime import precision
from specgen.spec.io import OnnxExport

ROOT = Path(__file__).resolve().parents[1]
KINDS = sorted(REGISTRY)


def test_the_spec_literal_is_float32_and_every_registered_precision() -> None:
    assert typing.get_args(OnnxExport.model_fields["precision"].annotation) == NAMES == (FLOAT32, *REGISTRY)
    assert set(precision.REGISTRY) == set(REGISTRY)


@pytest.mark.parametrize("name", KINDS)
def test_precision_has_a_runtime_module_with_its_def(name: str) -> None:
    definition = precision.REGISTRY[name]
    assert definition.kind is REGISTRY[name], f"precision '{name}': {REGISTRY[name].runtime}.DEF is another kind's"
    assert callable(definition.convert) and callable(definition.check), f"precision '{name}': convert/check"


@pytest.mark.parametrize("name", KINDS)
def test_precision_is_written_beside_model_onnx(name: str) -> None:
    # the report (report/precision.py) and `specgen export`'s list of what it replaces name it so
    assert REGISTRY[name].file_name == f"model.{name}.onnx", f"precision '{name}': file {REGISTRY[name].file_name}"


@pytest.mark.parametrize("name", KINDS)
def test_precision_is_documented(name: str) -> None:
    assert f"\n- **{name}**: " in (ROOT / "docs" / "export.md").read_text(), (
        f"precision '{name}': docs/export.md's precision variants have no bullet '- **{name}**: ...'")


def test_the_declarations_import_no_onnx() -> None:
    """`specgen validate` builds the spec's literal from specgen/kinds/precisions: no onnx or onnxruntime there."""
    code = ("import sys, specgen.spec.io; "
            "print(sorted(m for m in ('onnx', 'onnxruntime', 'tensorflow') if m in sys.modules))")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert found.stdout.strip() == "[]"
