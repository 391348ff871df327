"""Load spec files into `Spec` models; every problem becomes a positioned Diagnostic."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pydantic import ValidationError

from specgen.diagnostics import Diagnostic, Position, SpecError, quoted
from specgen.errors import AbstractSpec
from specgen.kinds import sources
from specgen.kinds.ops import Layer
from specgen.spec.blocks import MAX_LAYERS, Instance
from specgen.spec.compose import load_composed
from specgen.spec.messages import ABSENT, Overrides, override_at, validation_diagnostics
from specgen.spec.model import Spec
from specgen.spec.origins import Origins
from specgen.spec.received import received
from specgen.spec.source_map import PathKey, SourceMap, data_path
from specgen.spec.tree import ComposedSourceMap
from specgen.spec.yaml_source import parse_yaml


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
    # `--set` overrides applied to `data` (spec/overrides.py): (the key path each set, resolved to `data`'s list
    # indices, and its text). A value an override set has no line in the file, so a problem found at or below
    # that key (by validate's cross-section checks, or by `specgen train` at the data) names the override.
    overrides: Overrides = ()

    @property
    def folder(self) -> Path:
        return self.path.parent

    @property
    def layers(self) -> list[Layer]:
        """`spec.layers`, expanded: loading replaced every block instance with its layers (spec/expand.py)."""
        return cast(list[Layer], self.spec.layers)  # the model's type still admits instances; none is left

    def diagnostic(self, loc: PathKey, message: str, *, key: bool = False) -> Diagnostic:
        if (override := self._override_at(loc)) is not None:
            return Diagnostic(f"--set {override}", None, message)
        position, note = self._locate(loc, key)
        if removal := self._removal_note(loc):  # the cause first, then a guess at a near name
            head, hint, tail = message.rpartition("; did you mean ")
            message = f"{head}{removal}{hint}{tail}" if hint else message + removal
        return Diagnostic(self.display, position, message + note)

    def _removal_note(self, loc: PathKey) -> str:
        """`; v.yaml:3:23 removes 'h1'` where the value at `loc` names a layer (or a variable under it) that a file's
        `{name: h1, remove: true}` took out of its bases' list: the name is right where the base wrote it (an input,
        an output, a `share:`, a pattern, a restore `to:`), and the removal is what a problem about it comes from."""
        tree = self.source.tree if isinstance(self.source, ComposedSourceMap) else None
        layers = tree.mapping.get("layers") if tree is not None and tree.mapping is not None else None
        if layers is None or not layers.gone:
            return ""
        value = self._value_at(loc)
        for text in value if isinstance(value, list) else [value]:
            for name, gone in layers.gone.items() if isinstance(text, str) else ():
                if text == name or text.startswith(f"{name}/"):
                    return f"; {gone.flag.where()} removes {quoted(name)}: keep it, or name another layer in that file"
        return ""

    def _value_at(self, loc: PathKey) -> Any:
        """What the spec holds at `loc` (with blocks, `("layers", i, ...)` counts the expanded layers)."""
        if self.origins is None or loc[:1] != ("layers",) or len(loc) < 3 or not isinstance(loc[1], int):
            return data_path(loc, self.data)[1] if self.origins is None or loc[:1] != ("layers",) else None
        value = getattr(self.layers[loc[1]], str(loc[2]), None) if 0 <= loc[1] < len(self.layers) else None
        return value[loc[3]] if isinstance(value, list) and len(loc) > 3 and isinstance(loc[3], int) else value

    def overridden(self, loc: PathKey) -> bool:
        """Whether a `--set` wrote `loc` or a key above it (a clash between two values is reported at the override's)."""
        return self._override_at(loc) is not None

    def _override_at(self, loc: PathKey) -> str | None:
        """The last override that set `loc` or a key above it. With blocks, `loc` counts the expanded layers and an
        override the written ones: an expanded layer's value is where its block (or the spec) writes it, or where
        its instance sets the `$param` written there (Origins.written)."""
        if not self.overrides:
            return None
        places = [loc] if self.origins is None else self.origins.written(loc)
        return override_at(self.overrides, [data_path(place, self.data)[0] for place in places])

    def _locate(self, loc: PathKey, key: bool) -> tuple[Position | None, str]:
        if self.origins is None:
            return self.source.locate(loc, self.data, key=key), ""
        return self.origins.locate(loc, key)


def load_spec(path: Path, display: str | None = None) -> LoadedSpec:
    """Read (with every file it `extends`, spec/compose.py) and validate one spec, or raise SpecError with every
    problem in it; AbstractSpec when it is abstract and has no problem."""
    shown = display or str(path)
    data, source = load_composed(path, shown)
    return validate_data(data, source, path)


def _concrete(data: dict[str, Any], source: SourceMap, overrides: Overrides = ()) -> dict[str, Any]:
    """`data` without its `abstract` key; an abstract spec is checked for what it has and raises AbstractSpec.

    What an abstract spec has is checked as any spec's (unknown keys, types, ranges); what it lacks is not an
    error, since its children supply it. Checks that need the whole spec run on each child, where it is whole.
    """
    flag = data["abstract"]
    if not isinstance(flag, bool):
        raise SpecError([Diagnostic(source.path, source.locate(("abstract",), data),
                                    f"abstract: expected true or false; received {received(flag)}")])
    rest = {k: v for k, v in data.items() if k != "abstract"}
    if not flag:
        return rest
    try:
        Spec.model_validate(rest)
    except ValidationError as exc:
        if any(e["type"] not in ABSENT for e in exc.errors()):
            raise SpecError(validation_diagnostics(exc, rest, source, missing=False, overrides=overrides)) from None
    raise AbstractSpec(source.path, len(rest))


def load_spec_text(text: str, display: str = "<spec>", path: Path | None = None) -> LoadedSpec:
    data, source = parse_yaml(text, display)
    return validate_data(data, source, path or Path(display))


def _shape(data: Any) -> str:
    """What a file that is not a spec holds, by its shape: its text is not echoed (it may be any file)."""
    if isinstance(data, str):
        return f"a string of {len(data)} character{'' if len(data) == 1 else 's'} (plain text, not YAML keys and values)"
    if isinstance(data, list):
        return f"a list of {len(data)} item{'' if len(data) == 1 else 's'}"
    return received(data)  # a number, a boolean, a date: short


def validate_data(data: Any, source: SourceMap, path: Path, overrides: Overrides = ()) -> LoadedSpec:
    """`data` validated (and its blocks expanded); `overrides` are the `--set` overrides applied to it (spec/overrides.py),
    which problems at or below a key they set name instead of a position in the file."""
    if not isinstance(data, dict):
        raise SpecError([Diagnostic(source.path, source.position(()),
                                    f"a spec is a mapping of sections; received {_shape(data)}")])
    layers = data.get("layers")
    if isinstance(layers, list) and len(layers) > MAX_LAYERS:  # before the schema reads them all
        raise SpecError([Diagnostic(source.path, source.locate(("layers", MAX_LAYERS), data, key=False),
                                    f"layers: {len(layers)} layers; a spec holds at most {MAX_LAYERS} (this one is "
                                    "the first past it)")])
    if "abstract" in data:
        data = _concrete(data, source, overrides)
    try:
        spec = Spec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(validation_diagnostics(exc, data, source, overrides=overrides)) from None
    spec = sources.complete(spec)  # source defaults that depend on the inputs and the loss (kinds/sources)
    if spec.blocks or any(isinstance(layer, Instance) for layer in spec.layers):
        from specgen.spec.expand import expand  # only specs with blocks pay for importing it

        expanded = expand(spec, data, source, overrides)
        return LoadedSpec(expanded.spec, path, source.path, source, data, expanded.origins, overrides)
    return LoadedSpec(spec, path, source.path, source, data, overrides=overrides)
