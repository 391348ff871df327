"""The imported spec as readable YAML: flow mappings one per line, as in examples/specs.

The header comment says where the spec came from, what was renamed and what was dropped
(training-only Keras arguments), so nothing the import changed is silent.
"""

from __future__ import annotations

from typing import Any

import yaml

from specgen.diagnostics import one_line
from specgen.importers.keras.convert import Imported

MAX_LISTED = 6  # layers named per dropped argument; the rest are counted
# libyaml's emitter where PyYAML has it: the pure-Python one took 2 ms a layer (20 s for 10,000 layers).
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def flow(value: Any) -> str:
    """One value as a one-line YAML flow node."""
    return yaml.dump(value, Dumper=DUMPER, default_flow_style=True, sort_keys=False,
                     width=2**31 - 1).strip().removesuffix("\n...").strip()


def _comment_lines(lines: list[str]) -> list[str]:
    """YAML comments; Keras names and values in them are escaped (`one_line`), so a newline or another control
    character in a layer or file name can neither end the comment nor make the YAML unreadable."""
    return ["# " + one_line(line) if line else "#" for line in lines]


def _dropped(notes: list[tuple[str, str]]) -> list[str]:
    by_what: dict[str, list[str]] = {}
    for layer, what in notes:
        by_what.setdefault(what, []).append(layer)
    lines = []
    for what, layers in by_what.items():
        shown = ", ".join(layers[:MAX_LISTED]) + (f" and {len(layers) - MAX_LISTED} more" if len(layers) > MAX_LISTED
                                                  else "")
        lines.append(f"  {what}: {shown}")
    return lines


def header(imp: Imported, label: str) -> list[str]:
    lines = [f"Imported by `specgen import keras` from {label}: Keras model '{imp.name}'.",
             "The weights come from checkpoint.restore; `specgen export` without --checkpoint uses them."]
    if imp.renamed:
        lines.append("Renamed (not valid, reserved or already taken as spec names; the restore map carries layer renames):")
        lines += [f"  {what} {keras!r} -> {spec!r}" for what, keras, spec in imp.renamed]
    if imp.not_imported:
        lines.append("Not imported (docs/import.md, KerasHub backbones):")
        lines += [f"  {what}" for what in imp.not_imported]
    if imp.notes:
        lines.append("Dropped (none changes an output of the imported weights; fine-tuning runs without them):")
        lines += _dropped(imp.notes)
    return _comment_lines(lines)


def _layer_lines(layers: list[dict[str, Any]], inputs: list[str]) -> list[str]:
    lines, previous = [], inputs[0] if len(inputs) == 1 else None
    for entry in layers:
        shown = dict(entry)
        if shown.get("input") is not None and shown["input"] == previous:
            del shown["input"]  # the default: the previous layer (the spec's one input for the first)
        lines.append(f"  - {flow(shown)}")
        previous = entry["name"]
    return lines


def render(imp: Imported, label: str, restore: dict[str, Any], collections: dict[str, list[str]]) -> str:
    lines = [*header(imp, label), "specgen: 1", f"name: {imp.name}",
             f"doc: {flow(f'Imported from Keras ({label}).')}", "", "inputs:"]
    lines += [f"  {name}: {flow(spec)}" for name, spec in imp.inputs.items()]
    lines += ["outputs:", *[f"  {name}: {layer}" for name, layer in imp.outputs.items()], "", "layers:"]
    lines += _layer_lines(imp.layers, list(imp.inputs))
    if collections:
        lines += ["", "collections:", *[f"  {name}: {flow(p)}" for name, p in collections.items()]]
    if imp.frozen:
        lines += ["", "# trainable=False in Keras:", f"frozen: {flow(imp.frozen)}"]
    lines += ["", "checkpoint:", f"  dir: {flow(f'runs/{imp.name}')}", "  restore:", f"    - from: {flow(restore['from'])}"]
    if restore.get("strict"):  # every variable from the file: one it lacks stops the run (docs/import.md)
        lines.append("      strict: true")
    if restore["map"]:
        lines += ["      map:", *[f"        - {flow(entry)}" for entry in restore["map"]]]
    lines += ["", *_comment_lines(TRAINING_HINT.splitlines())]
    return "\n".join(lines) + "\n"


TRAINING_HINT = """To fine-tune with `specgen train`, add loss, optimizers, train and data, e.g.:
loss: {kind: sparse_softmax_cross_entropy, logits: <output>, labels: label}
optimizers:
  all: {kind: adam, learning_rate: 0.0001}
train: {batch_size: 32, epochs: 1}
data:
  train: {npz: data.npz, features: {<input>: x}, labels: {label: y}}"""
