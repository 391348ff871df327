"""The model repositories the serving benches serve: an example spec with random weights (seed 0), laid out as
`specgen export --triton` writes it. Shared by serve_load.py and serve_compare.py (each runs as a script from
bench/, which is then first on sys.path)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SPECS = {"cnn": "digits_cnn", "mlp": "digits_mlp"}  # --model choices -> examples/specs/<name>.yaml


def write_repo(folder: Path, spec: Path) -> Path:
    """A Triton-layout repository at `folder` holding the spec's model with random weights (seed 0)."""
    import onnx

    from specgen.ir.resolve import build_ir
    from specgen.render.files import render_files
    from specgen.runtime.onnx_export import with_weights
    from specgen.runtime.parity import random_weights
    from specgen.runtime.triton import write_repository
    from specgen.spec.load import load_spec

    ir = build_ir(load_spec(spec))
    model = with_weights(onnx.load_from_string(render_files(ir)["model.onnx"]), ir,
                         random_weights(ir, np.random.default_rng(0)))
    write_repository(folder, ir, model.SerializeToString())
    return folder


def example_repo(folder: Path, name: str) -> Path:
    """examples/specs/<name>.yaml's repository."""
    return write_repo(folder, ROOT / "examples" / "specs" / f"{name}.yaml")


def mobilenet_repo(temp: Path) -> Path:
    """MobileNetV3-small of examples/specs (64x64 there, for fast tests) at 224x224x3, in temp/repo."""
    text = (ROOT / "examples" / "specs" / "mobilenet_v3_small.yaml").read_text()
    spec = temp / "mobilenet_v3_small.yaml"
    spec.write_text(text.replace("image: {shape: [64, 64, 3]}", "image: {shape: [224, 224, 3]}"))
    return write_repo(temp / "repo", spec)
