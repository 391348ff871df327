"""Load spec files into `Spec` models; every problem becomes a positioned Diagnostic."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from specgen.diagnostics import (
    Diagnostic,
    Position,
    SpecError,
    describe,
)
from specgen.kinds import sources
from specgen.spec.blocks import Instance
from specgen.spec.messages import validation_diagnostics
from specgen.spec.model import Spec
from specgen.spec.origins import Origins
from specgen.spec.yaml_source import PathKey, SourceMap, load_yaml, parse_yaml


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec with the file it came from and its source positions."""

    spec: Spec
    path: Path
    display: str
    source: SourceMap
    data: dict[str, Any]
    # With blocks, `spec.layers` is the expanded list; `("layers", i, ...)` locations go through this
    # to where each layer is written (spec/expand.py). None for a spec without blocks.
    origins: Origins | None = None

    @property
    def folder(self) -> Path:
        return self.path.parent

    def position(self, *loc: str | int, key: bool = False) -> Any:
        return self._locate(loc, key)[0]

    def diagnostic(self, loc: PathKey, message: str, *, key: bool = False) -> Diagnostic:
        position, note = self._locate(loc, key)
        return Diagnostic(self.display, position, message + note)

    def _locate(self, loc: PathKey, key: bool) -> tuple[Position | None, str]:
        if self.origins is None:
            return self.source.locate(loc, self.data, key=key), ""
        return self.origins.locate(loc, key)


def load_spec(path: Path, display: str | None = None) -> LoadedSpec:
    """Read and validate one spec file, or raise SpecError with every problem in it."""
    shown = display or str(path)
    data, source = load_yaml(path, shown)
    return validate_data(data, source, path)


def load_spec_text(text: str, display: str = "<spec>", path: Path | None = None) -> LoadedSpec:
    data, source = parse_yaml(text, display)
    return validate_data(data, source, path or Path(display))


def validate_data(data: Any, source: SourceMap, path: Path) -> LoadedSpec:
    if not isinstance(data, dict):
        raise SpecError([Diagnostic(source.path, source.position(()),
                                    f"a spec is a mapping of sections; received {describe(data)}")])
    try:
        spec = Spec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(validation_diagnostics(exc, data, source)) from None
    spec = sources.complete(spec)  # source defaults that depend on the inputs and the loss (kinds/sources)
    if spec.blocks or any(isinstance(layer, Instance) for layer in spec.layers):
        from specgen.spec.expand import expand  # only specs with blocks pay for importing it

        expanded = expand(spec, data, source)
        return LoadedSpec(expanded.spec, path, source.path, source, data, expanded.origins)
    return LoadedSpec(spec, path, source.path, source, data)
