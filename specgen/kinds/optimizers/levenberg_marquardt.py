"""`kind: levenberg_marquardt`: damped Gauss-Newton steps for small full-batch squared-error fits.

Its keys and the refusals of learning_rate, weight_decay, clip and damping_factor: specgen/spec/levenberg_marquardt.py;
its checks across sections: specgen/ir/training/levenberg_marquardt.py; its step:
specgen/runtime/lib/levenberg_marquardt.py and templates/tf/train_levenberg_marquardt.py.j2.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from specgen.kinds.optimizers.base import OptimizerBase, OptimizerDef, Slots, UpdateCall
from specgen.spec.levenberg_marquardt import LevenbergMarquardtKeys
from specgen.spec.losses import Selection


class LevenbergMarquardt(LevenbergMarquardtKeys):
    """Levenberg-Marquardt: damped Gauss-Newton steps for a mean_squared_error fit on the whole training set
    (train.batch_size: full). It takes no learning rate: the damping sets the step."""

    # Its keys and the refusals of learning_rate, weight_decay, clip and damping_factor: spec/levenberg_marquardt.py.

    kind: Literal["levenberg_marquardt"]
    variables: Selection | None = Field(None, description=OptimizerBase.model_fields["variables"].description)


def _slots(hyper: Mapping[str, Any]) -> Slots:
    # D, the running maximum of J's column norms per weight (runtime/lib/levenberg_marquardt.py), a slot like Adam's m.
    return (("scale", 0.0),)


def _update(c: UpdateCall) -> str:
    """lmder's iteration: its damping λ and step bound Δ (damping=True below), D, and whether it is the first
    (Δ starts from ‖D·w‖ then). The step template keeps what it returns: ACCEPTED, REJECTED or STALLED."""
    return (f"{c.function}({c.variables}, residuals, self.{c.attr}_damping, self.{c.attr}_step_bound, "
            f"{c.slot('scale')}, tf.equal(self.{c.attr}_iterations, 0), {c.keywords('max_tries')})")


KINDS = (OptimizerDef("levenberg_marquardt", LevenbergMarquardt, "specgen.runtime.lib.levenberg_marquardt.step",
                      _update, _slots, learning_rate=False, damping=True),)
