"""A `prune.variables` selection that cannot be pruned is refused with what the variables really are: target-network
copies (not "frozen", which a spec with `targets` need not have), EMA shadows, masks; frozen weights stay "frozen"."""

from __future__ import annotations

from pathlib import Path

import pytest

from specgen.diagnostics import SpecError
from specgen.ir.resolve import build_ir
from specgen.spec.load import load_spec_text

SPEC = """\
specgen: 1
name: dqn
inputs: {{x: {{shape: [6]}}}}
outputs: {{q: net, qt: tnet}}
blocks:
  mlp:
    inputs: [s]
    outputs: {{q: out}}
    layers:
      - {{name: hidden, op: dense, input: s, units: 4}}
      - {{name: bn, op: batch_norm}}
      - {{name: out, op: dense, units: 2}}
layers:
  - {{name: net, block: mlp, input: x}}
  - {{name: tnet, block: mlp, input: x}}
loss: {{kind: mean_squared_error, predictions: q, labels: t}}
optimizers: {{a: {{variables: {claim}, kind: sgd, learning_rate: 0.1}}}}
targets: {{tt: {{online: "net/*", target: "tnet/*", {rule}}}}}
{frozen}train: {{batch_size: 2, ema: {{decay: 0.9}}}}
prune:
  variables: {variables}
  schedule: {{kind: constant_sparsity, sparsity: 0.5}}
"""


def error(variables: str, rule: str = "tau: 0.5", frozen: str = "", claim: str = '"net/*"') -> str:
    text = SPEC.format(variables=variables, rule=rule, frozen=frozen, claim=claim)
    with pytest.raises(SpecError) as caught:
        build_ir(load_spec_text(text, "dqn.yaml", Path("/specs/dqn.yaml")))
    return str(caught.value)


@pytest.mark.parametrize("rule", ["tau: 0.5", "every_steps: 5"])
def test_target_copies_are_named_as_copies_with_their_online_weights(rule: str) -> None:
    # `*/kernel` is the natural glob in a DQN spec: the copies' kernels are refused as copies, the spec has no
    # `frozen` to edit, and the statistics (`*/bn/moving_mean` under a `*` glob) are dropped as every statistic is.
    assert error('["*/kernel"]', rule) == (
        "dqn.yaml:21:14: error: prune selects target-network copies 'tnet/hidden/kernel', 'tnet/out/kernel' "
        "(targets.tt); a target copy is trained by no optimizer and follows its online weights, so its next update "
        "would undo a mask of its own, and pruning the online weights already reaches it (a hard copy takes their "
        "zeros, a soft one decays toward them): prune 'net/hidden/kernel', 'net/out/kernel' and remove the copies "
        "from 'prune.variables'")
    assert "frozen" not in error('"tnet/*"', rule)


def test_frozen_weights_and_copies_are_each_named_for_what_they_are() -> None:
    message = error('["*/kernel"]', frozen="frozen: [net/out/kernel]\n",
                    claim='["net/hidden/*", "net/bn/*", "net/out/bias"]')
    lines = sorted(message.splitlines(), key=lambda line: "frozen variable" in line)  # both at one position
    assert len(lines) == 2
    assert lines[0].startswith("dqn.yaml:22:14: error: prune selects target-network copies 'tnet/hidden/kernel', "
                               "'tnet/out/kernel' (targets.tt);")
    assert lines[1] == ("dqn.yaml:22:14: error: prune selects frozen variable 'net/out/kernel'; no optimizer updates "
                        "frozen weights and pruning would change them: remove them from 'prune.variables' or from "
                        "'frozen'")


@pytest.mark.parametrize(("collection", "what"), [
    ("ema", "holds EMA shadows (training state that follows the trainable weights), not model variables,"),
    ("target", "is resolved from 'targets' (target-network copies, which follow their online weights)"),
    ("pruning", "holds pruning masks, not model variables,"),
    ("frozen", "is resolved from the optimizers"),
])
def test_built_in_collections_are_refused_for_what_they_hold(collection: str, what: str) -> None:
    assert error(f"[{collection}]") == (
        f"dqn.yaml:21:15: error: collection '{collection}' {what} and cannot be used here; name the variables or a "
        "user collection instead")
