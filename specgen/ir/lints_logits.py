"""`specgen validate`'s warning for a loss that takes logits but reads probabilities (docs/spec.md#lints).

A loss kind whose model has a `logits` key (the registry's: kinds/losses/, sparse_softmax_cross_entropy, focal...)
applies its own softmax or sigmoid to what it reads. Reading a layer that already applies one (Keras users'
`from_logits=False` habit: a `softmax` last layer) applies it twice: the loss still trains, on scores squeezed
into [0, 1], whose gradients are small and whose loss cannot fall near 0. Legal, and nearly always a mistake,
so a warning without a lint name (as a metric that can only read 1.0): there is no reason to keep it.
"""

from __future__ import annotations

from dataclasses import replace

from specgen.diagnostics import Diagnostic
from specgen.ir.loss_terms import spec_terms
from specgen.ir.model import ModelIR, Node
from specgen.kinds.losses import REGISTRY as LOSSES
from specgen.kinds.ops import op_def
from specgen.spec.load import LoadedSpec


def logits_warnings(loaded: LoadedSpec, ir: ModelIR) -> list[Diagnostic]:
    """A warning at each loss term's `logits` whose output's layer (or the layer that ops keeping the values, such
    as a reshape, read) applies a softmax or a sigmoid."""
    warnings = []
    for loc, term in spec_terms(loaded.spec.loss):
        if "logits" not in LOSSES[term.kind].spec.model_fields or term.logits not in ir.outputs:
            continue
        layer = _source(ir, ir.outputs[term.logits])
        if layer is None:
            continue
        if op_def(layer.op).probabilities:  # OpDef.probabilities: softmax, sigmoid, hard_sigmoid
            what, fix = layer.op, (f"read the layer before it ('{layer.inputs[0]}')" if layer.inputs
                                   else "read the layer before it")
        elif layer.activation is not None and op_def(layer.activation).probabilities:
            what, fix = f"{layer.op}, activation: {layer.activation}", "remove the layer's activation"
        else:
            continue
        message = f"loss 'logits' reads layer '{layer.name}' ({what}): {term.kind} takes logits; {fix}"
        warnings.append(replace(loaded.diagnostic((*loc, "logits"), message), severity="warning"))
    return warnings


def _source(ir: ModelIR, name: str) -> Node | None:
    """The layer `name`, or the first before it that is not an op keeping its input's values (a reshape,
    a flatten, a dropout: OpDef.moments "same"); None at a model input."""
    nodes = {node.name: node for node in ir.nodes}
    node = nodes.get(name)
    while node is not None and node.activation is None and op_def(node.op).moments == "same" and node.inputs:
        node = nodes.get(node.inputs[0])
    return node
