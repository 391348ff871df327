"""Hostile and damaged files beside a precision variant (variant.json, sample.npz, model.fp32.onnx): each is one
line naming the file (and the key), the version is not served, nothing hangs; only the variant's own failures
fall back to the float32 reference. Graphs and files as tests/test_precision_verify.py builds them."""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from test_precision_verify import LABELS, WEIGHT, X, _classifier, _edited_info, _write

from specgen.runtime.precision import int8
from specgen.runtime.precision.base import PrecisionRefusal
from specgen.runtime.precision.verify import (
    INFO_FILE,
    REFERENCE_FILE,
    SAMPLE_EXAMPLES,
    SAMPLE_FILE,
    VariantFileError,
    check_version,
)
from specgen.serve.control import folder_stamp
from specgen.serve.model_config import RepositoryError
from specgen.serve.models import load_repository

CONFIG = ('name: "clf" backend: "onnxruntime" max_batch_size: 16 '
          'input [ { name: "x" data_type: TYPE_FP32 dims: [ 64 ] } ] '
          'output [ { name: "logits" data_type: TYPE_FP32 dims: [ 4 ] } ]')


def _refusal(folder: Path) -> str:
    """check_version's VariantFileError, within 20 s (a FIFO opened for reading would block for ever)."""
    caught: list[BaseException] = []

    def run() -> None:
        try:
            check_version(folder, provider="cpu")
        except BaseException as exc:  # handed to the test
            caught.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive(), "check_version blocked"
    [exc] = caught
    assert isinstance(exc, VariantFileError)
    return str(exc)


def _npz(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


@pytest.mark.parametrize(("name", "expected"), [
    (SAMPLE_FILE, "the gate's sample (an .npz archive)"),
    (REFERENCE_FILE, "the float32 export the variant is gated against"),
    (INFO_FILE, "the variant's description, a JSON object"),
])
def test_a_fifo_beside_the_variant_is_refused_not_waited_on(tmp_path: Path, name: str, expected: str) -> None:
    folder = _write(tmp_path / "1", _classifier(WEIGHT), _classifier(WEIGHT, heavy=1))
    (folder / name).unlink()
    os.mkfifo(folder / name)
    assert _refusal(folder) == (f"{folder / name}: is a FIFO (named pipe), not a regular file; expected {expected}, "
                                "as `specgen export --triton` writes it")


def test_a_fifo_sample_refuses_the_version_at_load(tmp_path: Path) -> None:
    (tmp_path / "clf").mkdir()
    (tmp_path / "clf" / "config.pbtxt").write_text(CONFIG)
    folder = _write(tmp_path / "clf" / "1", _classifier(WEIGHT), _classifier(WEIGHT, heavy=1))
    (folder / SAMPLE_FILE).unlink()
    os.mkfifo(folder / SAMPLE_FILE)
    with pytest.raises(RepositoryError) as caught:
        load_repository(tmp_path, provider="cpu")
    assert str(caught.value) == (f"{folder / SAMPLE_FILE}: is a FIFO (named pipe), not a regular file; expected the "
                                 "gate's sample (an .npz archive), as `specgen export --triton` writes it")


def _budget(folder: Path) -> None:
    text = (folder / INFO_FILE).read_text()
    (folder / INFO_FILE).write_text(text.replace('"budget": 1.0', '"budget": 1' + "0" * 400))


CASES: list[tuple[str, Callable[[Path], None], str, str]] = [
    ("budget 10**400", _budget, INFO_FILE,
     "'budget' is an integer of 401 digits; expected a finite number, as `specgen export` writes it"),
    ("logits names no output", lambda f: _edited_info(f, logits="nope"), INFO_FILE,
     "'logits' is 'nope'; expected one of model.fp32.onnx's outputs, ['logits']"),
    ("inputs names no input", lambda f: _edited_info(f, inputs=["nope"]), INFO_FILE,
     "'inputs' is ['nope']; expected model.fp32.onnx's inputs, ['x']"),
    ("labels out of range", lambda f: (f / SAMPLE_FILE).write_bytes(_npz(input_0=X, labels=LABELS + 1000)), SAMPLE_FILE,
     f"'labels' holds {LABELS[0] + 1000} at row 0; expected classes of 'logits', integers in [0, 4)"),
    ("labels not integers", lambda f: (f / SAMPLE_FILE).write_bytes(_npz(input_0=X, labels=LABELS + 0.5)), SAMPLE_FILE,
     f"'labels' is float64 [{len(X)}]; expected one integer class per example"),
    ("input of the wrong shape", lambda f: (f / SAMPLE_FILE).write_bytes(_npz(input_0=X[:, :8], labels=LABELS)),
     SAMPLE_FILE, f"'input_0' is float32 [{len(X)}, 8]; expected model.fp32.onnx's input 'x', float32 [-1, 64] "
     "(-1: any size)"),
    ("input of the wrong dtype", lambda f: (f / SAMPLE_FILE).write_bytes(_npz(input_0=X.astype(np.float64),
                                                                              labels=LABELS)),
     SAMPLE_FILE, f"'input_0' is float64 [{len(X)}, 64]; expected model.fp32.onnx's input 'x', float32 [-1, 64] "
     "(-1: any size)"),
    ("too many examples", lambda f: (f / SAMPLE_FILE).write_bytes(_npz(input_0=np.zeros((SAMPLE_EXAMPLES + 1, 64),
                                                                                      np.float32))),
     SAMPLE_FILE, f"holds {SAMPLE_EXAMPLES + 1} examples; expected at most {SAMPLE_EXAMPLES}, as `specgen export` "
     "writes it"),
    ("reference missing", lambda f: (f / REFERENCE_FILE).unlink(), REFERENCE_FILE,
     "is missing; expected the float32 export the variant is gated against, as `specgen export --triton` writes it"),
    ("reference not a model", lambda f: (f / REFERENCE_FILE).write_bytes(b"not a model"), REFERENCE_FILE,
     "onnxruntime cannot load it ("),
]


@pytest.mark.parametrize(("change", "name", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_damaged_sidecar_refuses_the_version_naming_the_file(
        tmp_path: Path, change: Callable[[Path], None], name: str, message: str) -> None:
    (tmp_path / "clf").mkdir()
    (tmp_path / "clf" / "config.pbtxt").write_text(CONFIG)
    folder = _write(tmp_path / "clf" / "1", _classifier(WEIGHT), _classifier(WEIGHT, heavy=1))
    change(folder)
    line = _refusal(folder)
    if message.endswith("("):  # onnxruntime's own wording follows
        assert line.startswith(f"{folder / name}: {message}") and "\n" not in line
        assert line.endswith("); expected the float32 export the variant is gated against")
    else:
        assert line == f"{folder / name}: {message}"
    with pytest.raises(RepositoryError) as caught:  # the version is not served: no float32 fallback
        load_repository(tmp_path, provider="cpu")
    assert str(caught.value) == line


def test_a_variant_that_fails_on_its_own_still_falls_back(tmp_path: Path) -> None:
    folder = _write(tmp_path / "1", b"not a model", _classifier(WEIGHT))
    check = check_version(folder, provider="cpu")
    assert check is not None and not check.passed and check.serve == folder / REFERENCE_FILE


def test_the_refusal_stamp_covers_every_file_of_the_version_folder(tmp_path: Path) -> None:
    folder = _write(tmp_path / "1", _classifier(WEIGHT), _classifier(WEIGHT, heavy=1))
    before = folder_stamp(folder)
    assert before is not None and [n for n, _ in before] == sorted(p.name for p in folder.iterdir())
    (folder / SAMPLE_FILE).write_bytes(b"damaged")
    damaged = folder_stamp(folder)
    assert damaged != before
    (folder / SAMPLE_FILE).write_bytes(_npz(input_0=X, labels=LABELS))  # repaired
    assert folder_stamp(folder) not in (before, damaged)
    assert folder_stamp(tmp_path / "gone") is None


def test_the_int8_kernel_gate_refuses_a_graph_with_no_integer_kernel() -> None:
    with pytest.raises(PrecisionRefusal) as caught:
        int8.check(_classifier(WEIGHT), "cpu")  # a float32 graph labelled int8
    assert str(caught.value) == ("int8: the graph has no integer kernel on the cpu provider after onnxruntime's "
                                 "fusion (no quantized Conv, Gemm, MatMul or recurrent node): it would run as float32")
