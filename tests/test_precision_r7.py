"""Checker round 7 on precision variants: the speed gate's decision with a confidence interval (no timing here:
synthetic rounds), a damaged sample blamed on the sample, a mismatched variant.json said aloud, variant.json's
budget under the spec's rule, and --calibration where nothing is calibrated."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binom
from test_precision_verify import LABELS, WEIGHT, X, _classifier, _edited_info, _write
from test_variant_hostile import _npz, _refusal

from specgen.kinds.precisions import calibration_mistake
from specgen.runtime.precision.base import PrecisionRefusal
from specgen.runtime.precision.gates import Timing, median_interval, median_ranks, speed_verdict
from specgen.runtime.precision.verify import INFO_FILE, SAMPLE_FILE, check_version


@pytest.mark.parametrize("n", range(1, 80))
def test_median_ranks_match_the_binomial(n: int) -> None:
    low, high, reached = median_ranks(n)
    assert high == n + 1 - low
    assert low == max(1, int(binom.ppf(0.025, n, 0.5))) if n >= 6 else low == 1
    assert reached == pytest.approx(1 - 2 * binom.cdf(low - 1, n, 0.5))


def test_median_interval_by_hand() -> None:
    # n = 9: P(B <= 0) = 1/512, P(B <= 1) = 10/512 <= 0.025 < P(B <= 2) = 46/512: ranks 2 and 8, 1 - 20/512
    assert median_interval([9.0, 1, 8, 2, 7, 3, 6, 4, 5]) == (5.0, 2.0, 8.0, 1 - 20 / 512)


def _rounds(ratios: list[float]) -> Timing:
    return Timing(tuple([1e-4] * len(ratios)), tuple(1e-4 * r for r in ratios))


def test_a_few_disturbed_rounds_do_not_make_a_slower_variant_faster() -> None:
    # the checker's 11x: float32's rounds slowed by another session's threads in some rounds, not the variant's
    timing = _rounds([1.6] * 17 + [0.1] * 4)
    with pytest.raises(PrecisionRefusal, match=r"^int8 is not faster: .* time ratio int8/float32 1\.60, 97% "
                       r"interval 1\.60-1\.60 \(medians of 21 paired rounds\); pass --force"):
        speed_verdict("int8", "CPUExecutionProvider", 8, timing, force=False)


def test_an_interval_reaching_one_is_not_measurably_faster() -> None:
    timing = _rounds([0.8, 0.9, 1.05, 0.85, 1.1, 0.95, 0.9, 1.2, 0.7])
    line = ("int8 0.090 ms vs float32 0.100 ms per batch of 8 on CPUExecutionProvider; time ratio int8/float32 "
            "0.90, 96% interval 0.80-1.10 (medians of 9 paired rounds)")
    with pytest.raises(PrecisionRefusal) as refused:
        speed_verdict("int8", "CPUExecutionProvider", 8, timing, force=False)
    assert str(refused.value) == f"int8 is not measurably faster: {line}; pass --force to write it anyway"
    forced = speed_verdict("int8", "CPUExecutionProvider", 8, timing, force=True)
    assert forced["warning"] == f"written with --force although not measurably faster: {line}"


def test_a_faster_variant_records_its_interval() -> None:
    report = speed_verdict("int8", "CPUExecutionProvider", 8, _rounds([0.5, 0.4, 0.6, 0.5, 0.45, 0.55, 0.5, 0.9,
                                                                       0.5]), force=False)
    assert report["speedup"] == 2.0 and "warning" not in report
    assert report["speedup_interval"] == pytest.approx([1 / 0.6, 1 / 0.45])  # ranks 2 and 8 of 9
    assert report["rounds"] == 9 and report["confidence"] == pytest.approx(1 - 20 / 512)


def test_a_nan_row_in_the_sample_is_the_sample_s_fault(tmp_path: Path) -> None:
    folder = _write(tmp_path / "1", _classifier(WEIGHT), _classifier(WEIGHT, heavy=1))
    x = X.copy()
    x[3] = np.nan
    (folder / SAMPLE_FILE).write_bytes(_npz(input_0=x, labels=LABELS))
    assert _refusal(folder) == (f"{folder / SAMPLE_FILE}: 'input_0' is NaN at row 3; expected finite values, as the "
                                "eval set `specgen export` records")


def test_a_sample_the_reference_answers_with_inf_is_the_sample_s_fault(tmp_path: Path) -> None:
    folder = _write(tmp_path / "1", _classifier(WEIGHT), _classifier(WEIGHT, heavy=1))
    x = X.copy()
    x[2:4] = 3e38  # finite, but x @ w overflows float32
    (folder / SAMPLE_FILE).write_bytes(_npz(input_0=x, labels=LABELS))
    assert _refusal(folder).startswith(f"{folder / SAMPLE_FILE}: on it, model.fp32.onnx's output 'logits' is ")
    assert _refusal(folder).endswith(" at row 2 (and 1 more rows); expected examples on which the float32 "
                                     "reference answers finite values")


def test_a_variant_that_fails_to_run_names_the_step(tmp_path: Path) -> None:
    folder = _write(tmp_path / "1", b"not a model", _classifier(WEIGHT))
    check = check_version(folder, provider="cpu")
    assert check is not None and "onnxruntime cannot load the variant: " in check.line
    assert "'output'" not in check.line


def test_a_variant_json_of_another_model_is_said(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = _write(tmp_path / "1", _classifier(WEIGHT), _classifier(WEIGHT, heavy=1))
    _edited_info(folder, model_sha256="0" * 64)
    with caplog.at_level(logging.WARNING, logger="specgen.serve"):
        assert check_version(folder, provider="cpu") is None
    [record] = [r for r in caplog.records if getattr(r, "fields", {}).get("event") == "variant_ignored"]
    fields: dict[str, str] = record.__dict__["fields"]
    assert record.levelno == logging.WARNING and fields["file"] == str(folder / INFO_FILE)
    assert fields["line"].startswith(f"{folder / INFO_FILE}: 'model_sha256' is {'0' * 64}; {folder / 'model.onnx'}'s "
                                     "SHA-256 is ")
    assert fields["line"].endswith(f"so {folder / 'model.onnx'} is served as a plain model, without the int8 "
                                   "variant's gates")


def test_a_negative_budget_is_refused_as_the_spec_refuses_it(tmp_path: Path) -> None:
    folder = _write(tmp_path / "1", _classifier(WEIGHT), _classifier(WEIGHT, heavy=1))
    _edited_info(folder, budget=-1)
    assert _refusal(folder) == (f"{folder / INFO_FILE}: 'budget' is -1; expected a finite number greater than or "
                                "equal to 0 (the rule of the spec's export.onnx.budget), as `specgen export` writes it")


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_calibration_where_nothing_is_calibrated_is_a_mistake(precision: str) -> None:
    assert calibration_mistake(precision, 400) == (
        f"--calibration 400: --calibration sets how many eval examples calibrate int8; --precision {precision} "
        "calibrates nothing: drop --calibration, or ask for --precision int8")
    assert calibration_mistake("int8", 400) is None and calibration_mistake(precision, None) is None


def test_the_export_lines_show_the_speed_interval_when_export_json_has_one() -> None:
    """`specgen export` and the HTML report print the gate's interval; an export.json written before the paired
    gate (no interval) prints as it did."""
    from specgen.report.export_lines import variant_lines

    speed = {"variant_ms": 0.106, "fp32_ms": 0.059, "batch": 8, "provider": "CPUExecutionProvider", "speedup": 0.59}
    report = {"precision": "int8", "file": "model.int8.onnx", "bytes": 1, "fp32_bytes": 2,
              "accuracy": {"accuracy": 0.975, "fp32_accuracy": 0.975, "lost_points": 0.0, "budget": 1}}
    old = variant_lines("out", report | {"speed": speed})[-1]
    assert old == "int8 speed: 0.106 ms vs float32 0.059 ms per batch of 8 on CPUExecutionProvider (0.59x)"
    new = speed | {"speedup_interval": [0.508, 0.806], "confidence": 0.961, "rounds": 9}
    assert variant_lines("out", report | {"speed": new})[-1] == (
        "int8 speed: 0.106 ms vs float32 0.059 ms per batch of 8 on CPUExecutionProvider (0.59x; 96% interval "
        "0.51-0.81x over 9 rounds)")
