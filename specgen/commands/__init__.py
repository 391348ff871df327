"""The command line's commands, one module each: its flags (`add_arguments`) and what it prints (`run`).

A command module defines `add_arguments(parser)` and `run(args) -> int`; its name (the word after `specgen`),
its place in `specgen --help` (the pipeline's order, spec -> IR -> render -> runtime) and its help line are its
row in `COMMANDS` below, the one place they are written, so specgen/cli.py builds `specgen --help` without
importing any command module and imports only the one that runs (`specgen --version` and `--help` import
neither the spec nor the IR stack). Adding a command is adding a module here and its row to COMMANDS
(tests/test_layout.py checks every module has one).

A module's top level imports nothing heavy: TensorFlow, onnxruntime, Optuna and matplotlib are imported inside
`run`, after the spec is read and checked, so a spec mistake is reported before TensorFlow starts and `validate`,
`build`, `schema`, `report`, `graph`, `curves`, `diff` and `train --emit tfjob` never import it
(tests/test_build.py and tests/test_distributed_launch.py check). A command that needs an extra calls
`specgen.extras.need` first: one line naming the extra when it is not installed.
The work itself lives in the pipeline's packages (spec/, ir/, render/, runtime/, serve/, sweep/, review/,
pictures/, report/, importers/); these modules map flags onto it.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Protocol, cast

# (name, module under specgen/commands/, help), in the order `specgen --help` lists them, without importing them.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("validate", "validate", "check spec files and report every problem"),
    ("explain", "explain", "print a key's final value and every place that set it"),
    ("diff", "diff", "what a change to a spec breaks and changes (no TensorFlow)"),
    ("build", "build", "render specs into generated/<name>/"),
    ("schema", "schema", "write the JSON Schema for spec files"),
    ("report", "report", "print variables, collections and FLOPs of specs"),
    ("data", "data", "print a spec's input pipeline as training runs it (reads the data)"),
    ("train", "train", "train a spec with the generated TensorFlow code"),
    ("sweep", "sweep", "search the spec's sweep space with Optuna, each trial an ordinary run (docs/sweeps.md)"),
    ("restore-plan", "restore_plan", "show where each model variable would be restored from"),
    ("export", "export", "write model.onnx with trained weights from a checkpoint"),
    ("infer", "infer", "run an exported model with onnxruntime on arrays from an .npz"),
    ("serve", "serve", "serve a Triton-layout model repository over the Open Inference Protocol"),
    ("import", "import_keras", "write a spec from another framework's model"),
    ("graph", "graph", "draw the model graph with collections, optimizers and restore sources"),
    ("curves", "curves", "draw a run's training curves from its TensorBoard events"),
)


class Command(Protocol):
    """What cli.py reads of a command module."""

    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def load(module: str) -> Command:
    """The command module `specgen/commands/<module>.py`, imported now."""
    return cast(Command, importlib.import_module(f"{__name__}.{module}"))


def discover() -> list[tuple[str, Command]]:
    """Every command, imported, with its name, in COMMANDS' order (tests and docs read them all)."""
    return [(name, load(module)) for name, module, _ in COMMANDS]
