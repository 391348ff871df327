"""How long `specgen graph` takes on large models, and how big the picture comes out.

For each model it times the whole command in a fresh process (`python -m specgen graph SPEC -o x.svg`:
Python start, imports, load, resolve, layout and SVG; what a user waits for; the issue's target is under
2 s for ResNet50 and a 12-layer transformer encoder), then in this process the layout and SVG alone
(render_svg on a resolved IR, median of 5), and prints the picture's size in pixels and bytes.

Models: examples/specs/resnet50.yaml (177 layers), examples/specs/mobilenet_v3_small.yaml, a 12-layer
BERT-base-sized transformer encoder (the shipped transformer_encoder block, repeat: 12) and a 200-layer
chain with a skip every 4 layers (written here), the shapes a layered layout finds hardest.

    python bench/graph.py
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from specgen.ir.resolve import ir_from_file
from specgen.pictures.graph import render_svg

ROOT = Path(__file__).resolve().parents[1]

ENCODER = """specgen: 1
name: encoder12
inputs:
  tokens: {shape: [128], dtype: int32}
outputs:
  logits: head
layers:
  - {name: embed, op: embedding, input: tokens, vocab_size: 30522, dim: 768}
  - {name: position, op: positional_embedding, max_length: 128}
  - {name: mixed, op: add, inputs: [embed, position]}
  - {name: encoder, block: transformer_encoder, repeat: 12,
     with: {hidden_dim: 768, intermediate_dim: 3072, num_heads: 12}}
  - {name: pool, op: global_avg_pool}
  - {name: head, op: dense, units: 2}
"""


def chain(layers: int) -> str:
    """`layers` dense layers in a chain; every 4th adds the output 4 layers back (a long edge to route)."""
    rows = ["specgen: 1", "name: chain200", "inputs:", "  x: {shape: [16]}", "outputs:", f"  y: l{layers - 1}",
            "layers:", "  - {name: l0, op: dense, units: 16, input: x}"]
    for i in range(1, layers):
        rows.append(f"  - {{name: l{i}, op: add, inputs: [l{i - 1}, l{i - 4}]}}" if i % 4 == 0 and i >= 4
                    else f"  - {{name: l{i}, op: dense, units: 16}}")
    return "\n".join(rows) + "\n"


def measure(spec: Path, out: Path) -> None:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "specgen", "graph", str(spec), "-o", str(out)], check=True, cwd=ROOT,
                   capture_output=True)
    command = time.perf_counter() - start
    ir = ir_from_file(spec)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        svg = render_svg(ir)
        times.append(time.perf_counter() - start)
    root = ET.fromstring(svg)
    print(f"{ir.name:<20} {ir.layer_count:>6} {command:>10.2f} {statistics.median(times) * 1000:>14.1f} "
          f"{root.get('width'):>6} x {root.get('height'):<6} {len(svg.encode()) / 1000:>8.0f}")


def main(argv: list[str] | None = None) -> None:
    # No options; parsed so that `--help` (or a typo) prints usage instead of running the whole benchmark.
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "encoder12.yaml").write_text(ENCODER)
        (folder / "chain200.yaml").write_text(chain(200))
        specs = [ROOT / "examples" / "specs" / "resnet50.yaml", ROOT / "examples" / "specs" / "mobilenet_v3_small.yaml",
                 folder / "encoder12.yaml", folder / "chain200.yaml"]
        print(f"{'model':<20} {'layers':>6} {'command s':>10} {'layout+svg ms':>14} {'pixels':>15} {'kB':>8}")
        for spec in specs:
            measure(spec, folder / f"{spec.stem}.svg")


if __name__ == "__main__":
    main()
