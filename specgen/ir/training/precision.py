"""train.precision and train.jit_compile: what they cannot combine with, each refused at its own position.

Neither is a row of the pairwise feature table (specgen/kinds/features/compat.py): the ops that TensorFlow cannot compile
with XLA under specgen's deterministic training say why on their OpDef (`xla_refusal`), found by compiling each op's
forward and backward pass with tf.function(jit_compile=True) on CPU after tf.config.experimental.enable_op_determinism()
(which `specgen train` turns on). The other ops, recurrent layers' while_loops included, compiled.
"""

from __future__ import annotations

from specgen.diagnostics import Diagnostic
from specgen.kinds.ops import REGISTRY
from specgen.spec.load import LoadedSpec


def _lm_name(loaded: LoadedSpec) -> str | None:
    return next((n for n, o in loaded.spec.optimizers.items() if o.kind == "levenberg_marquardt"), None)


def check(loaded: LoadedSpec) -> list[Diagnostic]:
    """Refusals of train.precision (mixed_*) and train.jit_compile: true, one positioned line each."""
    train = loaded.spec.train
    if train is None:
        return []
    problems, lm = [], _lm_name(loaded)
    if train.precision != "float32" and lm is not None:
        problems.append(loaded.diagnostic(("train", "precision"), (
            f"levenberg_marquardt optimizer '{lm}' solves in float32: its Jacobian and damped Gauss-Newton solve "
            f"would lose in {train.precision} the digits that decide whether a step is kept, and its residuals "
            f"have no loss scale; received {train.precision}, expected float32")))
    if train.jit_compile and lm is not None:
        problems.append(loaded.diagnostic(("train", "jit_compile"), (
            f"levenberg_marquardt optimizer '{lm}' runs its damped trial steps from Python between graph calls, "
            "which XLA cannot compile as one step; received true, expected false")))
    if train.jit_compile:
        for i, layer in enumerate(loaded.spec.layers):
            op = REGISTRY.get(getattr(layer, "op", ""))
            if op is not None and (why := op.xla_refusal):
                problems.append(loaded.diagnostic(("layers", i, "op"), (
                    f"layer '{layer.name}': train.jit_compile cannot compile op '{layer.op}' with XLA: {why}; "
                    "set jit_compile: false, or use avg_pool / a strided conv instead")))
    return problems
