"""A command that needs an optional extra which is not installed: one line naming the extra, never a traceback.

The base install (`pip install specgen`, what CI and pre-commit use) validates and builds specs; training,
export, inference, serving and importing need the extras of pyproject.toml's [project.optional-dependencies].
Each such command calls `need()` before its first heavy import, so one line names every missing package and the
extras that bring them (`pip install 'specgen[train,runtime]'`), and cli.py turns a ModuleNotFoundError of a
package listed here, from a path no `need()` covers, into the same line (`from_missing`).
specgen/pictures/needs.py (matplotlib) and specgen/sweep/errors.py (optuna) call `need()` too.
"""

from __future__ import annotations

import importlib.util

from specgen.errors import SpecgenError

# The top-level module -> the extra (pyproject.toml) that installs it. tensorboard, pillow, keras and h5py come
# with the train extra (TensorFlow depends on the last two); curves' tensorboard has its own message.
EXTRAS: dict[str, str] = {
    "tensorflow": "train", "tensorboard": "train", "keras": "train", "h5py": "train", "PIL": "train",
    "onnxruntime": "runtime",
    "starlette": "serve", "uvicorn": "serve", "prometheus_client": "serve", "httptools": "serve",
    "uvloop": "serve", "tritonclient": "serve", "grpc": "serve",
    "matplotlib": "pictures",
    "optuna": "sweep",
    "mlflow": "tracking", "sqlalchemy": "tracking", "alembic": "tracking",
    "keras_hub": "import",
}
# An extra that installs another (pyproject: serve = ["specgen[runtime]", ...]): naming both would be noise.
INCLUDES: dict[str, frozenset[str]] = {"serve": frozenset({"runtime"}), "import": frozenset({"train"})}


class MissingExtra(SpecgenError):
    """A package of an optional extra that the command needs is not installed."""


def installed(module: str) -> bool:
    """Whether `import module` can find it, without importing it (find_spec of a top-level name loads nothing;
    a module blocked with sys.modules[name] = None counts as missing, as `import` treats it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a half-installed package, or a __spec__ of None left in sys.modules
        return False


def message(command: str, modules: list[str]) -> str:
    """`specgen train needs tensorflow, which is not installed; expected the train extra: pip install
    'specgen[train]'`: the wording of `specgen curves` and `specgen sweep`."""
    extras = sorted({EXTRAS[m] for m in modules}, key=list(dict.fromkeys(EXTRAS.values())).index)
    extras = [e for e in extras if not any(e in INCLUDES.get(other, ()) for other in extras)]
    names = " and ".join([", ".join(modules[:-1]), modules[-1]] if len(modules) > 1 else modules)
    which = "which is" if len(modules) == 1 else "which are"
    kind = f"the {' and '.join(extras)} extra{'s' * (len(extras) > 1)}"
    return f"{command} needs {names}, {which} not installed; expected {kind}: pip install 'specgen[{','.join(extras)}]'"


def need(command: str, *modules: str) -> None:
    """Raise MissingExtra naming every one of `modules` (keys of EXTRAS) that is not installed; cheap (no import)."""
    missing = [m for m in modules if not installed(m)]
    if missing:
        raise MissingExtra(message(command, missing))


def from_missing(exc: ModuleNotFoundError, command: str) -> MissingExtra | None:
    """The line for an import that failed because an extra's package is absent; None for anything else (specgen's
    own module missing, or a module missing inside an installed package: a broken install, shown as it is)."""
    name = exc.name or ""
    top = name.partition(".")[0]
    if top not in EXTRAS or (name != top and installed(top)):
        return None
    return MissingExtra(message(command, [top]))
