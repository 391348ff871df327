"""train.jit_compile: what it cannot combine with, each refused at its own position.

Not a training feature (it compiles whatever step the features render): the ops that TensorFlow cannot compile
with XLA under specgen's deterministic training say why on their OpDef (`xla_refusal`), found by compiling each op's
forward and backward pass with tf.function(jit_compile=True) on CPU after tf.config.experimental.enable_op_determinism()
(which `specgen train` turns on). The other ops, recurrent layers' while_loops included, compiled.
"""

from __future__ import annotations

from specgen.diagnostics import Diagnostic
from specgen.kinds.features.levenberg_marquardt import optimizer_name
from specgen.kinds.ops import REGISTRY
from specgen.spec.load import LoadedSpec


def check(loaded: LoadedSpec) -> list[Diagnostic]:
    """Refusals of train.jit_compile: true, one positioned line each."""
    train = loaded.spec.train
    if train is None or not train.jit_compile:
        return []
    problems, lm = [], optimizer_name(loaded.spec)
    if lm is not None:
        problems.append(loaded.diagnostic(("train", "jit_compile"), (
            f"levenberg_marquardt optimizer '{lm}' runs its damped trial steps from Python between graph calls, "
            "which XLA cannot compile as one step; received true, expected false")))
    for i, layer in enumerate(loaded.layers):
        op = REGISTRY.get(getattr(layer, "op", ""))
        if op is not None and (why := op.xla_refusal):
            problems.append(loaded.diagnostic(("layers", i, "op"), (
                f"layer '{layer.name}': train.jit_compile cannot compile op '{layer.op}' with XLA: {why}; "
                "set jit_compile: false, or use avg_pool / a strided conv instead")))
    return problems
