"""The `lints:` section: lints a spec silences for itself (docs/spec.md#silencing-lints-in-the-spec).

A lint is a warning about something legal but likely to train badly (specgen/ir/lints.py); a
spec that means it (a small initialization on purpose, weights that all come from a restore)
says so here, next to the reason, instead of every caller passing `--no-lint`. Errors are not
lints and cannot be silenced. An unknown name is a positioned error listing the known ones.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field

from specgen.fields.base import SpecModel

LintName = Literal["init_scale", "bn_momentum"]
LINTS: tuple[str, ...] = get_args(LintName)  # `specgen validate --no-lint` takes the same names


class Lints(SpecModel):
    """Lints to skip for this spec."""

    skip: list[LintName] = Field(default_factory=list, description=(
        "Lints not to run for this spec: 'init_scale' (validate's activation scale at initialization), "
        "'bn_momentum' (train's batch-norm momentum warning)."))
