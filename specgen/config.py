"""Project defaults from `[tool.specgen]` in pyproject.toml, so `specgen build` needs no arguments.

Every key is checked for its type, and an unknown key is refused: a mistake in this table is one line naming
pyproject.toml, the key, what it holds and what was expected, never a traceback, a string read one character at a
time (`specs = "specs"`) or a misspelled key (`spec = [...]`) ignored while the defaults apply. Only the commands
that use the table read it (`validate` without paths, `build`, `schema` without -o; commands/common.py spec_paths),
so a key specgen does not know never fails `specgen validate FILE`.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_SCHEMA = Path("schemas/specgen.schema.json")  # `specgen schema`'s target when the table names none

# key -> what a valid value is, as the error line says it
EXPECTED = {
    "specs": "a list of spec files or folders as strings, e.g. [\"specs\"]",
    "out": "a folder path as a string, e.g. \"generated\"",
    "schema": "a file path as a string, e.g. \"schemas/specgen.schema.json\"",
    "pictures": "true or false",
}


@dataclass(frozen=True)
class Config:
    specs: list[Path] = field(default_factory=list)
    out: Path = Path("generated")
    schema: Path | None = None
    pictures: bool = False  # `specgen build` into `out` also writes model.svg per spec (specgen/pictures/graph.py)
    root: Path = Path()  # the pyproject.toml's folder (as shown), or the working directory without one

    @property
    def schema_target(self) -> Path:
        """Where `specgen schema` writes: `schema`, else the documented fallback below the project root (the
        pyproject.toml folder, as for every other key), so running it from a subfolder writes the same file."""
        return self.schema if self.schema is not None else self.root / DEFAULT_SCHEMA


def load_config(start: Path | None = None) -> Config:
    """Read the nearest pyproject.toml at or above `start`; paths in it are relative to it."""
    folder = (start or Path.cwd()).resolve()
    for candidate in (folder, *folder.parents):
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file():
            try:
                tool = tomllib.loads(pyproject.read_text()).get("tool", {})
            except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError):
                return Config()  # documented (cli.md): a pyproject.toml that is not valid TOML is ignored
            base = _shown(pyproject.parent)
            where = base / "pyproject.toml"
            table = tool.get("specgen", {}) if isinstance(tool, dict) else {}
            if not isinstance(table, dict):
                raise _error(where, f"[tool.specgen] is {_received(table)}; expected a table")
            _check(table, where)
            return Config(
                specs=[base / p for p in table.get("specs", [])],
                out=base / table.get("out", "generated"),
                schema=base / table["schema"] if "schema" in table else None,
                pictures=table.get("pictures", False),
                root=base,
            )
    return Config()


def _check(table: dict[str, Any], where: Path) -> None:
    """Unknown keys and values of the wrong type, each one line naming the file; all of them in one run."""
    from specgen.diagnostics import Diagnostic, SpecError, did_you_mean, one_of, quoted

    problems = [f"[tool.specgen] has an unknown key {quoted(key)}{did_you_mean(key, EXPECTED)} (expected "
                f"{one_of(EXPECTED)})" for key in table if key not in EXPECTED]
    for key, value in table.items():
        if key in EXPECTED and not _valid(key, value):
            problems.append(f"[tool.specgen] {key} is {_received(value)}; expected {EXPECTED[key]}")
    if problems:
        raise SpecError([Diagnostic(str(where), None, p) for p in problems])


def _valid(key: str, value: object) -> bool:
    if key == "pictures":
        return isinstance(value, bool)
    if key == "specs":  # a string here would be read one character at a time: refused, not wrapped in a list
        return isinstance(value, list) and all(isinstance(v, str) and v for v in value)
    return isinstance(value, str) and bool(value)  # "" would be the project folder itself


def _received(value: object) -> str:
    from specgen.diagnostics import safe_repr

    return str(value).lower() if isinstance(value, bool) else safe_repr(value)  # TOML's true/false


def _error(where: Path, message: str) -> Exception:
    from specgen.diagnostics import Diagnostic, SpecError

    return SpecError([Diagnostic(str(where), None, message)])


def _shown(folder: Path) -> Path:
    """`folder` relative to the working directory when it is below it, for readable messages."""
    try:
        return folder.relative_to(Path.cwd().resolve())
    except ValueError:
        return folder
