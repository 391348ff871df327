"""`specgen diff OLD NEW [--format text|json] [--map] [--fail-on GATES]`: what a change breaks (specgen/review/)."""

from __future__ import annotations

import argparse

from specgen.review.command import cmd_diff, parse_gates
from specgen.review.sides import side_argument


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("old", type=side_argument, help="a spec file, REV:PATH (read through git) or a run folder")
    parser.add_argument("new", type=side_argument, help="a spec file, REV:PATH or a run folder")
    parser.add_argument("--format", choices=["text", "json"], default="text")
    parser.add_argument("--map", action="store_true",
                        help="print the checkpoint map entries that make OLD's checkpoints restore into NEW")
    parser.add_argument("--fail-on", type=parse_gates, default=(), metavar="interface,checkpoint,layers",
                        help="exit 1 when the change breaks served clients (interface), old checkpoints "
                             "(checkpoint) or what the model computes (layers)")


def run(args: argparse.Namespace) -> int:
    return cmd_diff(args)
