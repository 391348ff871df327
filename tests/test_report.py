"""`specgen report`: parameter counts and FLOPs checked against closed-form arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest

from specgen.cli import main
from specgen.ir.resolve import build_ir
from specgen.paths import shown
from specgen.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[1]
CNN = ROOT / "examples" / "specs" / "digits_cnn.yaml"


def test_digits_cnn_parameters_and_flops() -> None:
    ir = build_ir(load_spec(CNN))
    conv = 3 * 3 * 1 * 16 + 16
    bn = 4 * 16
    fc = 256 * 64 + 64
    out = 64 * 10 + 10
    assert sum(v.size for v in ir.model_variables) == conv + bn + fc + out == 17_322
    flops = {n.name: n.flops for n in ir.nodes}
    assert flops["conv1"] == 2 * (8 * 8 * 16) * (3 * 3 * 1) + 8 * 8 * 16  # MACs x2 + bias adds
    assert flops["pool1"] == 4 * 4 * 16 * 2 * 2
    assert flops["head/fc"] == 64 * (2 * 256 + 1) + 64  # matmul, bias, relu
    assert flops["head/out"] == 10 * (2 * 64 + 1)


def test_report_prints_tables(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(CNN)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    # printed relative to the working directory when the spec lies under it (specgen/paths.py)
    assert lines[0] == f"digits_cnn ({shown(CNN)}): 8 layers, 39 variables"
    assert any(line.split() == ["conv1/kernel", "[3,", "3,", "1,", "16]", "float32", "backbone,", "model,", "trainable"]
               for line in lines)
    assert any(line.split() == ["bn1/moving_mean", "[16]", "float32", "backbone,", "model,", "update"] for line in lines)
    assert any(line.split() == ["trainable", "8", "17,290"] for line in lines)
    assert any(line.split() == ["update", "2", "32"] for line in lines)
    assert any(line.split() == ["optimizer", "16", "34,392"] for line in lines)  # lr + iterations x2, slots
    assert any(line.split() == ["conv1", "conv2d", "[batch,", "8,", "8,", "16]", "160", "19,456", "38,912", "0.343"]
               for line in lines)
    assert any(line.split() == ["total", "17,322", "57,738", "113,428"] for line in lines)


def test_optimizer_slots_follow_the_optimizer_kind() -> None:
    ir = build_ir(load_spec(CNN))
    paths = set(ir.collections["optimizer"])
    assert "optimizers/body/momentum/conv1/kernel" in paths  # sgd with momentum: one slot
    assert {"optimizers/head/m/head/fc/kernel", "optimizers/head/v/head/fc/kernel"} <= paths  # adam: two
    assert not any(p.startswith("optimizers/body/m/") for p in paths)
    assert ir.collections["step"] == ("global_step",)
    assert ir.collections["ema"] == tuple(f"ema/{p}" for p in ir.collections["trainable"])
