"""`specgen diff OLD NEW`: the review of a change to a spec (docs/review.md). No TensorFlow is imported.

Text output is one table per section (an unchanged section is one line); `--format json` prints the same as one
JSON document (its schema in docs/review.md); `--map` prints the checkpoint map that makes OLD's checkpoints
restore into NEW; `--fail-on interface,checkpoint,layers` exits 1 when the change breaks served clients, old
checkpoints or what the model computes (each gate on its own), with one line per reason on stderr: the gate for a
pull request.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml

from specgen import text
from specgen.review.checkpoint import checkpoint, declared_map, map_entries, restore_sources
from specgen.review.interface import interface
from specgen.review.layers import layers
from specgen.review.renames import Renames, find_renames
from specgen.review.resume import resume
from specgen.review.sections import OTHER_SECTIONS, TRAINING_SECTIONS, Section, run, settings, variables
from specgen.review.sides import Side, open_side

GATES = ("interface", "checkpoint", "layers")
FORMAT_VERSION = 1  # of the JSON document: bumped when a field changes meaning


def parse_gates(value: str) -> tuple[str, ...]:
    """argparse type of --fail-on: a comma-separated subset of GATES."""
    gates = tuple(g.strip() for g in value.split(",") if g.strip())
    unknown = [g for g in gates if g not in GATES]
    if unknown or not gates:
        raise argparse.ArgumentTypeError(f"received {value!r}; expected one or more of {', '.join(GATES)}, "
                                         "joined by commas")
    return gates


def compare(old: Side, new: Side) -> tuple[list[Section], Renames]:
    renames = find_renames(old.ir, new.ir)
    layer_section, layer_training = layers(old.loaded, old.ir, new.loaded, new.ir, renames)
    training = settings("training", old.loaded.spec, new.loaded.spec, TRAINING_SECTIONS)
    training.changes += layer_training  # initializers, batch-norm momentum, dropout rates: in NEW's layer order
    sections = [
        interface(old.ir, new.ir),
        layer_section,
        variables(old.ir, new.ir, renames),
        checkpoint(old.ir, new.ir, renames, restore_sources(new.loaded.spec), restore_sources(old.loaded.spec)),
        training,
        settings("export", old.loaded.spec, new.loaded.spec, ("export",)),
        settings("other", old.loaded.spec, new.loaded.spec, OTHER_SECTIONS),
    ]
    if old.record is not None and new.record is not None:  # two run folders: what else made them differ
        sections.append(run(old.record, new.record))
    resumed = resume(old.ir, new.ir)
    if resumed is not None and any(s.changes for s in sections):  # a spec diffed with itself stays empty
        # The checkpoint section's: what its restore into a new run does not judge, a run continued.
        next(s for s in sections if s.name == "checkpoint").notes.append(resumed.line())
    return sections, renames


def cmd_diff(args: argparse.Namespace) -> int:
    with open_side(args.old) as old, open_side(args.new) as new:
        sections, renames = compare(old, new)
        mapping = map_entries(old.ir, new.ir, renames, declared_map(new.loaded.spec), restore_sources(new.loaded.spec))
        own = restore_sources(old.loaded.spec)
        after_map = (checkpoint(old.ir, new.ir, renames, restore_sources(new.loaded.spec, mapping), own)
                     if mapping else None)
    if args.format == "json":
        print(json.dumps(_document(old, new, sections, renames, mapping, after_map), indent=2, sort_keys=True))
    else:
        print("\n".join(_text(old, new, sections, renames, after_map)))
        if args.map:  # what NEW's restore does with the map: the plan with it, or without where none is printed
            print(_map_text(mapping, renames, after_map or next(s for s in sections if s.name == "checkpoint")))
    broken = [f"{s.name}: {reason}" for s in sections if s.name in (args.fail_on or ()) for reason in s.breaks]
    for line in broken:
        print(f"specgen diff: breaks {line}", file=sys.stderr)
    return 1 if broken else 0


def _text(old: Side, new: Side, sections: list[Section], renames: Renames, after_map: Section | None) -> list[str]:
    lines = [f"specgen diff: OLD {old.label} ({old.ir.name}) -> NEW {new.label} ({new.ir.name})"]
    for section in sections:
        lines.append("")
        if section.summary:
            lines.append(f"{section.name}: {section.summary}")
        if not section.changes:
            lines += [f"  {note}" for note in section.notes] if section.summary else [f"{section.name}: unchanged"]
            continue
        if not section.summary:
            lines.append(f"{section.name}: {len(section.changes)} change(s)")
        rows = [[c.what, c.which, c.old, c.new] for c in section.changes]
        lines += ["  " + line for line in text.table_lines(["change", "what", "old", "new"], rows)]
        if section.name == "checkpoint" and after_map is not None:
            lines.append(f"  with the map of `specgen diff --map`: {after_map.summary.split(': ', 1)[1]}")
        lines += [f"  breaks: {reason}" for reason in section.breaks if section.echo_breaks]
        lines += [f"  {note}" for note in section.notes]  # after the restore's rows: a judgement of its own
    if renames.layers:
        lines += ["", "renamed layers: " + ", ".join(f"{a} -> {b}" for a, b in sorted(renames.layers.items()))]
    for layer, fits in sorted(renames.ambiguous.items()):
        lines.append(f"ambiguous: '{layer}' fits {', '.join(repr(f) for f in fits)} equally; none is guessed")
    return [line for n, line in enumerate(lines) if line or (n and lines[n - 1])]


def _map_text(mapping: list[dict[str, str]], renames: Renames, after: Section) -> str:
    """The map, headed by what a restore with it still does wrong (after: the checkpoint section with the map). The
    map holds renames only: a layer that stopped sharing needs a restore entry of its own, which its break line
    prints, so a header that says nothing of OLD's is lost is printed only where that is so."""
    remains = _remains(after)
    unmapped = " (ambiguous renames are not mapped)" if renames.ambiguous else ""
    # A variable of an ambiguous rename needs an entry the map cannot hold: "no entries needed" would read as safe.
    guessed = any(c.what == "initialized" and c.new.endswith("(ambiguous): needs a map entry") for c in after.changes)
    if not mapping:
        head = ("# no map entries needed: OLD's checkpoints restore into NEW by name and NEW's own restore maps"
                + unmapped if not remains else
                "# no map entries printed: ambiguous renames are not mapped (none is guessed); " + remains if guessed
                else "# no map entries needed for renamed weights; " + remains + unmapped)
        return "\n" + head
    body = yaml.safe_dump({"checkpoint": {"restore": [{"from": "OLD_CHECKPOINT", "map": mapping}]}},
                          sort_keys=False, default_flow_style=None, width=1 << 20)
    excluded = any(c.what == "initialized" and c.new.startswith("excluded by") for c in after.changes)
    head = ("# checkpoint map: OLD's checkpoints restore into NEW with nothing initialized that OLD had"
            + (" but what NEW's restore `exclude` names" if excluded else "")
            if not remains else "# checkpoint map: the entries for OLD's renamed weights; with it, " + remains + unmapped)
    return "\n" + head + "\n" + body.rstrip("\n")


# Rows the real restore refuses (restore-plan exits 1, `specgen train` starts no run): what each means.
REFUSED = {"mismatched": "another shape or dtype in OLD's checkpoints", "conflict": "several keys map there",
           "missing": "a map entry names a key OLD's checkpoints lack"}


def _remains(after: Section) -> str:
    """What the header says the restore still does: refuses (no run starts), or leaves OLD's weights to an
    initializer; empty when the checkpoint section has no break."""
    if not after.breaks:
        return ""
    refused = [f"{', '.join(c.which for c in after.changes if c.what == what)} ({what}: {why})"
               for what, why in REFUSED.items() if any(c.what == what for c in after.changes)]
    errors = sum(c.what == "error" for c in after.changes)
    refused += [f"the plan's {errors} error(s)"] if errors else []
    still = [c.which for c in after.changes if c.what == "initialized" and c.new != "new"
             and not c.new.startswith("excluded by")]
    parts = [f"the restore refuses {'; '.join(refused)} and no run starts (`specgen restore-plan` exits 1)"
             ] if refused else []
    parts += [f"{', '.join(still)} {'would also' if refused else 'still'} start from their initializer, though OLD "
              "had them"] if still else []
    return ("; ".join(parts) + ": the checkpoint section's breaks say what each needs" if parts else
            "the restore still breaks: see the checkpoint section")


def _document(old: Side, new: Side, sections: list[Section], renames: Renames, mapping: list[dict[str, str]],
              after_map: Section | None) -> dict[str, Any]:
    resumed = resume(old.ir, new.ir)
    return {
        "format": FORMAT_VERSION,
        "old": {"source": old.label, "name": old.ir.name},
        "new": {"source": new.label, "name": new.ir.name},
        "sections": {s.name: {"changed": bool(s.changes), "summary": s.summary, "breaks": s.breaks,
                              "changes": [{"change": c.what, "what": c.which, "old": c.old, "new": c.new}
                                          for c in s.changes]} for s in sections},
        "renames": {"layers": renames.layers, "ambiguous": renames.ambiguous},
        "map": mapping,
        "checkpoint_with_map": after_map.summary if after_map is not None else None,
        "resume": None if resumed is None else {"accepted": resumed.accepted, "reasons": resumed.reasons},
    }
