"""Field types the loss kinds share (specgen/kinds/losses/), and `Selection`, which optimizers and pruning share.

The `loss` section is one term (a mapping) or a list of weighted terms (multi-task, regularizers); each
term's model lives with its kind in specgen/kinds/losses/, which derives the `Loss` union.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from specgen.fields.base import Pattern
from specgen.fields.unions import ONE_ITEM, by_shape, scalar_or_list

TERM_NAME = Field(None, description="The term's name in reports and TensorBoard (`loss/<name>`); "
                                    "default: the output it reads; for a regularizer its kind, with "
                                    "`_<collection>` when `variables` is one name (`l2_backbone`). A default that "
                                    "another term has gets `_2`, `_3`...")
LABELS = Field(description="A label name from the data section, or an output name (a computed target, "
                           "held constant: no gradient flows into it).")
WEIGHT = Field(1.0, description="The term's factor in the total loss.")

Selection = by_shape(scalar_or_list, "a collection name, a pattern or a list of them", ONE_ITEM,
                     scalar=Pattern, list=Annotated[list[Pattern], Field(min_length=1)])
