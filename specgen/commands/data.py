"""`specgen data SPEC [--stage train|eval]`: the input pipeline as training runs it (reads the data)."""

from __future__ import annotations

import argparse

from specgen.commands.common import InputPath


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", action=InputPath)
    parser.add_argument("--stage", choices=["train", "eval"], default="train", help="which data stage (default train)")


def run(args: argparse.Namespace) -> int:
    from specgen.extras import need

    need("specgen data", "tensorflow")  # one line naming the extra, not an ImportError's traceback
    from specgen.runtime.commands.data import run_data  # imports TensorFlow (it reads the data): only now

    return run_data(args.spec, args.stage)
