"""A spec as a command uses it, built once: the loaded spec, its IR and its generated files.

It sits above spec/, ir/ and render/ (render/ works from the IR alone and imports nothing of spec/) and below
the commands and runtime/commands/, which receive it.

The commands that run a spec (`train`, `train --probe`, `export`) build one `Built` after reading and checking
the spec and pass it down as a required argument: the IR is resolved and the code rendered once per command, and
what TensorFlow trains or exports is exactly what `specgen build` would write for that spec (the same
`render_files`). A resumed run whose checkpoint kept `--set` overrides is a different spec: it gets its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from specgen.ir.model import ModelIR
from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.spec.load import LoadedSpec


@dataclass(frozen=True)
class Built:
    """The pipeline's three stages for one spec: spec -> IR -> generated files (name -> content)."""

    loaded: LoadedSpec
    ir: ModelIR
    files: Mapping[str, bytes]

    @property
    def training_files(self) -> dict[str, bytes]:
        """The generated Python modules that training imports: model.py and train.py."""
        return {name: text for name, text in self.files.items() if name.endswith(".py")}


def build(loaded: LoadedSpec) -> Built:
    """Resolve and render `loaded` (SpecError for a spec that does not validate; nothing is written)."""
    ir = build_ir(loaded)
    return Built(loaded, ir, MappingProxyType(render_files(ir)))
