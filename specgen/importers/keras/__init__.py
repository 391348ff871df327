"""`specgen import keras`: a Keras model (file or keras.applications constructor) as a spec.

source.py reads the structure as data, graph.py flattens it to a DAG, convert.py maps each
layer through layers.py's table (checked with specgen's own rules), write.py writes the YAML.
The spec is validated and built in memory before anything is written; on any refusal nothing is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specgen.importers.keras.bare_weights import indexed_map
from specgen.importers.keras.convert import Imported, convert
from specgen.importers.keras.errors import ImportProblem, refused
from specgen.importers.keras.graph import flatten
from specgen.importers.keras.source import read_source
from specgen.importers.keras.stages import stages
from specgen.importers.keras.write import render

__all__ = ["Result", "import_keras"]
WEIGHTS_SUFFIX = ".keras"  # constructor weights: <spec stem>.keras beside the spec (self-describing: config.json)


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


def import_keras(source: str, output: Path, *, weights: Path | None = None,
                 input_shape: tuple[int, ...] | None = None, classes: int | None = None,
                 collections: str | None = None) -> Result:
    """Write the spec for `source` at `output` (SpecError naming the source on any refusal)."""
    from specgen.atomic import write_atomic
    from specgen.diagnostics import SpecError
    from specgen.ir.resolve import build_ir
    from specgen.spec.load import load_spec_text

    try:
        if weights is not None and not weights.is_file():
            raise ImportProblem(f"--weights {weights}: no such file")
        src = read_source(source, input_shape, classes)
        graph = flatten(src.config)
        imp = convert(graph, src.keras2)
        indexed = indexed_map(weights, graph, imp.keys) if weights is not None else []
    except ImportProblem as exc:
        raise refused(source, [str(exc)]) from None
    written = None
    if weights is None and src.weights is None:
        written = output.with_name(output.name.split(".", 1)[0] + WEIGHTS_SUFFIX)
    weights_path = weights or src.weights or written
    assert weights_path is not None
    restore: dict[str, Any] = {"from": _relative(weights_path, output), "map": restore_map(imp) + indexed}
    groups = stages([e["name"] for e in imp.layers], list(imp.keys)) if collections == "stages" else {}
    text = render(imp, src.label, restore, groups)
    try:
        ir = build_ir(load_spec_text(text, str(output), path=output))
    except SpecError as exc:  # the importer's own mistake: say so, write nothing
        raise SpecError([d.__class__(source, None, f"the imported spec does not validate (please report it): "
                                     f"{d}") for d in exc.diagnostics]) from None
    if written is not None and src.weights_bytes is not None:
        write_atomic(written, src.weights_bytes)  # before the spec, so the spec never points at nothing
    write_atomic(output, text)
    return Result(output, written, weights_path, len(ir.nodes), len(ir.variables), len(imp.renamed),
                  len(restore["map"]), len(imp.notes))
