"""`specgen import keras`: a Keras model (file or keras.applications constructor) as a spec.

source.py reads the structure as data, graph.py flattens it to a DAG (dag.py), convert.py maps each
layer through layers.py's table (checked with specgen's own rules), write.py writes the YAML.
The spec is validated and built in memory before anything is written; on any refusal nothing is.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter, ValidationError

from specgen.diagnostics import quoted
from specgen.fields.base import FilePath
from specgen.importers.keras import keras_hub
from specgen.importers.keras.bare_weights import indexed_map
from specgen.importers.keras.convert import Imported, convert
from specgen.importers.keras.errors import ImportProblem, listed, refused
from specgen.importers.keras.graph import flatten
from specgen.importers.keras.source import Source, read_source
from specgen.importers.keras.stages import stages
from specgen.importers.keras.write import render
from specgen.paths import shown

if TYPE_CHECKING:
    from specgen.progress import Phases

__all__ = ["Result", "import_keras"]
WEIGHTS_SUFFIX = ".keras"  # constructor weights: <spec stem>.keras beside the spec (self-describing: config.json)
MODEL_SUFFIXES = (".keras", ".h5", ".hdf5")  # what -o never names: a spec written there would replace a model
_FILE_PATH: TypeAdapter[str] = TypeAdapter(FilePath)


@dataclass
class Result:
    spec: Path
    weights_written: Path | None
    weights: Path
    layers: int
    variables: int
    renamed: int
    mapped: int
    dropped: int


def restore_map(imp: Imported) -> list[dict[str, str]]:
    """Exact entries for the keys whose spec path differs (renames, depthwise kernel roles)."""
    return [{"from": key, "to": path} for path, key in imp.keys.items() if key != path]


def _relative(target: Path, spec: Path) -> str:
    return Path(os.path.relpath(target.resolve(), spec.resolve().parent)).as_posix()


def _read(source: str, input_shape: tuple[int, ...] | None, classes: int | None) -> Source:
    try:
        return read_source(source, input_shape, classes)
    except RecursionError:  # json.loads recurses once per nested array or object (100,000 `[` end here)
        raise ImportProblem("the model config nests its JSON arrays and objects deeper than Python's JSON reader "
                            "goes (about 1,000 levels); a Keras model config needs a few dozen") from None


def _stored(path: Path | None) -> dict[str, tuple[int, ...]]:
    """The keys and shapes of a weights file, read as data (runtime/keras_weights.py)."""
    from specgen.runtime.keras_weights import read_weights

    if path is None:
        raise ImportProblem("a KerasHub backbone needs its weights: import the .keras file, or pass --weights")
    try:
        return {key: weight.shape for key, weight in read_weights(path).items()}
    except ValueError as exc:
        raise ImportProblem(str(exc)) from None


def _check_weights(imp: Imported, indexed: list[dict[str, str]], path: Path | None) -> None:
    """Every variable of the spec has its value in the weights file, with its shape: a variable the restore would
    leave to its random initializer is refused now, not exported (the imported spec's restore is strict too)."""
    assert path is not None
    stored = _stored_keys(path)
    _fit_keys(imp, stored)
    wanted = imp.keys | {entry["to"]: entry["from"] for entry in indexed}  # spec path -> the key the restore reads
    missing = [p for p, key in wanted.items() if key not in stored]
    if missing:
        raise ImportProblem(f"{shown(path)} holds no value for {listed(missing)} of the model's {len(wanted)} "
                            "variables (looked for by the Keras layer and weight name): a restore would leave them at "
                            "random initial values; import a file saved with every weight of this model")
    shapes = imp.shapes
    for spec_path, key in wanted.items():
        if spec_path in shapes and tuple(stored[key]) != tuple(shapes[spec_path]):
            raise ImportProblem(f"{shown(path)}: weight {quoted(key)} has shape {list(stored[key])}, the model's "
                                f"config gives {list(shapes[spec_path])}: the file was written by another model")


def _fit_keys(imp: Imported, stored: dict[str, tuple[int, ...]]) -> None:
    """Each variable keyed as the file names it: a legacy .h5 holds `lstm/lstm_cell/kernel` whichever Keras wrote
    it (Keras 3's `model.save("x.h5")` too), a .keras file `lstm/kernel`; the names decide, not the version."""
    for path, other in imp.other_keys.items():
        if imp.keys[path] not in stored and other in stored:
            imp.keys[path] = other


def _stored_keys(path: Path) -> dict[str, tuple[int, ...]]:
    """A weights file's keys and shapes: a Keras file read as data (h5py), else a TensorFlow checkpoint."""
    from specgen.runtime.weight_files import is_keras_file

    if is_keras_file(path):
        return _stored(path)
    from specgen.runtime.commands.restore_sources import read_source  # imports TensorFlow: checkpoints only

    try:
        return {key: entry.shape for key, entry in read_source(path)[1].items()}
    except ValueError as exc:
        raise ImportProblem(f"--weights: {exc}") from None


def _check_output(output: Path, sources: list[Path]) -> None:
    """Never write the spec over the model or weights it is read from (also through a link or a hard link)."""
    if output.suffix.lower() in MODEL_SUFFIXES:
        raise ImportProblem(f"-o {output}: a spec is a YAML file, not a Keras model file ({output.suffix}); "
                            "choose a path ending in .yaml")
    for path in sources:
        with contextlib.suppress(OSError):  # a missing path cannot be the same file
            if output.exists() and os.path.samefile(output, path):
                raise ImportProblem(f"-o {output} is {path} itself: writing the spec would overwrite it; choose "
                                    "another path")


def _unwritable_path(path: str) -> str | None:
    """Why a spec cannot name `path` in checkpoint.restore (fields/base.py's FilePath), or None."""
    try:
        _FILE_PATH.validate_python(path)
    except ValidationError:
        return "which holds a control character" if not path.isprintable() else "which is too long for a spec"
    return None


def import_keras(source: str, output: Path, *, weights: Path | None = None,
                 input_shape: tuple[int, ...] | None = None, classes: int | None = None,
                 collections: str | None = None) -> Result:
    """Write the spec for `source` at `output` (SpecError naming the source on any refusal)."""
    from specgen.progress import Phases

    with Phases("import", ("read", "convert", "check", "write")) as phases:
        return _import_keras(source, output, weights, input_shape, classes, collections, phases)


def _import_keras(source: str, output: Path, weights: Path | None, input_shape: tuple[int, ...] | None,
                  classes: int | None, collections: str | None, phases: Phases) -> Result:
    from specgen.atomic import write_atomic
    from specgen.diagnostics import SpecError
    from specgen.ir.resolve import build_ir
    from specgen.spec.load import load_spec_text

    try:
        if weights is not None and not weights.is_file():
            raise ImportProblem(f"--weights {weights}: no such file")
        _check_output(output, [Path(source), *([weights] if weights else [])])
        phases.start("read")
        src = _read(source, input_shape, classes)
        phases.start("convert")
        if keras_hub.is_backbone(src.config):  # constructor arguments, not a layer graph
            imp, indexed = keras_hub.convert_backbone(src.config), []
            keras_hub.weight_keys(imp, keras_hub.variables(imp), _stored(weights or src.weights))
        else:
            graph = flatten(src.config)
            imp = convert(graph, src.keras2)
            indexed = indexed_map(weights, graph, imp.keys) if weights is not None else []
            if weights is not None or src.weights is not None:  # constructors: Keras saved every weight itself
                _check_weights(imp, indexed, weights or src.weights)
    except ImportProblem as exc:
        raise refused(source, [str(exc)]) from None
    written = None
    if weights is None and src.weights is None:
        written = output.with_name(output.name.split(".", 1)[0] + WEIGHTS_SUFFIX)
    weights_path = weights or src.weights or written
    assert weights_path is not None
    restore: dict[str, Any] = {"from": _relative(weights_path, output), "map": restore_map(imp) + indexed,
                               "strict": True}
    if (problem := _unwritable_path(restore["from"])) is not None:
        raise refused(source, [f"the spec would restore from {quoted(restore['from'])}, {problem}: rename the file"])
    groups = stages([e["name"] for e in imp.layers], list(imp.keys)) if collections == "stages" else {}
    if keras_hub.is_backbone(src.config) and not groups:
        groups = keras_hub.collections(imp)
    text = render(imp, src.label, restore, groups)
    phases.start("check")
    try:
        ir = build_ir(load_spec_text(text, str(output), path=output))
    except SpecError as exc:  # the importer's own mistake: say so, write nothing
        raise SpecError([d.__class__(source, None, f"the imported spec does not validate (please report it): "
                                     f"{d}") for d in exc.diagnostics]) from None
    phases.start("write")
    if written is not None and src.weights_bytes is not None:
        write_atomic(written, src.weights_bytes)  # before the spec, so the spec never points at nothing
    write_atomic(output, text)
    return Result(output, written, weights_path, ir.layer_count, len(ir.variables), len(imp.renamed),
                  len(restore["map"]), len(imp.notes))
