"""ResNet50 and MobileNetV2 at 224 as specgen exports them, float32 and float16, as skeletons for bench/cuda_onnx.py.

Each model is imported from keras.applications with bench/zoo.py's realistic batch-norm statistics, exported by
`specgen export` (batch norm folded, the parity gate against Keras), converted to float16 as
`specgen export --precision fp16` converts (float32 inputs and outputs, normalizations and Softmax kept in float32),
and written as skeletons (bench/onnx_skeleton.py) with manifest entries: the GPU machine has no TensorFlow, and a
ResNet50 graph with weights is over what one call may carry.

    python bench/cuda_prepare_zoo.py --out .gpu/models    # .gpu/ is git-ignored
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from onnx_skeleton import strip
from zoo import randomize_statistics

MODELS = ("ResNet50", "MobileNetV2")
POINTS = [[1, 224], [8, 224], [64, 224]]


def fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """The conversion `specgen export --precision fp16` makes (specgen/runtime/precision/fp16.py)."""
    from specgen.runtime.precision.base import Calibration
    from specgen.runtime.precision.fp16 import convert

    converted, _ = convert(model.SerializeToString(), Calibration())
    return onnx.load_from_string(converted)


def export_one(name: str, folder: Path) -> onnx.ModelProto:
    import keras

    from specgen.importers.keras import import_keras
    from specgen.pipeline import build
    from specgen.runtime.commands.export import export
    from specgen.spec.load import load_spec

    spec = folder / f"{name}.yaml"
    imported = import_keras(name, spec, input_shape=(224, 224, 3))
    assert imported.weights_written is not None
    net = keras.models.load_model(imported.weights_written, compile=False)
    randomize_statistics(net)
    net.save(imported.weights_written)
    report = export(build(load_spec(spec)), None, folder / name)
    print(f"{name}: exported, parity scaled difference {report['parity_scaled_diff']:.1e}", flush=True)
    return onnx.load(folder / name / "model.onnx")


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # A named, required folder: a bare first argument took `--help` for the folder and exported into `./--help/`.
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder for the skeletons and manifest.json (made if absent; an existing manifest is updated)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    out = arguments(argv).out
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"models": []}
    manifest["models"] = [m for m in manifest["models"] if m["group"] not in {n.lower() for n in MODELS}]
    with tempfile.TemporaryDirectory(prefix="specgen-cuda-zoo-") as tmp:
        for name in MODELS:
            full = export_one(name, Path(tmp))
            for label, model in (("specgen fp32", full), ("specgen fp16", fp16(full))):
                file = f"{name.lower()}_{label.split()[-1]}.onnx"
                onnx.save(strip(model), out / file)
                manifest["models"].append({"group": name.lower(), "label": label, "file": file,
                                           "input": full.graph.input[0].name, "shape": ["B", 224, 224, 3],
                                           "dtype": "float32", "points": POINTS})
    manifest_path.write_text(json.dumps(manifest, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
