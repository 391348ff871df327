"""`specgen restore-plan SPEC [--from CKPT]`: where each model variable would be restored from."""

from __future__ import annotations

import argparse

from specgen.commands.common import InputPath


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", action=InputPath)
    parser.add_argument("--from", dest="from_", action=InputPath, metavar="CKPT",
                        help="a checkpoint prefix, run folder or Keras weight file (.weights.h5, .keras, "
                        ".h5) to plan from, instead of the spec's checkpoint.restore")


def run(args: argparse.Namespace) -> int:
    from specgen.extras import need

    need("specgen restore-plan", "tensorflow")  # one line naming the extra, not an ImportError's traceback
    from specgen.runtime.commands.restore import run_restore_plan  # imports TensorFlow: only now

    return run_restore_plan(args.spec, args.from_)
