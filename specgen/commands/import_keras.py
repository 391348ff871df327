"""`specgen import keras SOURCE -o SPEC`: a spec (and its restore entry) from a Keras model (importers/keras/)."""

from __future__ import annotations

import argparse
from pathlib import Path

from specgen.commands.common import InputPath, OutputFile, positive_int, shape
from specgen.paths import shown


def image_shape(text: str) -> tuple[int, int, int]:
    """argparse type: a keras.applications input shape, exactly H,W,C (Keras' own error for another rank names
    none of the option's form)."""
    dims = shape(text)
    if len(dims) != 3:
        raise argparse.ArgumentTypeError(f"expected 3 positive integers H,W,C (96,96,3); received {text!r}")
    return dims[0], dims[1], dims[2]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    frameworks = parser.add_subparsers(dest="framework", required=True)
    keras = frameworks.add_parser("keras", help="a .keras file, a legacy .h5 model file or a keras.applications name")
    keras.add_argument("source", help="model.keras, model.h5, or a constructor name such as ResNet50")
    keras.add_argument("-o", "--output", action=OutputFile, required=True, help="the spec file to write")
    keras.add_argument("--weights", action=InputPath, help="restore from this weights file instead of the model's own")
    keras.add_argument("--input-shape", type=image_shape, metavar="H,W,C", help="constructor input shape")
    keras.add_argument("--classes", type=positive_int, metavar="N", help="constructor class count")
    keras.add_argument("--collections", choices=["stages"], help="add one collection per stage or nested model")


def _usage(args: argparse.Namespace) -> None:
    """Flags that contradict the source or the output's name: exit 2 before anything is read."""
    from specgen.errors import UsageError
    from specgen.importers.keras import MODEL_SUFFIXES

    if Path(args.source).suffix.lower() in MODEL_SUFFIXES and (args.input_shape is not None or args.classes is not None):
        raise UsageError("import", f"--input-shape and --classes apply to constructor names only, not to model "
                         f"files (received {args.source})")
    if args.output.suffix.lower() in MODEL_SUFFIXES:
        raise UsageError("import", f"-o {args.output}: a spec is a YAML file, not a Keras model file "
                         f"({args.output.suffix}); choose a path ending in .yaml")


def run(args: argparse.Namespace) -> int:
    from specgen.extras import need

    need("specgen import keras", "h5py")  # the importer reads Keras files with it (keras, for names, is the same extra)
    from specgen.importers.keras import import_keras  # TensorFlow only for constructor names

    _usage(args)
    result = import_keras(args.source, args.output, weights=args.weights, input_shape=args.input_shape,
                          classes=args.classes, collections=args.collections)
    if result.weights_written is not None:
        print(f"wrote {shown(result.weights_written)} (weights drawn by Keras with seed 0)")
    print(f"wrote {shown(result.spec)}: {result.layers} layers, {result.variables} variables, restored from "
          f"{shown(result.weights)} ({result.mapped} map entries, {result.renamed} renames, "
          f"{result.dropped} dropped training-only arguments, listed in its header)")
    return 0
