"""Zero pads that the ONNX graph writes into the `pads` of the Conv or MaxPool that reads them.

Keras models pad explicitly (`ZeroPadding2D` before a `valid` conv or pool: ResNet's stem, MobileNet's
strided convs). Zeros added by a Pad and then read by a Conv are the same zeros the Conv's own `pads`
add, so `Pad -> Conv(pads=q)` is exactly `Conv(pads=p+q)`: one node fewer, and no padded copy of the
tensor. A MaxPool fills its `pads` with -inf rather than zeros, which is the same only when every real
value is at least 0 (then a window's max is never below a padded zero) and each window keeps at least
one real value (pads smaller than the window): folded only after a relu or relu6. Elsewhere the Pad
stays, with max_pool's `Max(x, x)` guard against onnxruntime's own (unconditional) PadFusion
(specgen/kinds/ops/pools.py). The TensorFlow code is unchanged: this is a lowering choice for ONNX only.
Which ops pad, take pads and never go below 0: OpDef.pad_folding and OpDef.non_negative.
"""

from __future__ import annotations

from specgen.ir.model import FoldedPads, Node
from specgen.kinds.ops import REGISTRY, op_def

__all__ = ["FoldedPads", "fold_pads"]


def _onnx_pads(pad: Node) -> tuple[int, int, int, int]:
    (top, bottom), (left, right) = pad.params["sides"]
    return top, left, bottom, right  # ONNX: begins, then ends


def _non_negative(producer: Node | None) -> bool:
    """Whether the producer's output (after its `activation:`) is never below 0."""
    if producer is None:
        return False
    activation = REGISTRY.get(producer.activation) if producer.activation else None
    return op_def(producer.op).non_negative or (activation is not None and activation.non_negative)


def _can_fold(reader: Node, pad: Node, producer: Node | None) -> bool:
    if reader.inputs != (pad.name,):
        return False
    folding = op_def(reader.op).pad_folding
    if folding == "zeros":
        return True
    if folding != "max" or not _non_negative(producer):
        return False
    total = [a + b for a, b in zip(reader.params["pads"], _onnx_pads(pad), strict=True)]
    size = list(reader.params["size"]) * 2  # (h, w, h, w) against (top, left, bottom, right)
    return all(p < k for p, k in zip(total, size, strict=True))


def fold_pads(nodes: list[Node], outputs: set[str]) -> FoldedPads:
    """The pads every reader of which can take them into its own `pads`, and what each reader adds."""
    by_name = {n.name: n for n in nodes}
    folded: set[str] = set()
    extra: dict[str, tuple[int, int, int, int]] = {}
    for pad in nodes:
        if op_def(pad.op).pad_folding != "zero_pad" or pad.name in outputs:
            continue
        readers = [n for n in nodes if pad.name in n.inputs]
        producer = by_name.get(pad.inputs[0])
        if readers and all(_can_fold(r, pad, producer) for r in readers):
            folded.add(pad.name)
            extra.update({r.name: _onnx_pads(pad) for r in readers})
    return FoldedPads(frozenset(folded), extra)
