"""An image model that resizes its own input (`resize` first, named height and width) served with dynamic
batching: requests of different image sizes run in separate batches and each gets its own answer, while
requests of one size still share a batch. Real onnxruntime on the rendered graph with random weights."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import onnx
import pytest

pytest.importorskip("onnxruntime")

from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.runtime.onnx_export import with_weights
from specgen.runtime.parity import random_weights
from specgen.runtime.predictor import Predictor
from specgen.serve.batcher import Batcher
from specgen.spec.load import load_spec_text

SPEC = """\
specgen: 1
name: any_size
inputs: {image: {shape: [height, width, 3], dtype: uint8}}
outputs: {logits: out}
layers:
  - {name: scale, op: rescale, input: image, scale: 0.00392156862745098}
  - {name: small, op: resize, height: 8, width: 8}
  - {name: flat, op: flatten}
  - {name: out, op: dense, units: 4}
"""


class Batches:
    """The batch observer: (requests, rows) of each onnxruntime run."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []

    def queue_depth(self, model: str, depth: int) -> None:
        pass

    def batch(self, model: str, requests: int, rows: int, seconds: float) -> None:
        self.seen.append((requests, rows))


def test_requests_of_other_image_sizes_run_in_their_own_batches() -> None:
    ir = build_ir(load_spec_text(SPEC, "any_size.yaml"))
    model = with_weights(onnx.load_from_string(render_files(ir)["model.onnx"]), ir,
                         random_weights(ir, np.random.default_rng(0)))
    predictor = Predictor(model.SerializeToString(), provider="cpu")
    rng = np.random.default_rng(1)
    sizes = [(8, 8), (8, 8), (31, 17), (8, 8), (31, 17)]
    images = [rng.integers(0, 256, (1, h, w, 3)).astype(np.uint8) for h, w in sizes]
    batches = Batches()

    async def main() -> list[Any]:
        # not started until all five are queued: the collector sees them together, in this order
        batcher = Batcher("m", predictor, max_batch_size=8, max_delay=0.05, queue_size=8, observer=batches)
        futures = [batcher.submit({"image": x}, 1) for x in images]
        batcher.start()
        results = await asyncio.gather(*futures)
        await batcher.close()
        return results

    results = asyncio.run(main())
    # Arrival order kept; a request of another size closes the batch (8x8 twice, 31x17, 8x8, 31x17).
    assert batches.seen == [(2, 2), (1, 1), (1, 1), (1, 1)]
    for x, result in zip(images, results, strict=True):
        # 1e-6: the first two ran as one batch of 2 rows, and onnxruntime's Gemm may take another kernel path for
        # 2 rows than for 1 (logits here are of order 1); a mix-up of two requests' answers differs by far more.
        np.testing.assert_allclose(result["logits"], predictor({"image": x})["logits"], rtol=0, atol=1e-6)
