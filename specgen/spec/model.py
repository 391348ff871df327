"""The top-level spec: one pydantic model shaped exactly like the YAML file."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from specgen.fields.base import Doc, Identifier, LayerName, Pattern, SpecModel, not_bool, not_whole_float
from specgen.kinds.losses import Loss
from specgen.kinds.optimizers import Optimizer
from specgen.spec.blocks import Block, LayerOrInstance
from specgen.spec.io import Checkpoint, Data, Export, InputSpec
from specgen.spec.lints import Lints
from specgen.spec.literals import int_literal
from specgen.spec.pruning import Prune
from specgen.spec.targets import Target
from specgen.spec.training import Train
from specgen.sweep.spec import Sweep

SPEC_VERSION = 1


class Spec(SpecModel):
    """A specgen spec file."""

    specgen: Literal[1] = Field(description="Spec format version.")
    name: Identifier
    doc: Doc = ""
    inputs: Annotated[dict[Identifier, InputSpec], Field(min_length=1)]
    outputs: Annotated[dict[Identifier, LayerName], Field(min_length=1, description="Output name -> layer name.")]
    # Op layers and block instances; once loaded (spec/expand.py) a spec's layers are op layers only.
    layers: Annotated[list[LayerOrInstance], Field(min_length=1)]
    blocks: dict[Identifier, Block] = Field(default_factory=dict, description="Reusable groups of layers.")
    collections: dict[Identifier, Annotated[list[Pattern], Field(min_length=1)]] = Field(default_factory=dict)
    frozen: list[Pattern] = Field(default_factory=list)
    loss: Loss | None = None
    optimizers: dict[Identifier, Optimizer] = Field(default_factory=dict)
    targets: dict[Identifier, Target] = Field(default_factory=dict, description="Target networks: copies that follow weights.")
    train: Train | None = None
    prune: Prune | None = None  # magnitude pruning: masks in the 'pruning' collection (docs/pruning.md)
    data: Data | None = None
    checkpoint: Checkpoint | None = None
    export: Export = Field(default_factory=Export)
    lints: Lints = Field(default_factory=Lints)
    sweep: Sweep | None = None  # a hyperparameter search: `specgen sweep` (docs/sweeps.md)

    # Literal[1] alone accepts `true` (True == 1) and `1.0`.
    _version_not_bool = field_validator("specgen", mode="before")(not_bool)
    _version_not_float = field_validator("specgen", mode="before")(not_whole_float)
    _version_bounded = field_validator("specgen", mode="before")(int_literal(SPEC_VERSION))  # 10**400: literals.py
