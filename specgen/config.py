"""Project defaults from `[tool.specgen]` in pyproject.toml, so `specgen build` needs no arguments."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Config:
    specs: list[Path] = field(default_factory=list)
    out: Path = Path("generated")
    schema: Path | None = None
    pictures: bool = False  # `specgen build` into `out` also writes model.svg per spec (specgen/pictures/graph.py)


def load_config(start: Path | None = None) -> Config:
    """Read the nearest pyproject.toml at or above `start`; paths in it are relative to it."""
    folder = (start or Path.cwd()).resolve()
    for candidate in (folder, *folder.parents):
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file():
            try:
                table = tomllib.loads(pyproject.read_text()).get("tool", {}).get("specgen", {})
            except (tomllib.TOMLDecodeError, OSError):
                return Config()
            base = _shown(pyproject.parent)
            return Config(
                specs=[base / p for p in table.get("specs", [])],
                out=base / table.get("out", "generated"),
                schema=base / table["schema"] if "schema" in table else None,
                pictures=_flag(table, "pictures", base / "pyproject.toml"),
            )
    return Config()


def _shown(folder: Path) -> Path:
    """`folder` relative to the working directory when it is below it, for readable messages."""
    try:
        return folder.relative_to(Path.cwd().resolve())
    except ValueError:
        return folder


def _flag(table: dict[str, object], key: str, where: Path) -> bool:
    """A true/false setting; anything else is one error line naming the file, not a silent default."""
    value = table.get(key, False)
    if not isinstance(value, bool):
        from specgen.diagnostics import Diagnostic, SpecError

        raise SpecError([Diagnostic(str(where), None, f"[tool.specgen] {key} is {value!r}; expected true or false")])
    return value
