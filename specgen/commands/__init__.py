"""The command line's commands, one module each: its flags (`add_arguments`) and what it prints (`run`).

A command module defines `NAME` (the word after `specgen`), `ORDER` (its place in `specgen --help`: the
pipeline's order, spec -> IR -> render -> runtime), `HELP`, `add_arguments(parser)` and `run(args) -> int`.
specgen/cli.py builds its parser by looping over `discover()`: adding a command is adding a module here.

Every module is imported to build the parser, so a module's top level imports nothing heavy: TensorFlow,
onnxruntime, Optuna and matplotlib are imported inside `run`, after the spec is read and checked, so a spec
mistake is reported before TensorFlow starts and `validate`, `build`, `schema`, `report`, `graph`, `curves`,
`diff` and `train --emit tfjob` never import it (tests/test_build.py and tests/test_distributed_launch.py check).
The work itself lives in the pipeline's packages (spec/, ir/, render/, runtime/, serve/, sweep/, review/,
pictures/, report/, importers/); these modules map flags onto it.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
from collections.abc import Callable
from types import ModuleType
from typing import Protocol, cast


class Command(Protocol):
    """What cli.py reads of a command module."""

    NAME: str
    ORDER: int
    HELP: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def discover() -> list[Command]:
    """Every command module of this package, in ORDER (modules without NAME, such as `common`, are helpers)."""
    found: list[ModuleType] = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "NAME"):
            found.append(module)
    return sorted((cast(Command, m) for m in found), key=lambda c: (c.ORDER, c.NAME))
