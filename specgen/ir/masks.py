"""Keras masks at validate time: which layers carry the padding mask of a `mask_zero` embedding, and which
consume it.

An `embedding` with `mask_zero: true` makes a [batch, time] mask (its ids are non-zero). Keras 3 carries it
through the layers whose `compute_mask` passes it on and hands it to those that take a `mask` argument; this
module applies the same rules to the spec's graph, with no TensorFlow, and records on each consuming node the
id tensors its mask is made from (Node.mask; render/mask_plan.py turns them into tensors).

- Passed on unchanged: dense, dropout, layer_norm, the element-wise activations, rescale/normalize/scale,
  stop_gradient (Keras' Dense, Dropout, LayerNormalization, Activation, Rescaling, Normalization: their
  compute_mask returns the mask they received).
- Merges (add, subtract, multiply, concat on the last axis): Keras' Merge.compute_mask is None when any input
  has no mask, else the OR of the masks; Concatenate fills a missing mask with ones and ORs over the last axis,
  which is all ones (no mask) as soon as one input has none. Both come out as: the union when every input is
  masked, no mask otherwise.
- Consumed: lstm / gru / simple_rnn and bidirectional (masked steps leave the state unchanged; with
  return_sequences the mask goes on, as Keras' RNN.compute_mask; Bidirectional zeroes masked outputs),
  global_avg_pool over time (a masked mean; no mask after it),
  multi_head_attention (the query's mask as rows, unless its `query_mask` is false, as KerasHub's decoders
  build theirs; the value's and a distinct key's as columns of the attention mask, AND the causal and explicit
  ones; the output keeps the query's mask, as Keras sets it).
- Dropped: positional_embedding (KerasHub's PositionEmbedding does not support masking, so Keras drops the mask;
  its output is the position table, which holds no padded values, so dropping it changes no number).
- Anything else given a masked tensor is an error naming the layer, the op, the embedding the mask came from
  and the reason (MaskRule.reason): Keras either drops the mask there (silently or with a warning, and the padded
  steps then count as data) or uses it in a way specgen does not reproduce. Refusing is never a wrong answer.

Each op declares its rule on its OpDef (`mask`, a MaskRule: kinds/ops/base.py); this module names no op.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specgen.diagnostics import Diagnostic
from specgen.kinds.ops import REGISTRY
from specgen.spec.load import LoadedSpec

FIX = ("set mask_zero: false on that embedding, or end the time axis before this layer (a recurrent layer "
       "with return_sequences: false, or global_avg_pool)")


@dataclass(frozen=True)
class Mask:
    ids: frozenset[str]  # the id tensors (spec inputs or layers); the mask is "any of them non-zero"
    origins: tuple[str, ...]  # the mask_zero embeddings that made it, for messages

    def union(self, other: Mask) -> Mask:
        return Mask(self.ids | other.ids, tuple(dict.fromkeys(self.origins + other.origins)))

    def said(self) -> str:
        names = " and ".join(f"'{o}'" for o in self.origins)
        return f"the padding mask of embedding {names} (mask_zero: true)"


Masks = tuple[tuple[str, ...], ...]


def resolve_masks(loaded: LoadedSpec, layers: list[Any]) -> tuple[dict[str, Masks], list[Diagnostic]]:
    """Each consuming layer -> per input, the id tensors of its mask (sorted), and the positioned refusals.

    `layers` are ir/resolve.py's inferred layers in topological order (`.layer`, `.index`, `.sources`).
    """
    made: dict[str, Mask] = {}
    consumed: dict[str, Masks] = {}
    problems: list[Diagnostic] = []
    for x in layers:
        layer = x.layer
        masks = [made.get(s) for s in x.sources]
        if not any(masks):
            if getattr(layer, "mask_zero", False):  # an embedding's: its ids are non-zero
                made[layer.name] = Mask(frozenset(x.sources[:1]), (layer.name,))
            continue
        found, problem = _follow(layer, x.sources, masks, x.result.shape)
        if problem:
            source, mask = next((s, m) for s, m in zip(x.sources, masks, strict=True) if m)
            problems.append(_refusal(loaded, x, source, mask, problem))
            continue
        if REGISTRY[layer.op].mask.consumes:
            consumed[layer.name] = tuple(tuple(sorted(m.ids)) if m else () for m in masks)
        if found:
            made[layer.name] = found
    return consumed, problems + _check_outputs(loaded, made)


def _follow(layer: Any, sources: list[str], masks: list[Mask | None], shape: Any) -> tuple[Mask | None, str]:
    """(the mask after the layer, '' ) or (None, why the layer cannot take the mask): its op's MaskRule."""
    rule, first = REGISTRY[layer.op].mask, masks[0]
    if rule.check and (problem := rule.check(layer, tuple(m is not None for m in masks), len(shape))):
        return None, problem
    if rule.after == "first":
        return (first if rule.keeps is None or rule.keeps(layer) else None), ""
    if rule.after == "union":
        if not all(masks):  # Keras: no mask as soon as one input has none (Merge and Concatenate alike)
            return None, ""
        joined = masks[0]
        for m in masks[1:]:
            joined = joined.union(m) if joined and m else joined
        return joined, ""
    if rule.after == "none":
        return None, ""
    return None, rule.reason or f"specgen does not carry a mask through {layer.op}"


def _refusal(loaded: LoadedSpec, x: Any, source: str, mask: Mask, reason: str) -> Diagnostic:
    layer = x.layer
    key = "inputs" if "inputs" in type(layer).model_fields else "input"
    loc = ("layers", x.index, key) if key in layer.model_fields_set else ("layers", x.index)
    return loaded.diagnostic(loc, f"layer '{layer.name}' ({layer.op}): its input '{source}' carries {mask.said()}, "
                                  f"and {layer.op} cannot take a mask: {reason}; {FIX}")


def _check_outputs(loaded: LoadedSpec, made: dict[str, Mask]) -> list[Diagnostic]:
    """Keras weights a loss by its output's mask; specgen's losses do not, so a trained masked output is refused."""
    spec = loaded.spec
    if spec.loss is None:
        return []
    return [loaded.diagnostic(("outputs", out), f"output '{out}' reads layer '{layer}', which carries "
                              f"{made[layer].said()}; Keras weights the loss by that mask and specgen's losses do "
                              f"not; {FIX}")
            for out, layer in spec.outputs.items() if layer in made]
