"""`specgen data SPEC [--stage train|eval]`: the input pipeline as `specgen train` will run it, in the style of
`specgen report`: the source, its files and examples, the classes with their counts, what each kind adds
(decoding, streaming: `SourceDef.describe`), the augmentation and the batches' shapes.

It reads the data (the same checked read as training: runtime/data.py), so it imports TensorFlow; bad input
is the same one-line errors. Other slices add lines through the kind's `describe` hook (kinds/sources/base.py)
and each augmentation's `describe` (kinds/augment); a reader that knows its classes without reading the
examples (a class folder) fills `Source.classes`, otherwise the classes are counted in one pass over the labels.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from specgen import text
from specgen.diagnostics import Diagnostic, SpecError
from specgen.ir.model import ModelIR
from specgen.ir.resolve import build_ir
from specgen.kinds import augment
from specgen.kinds.features import accumulate
from specgen.kinds.sources import kind_of
from specgen.paths import shown
from specgen.runtime import data
from specgen.runtime.sources.base import Source, source_text
from specgen.runtime.sources.context import SourceContext
from specgen.spec.load import LoadedSpec, load_spec

SHOWN_FILES = 5  # files listed by name; the rest are counted
COUNT_BATCH = 4096  # labels counted together (a label is a class id: 8 bytes each)


def run_data(path: Path, stage: str) -> int:
    loaded = load_spec(path)
    ir = build_ir(loaded)
    if ir.training is None or stage not in ir.training.data:
        raise SpecError([Diagnostic(shown(path), None, f"the spec has no data.{stage} section; `specgen data` shows "
                                    f"a declared stage (--stage train or eval)")])
    source = data.read_stage(loaded, ir, stage)
    assert source is not None
    print(describe(loaded, ir, stage, source, shown(path)))
    return 0


def describe(loaded: LoadedSpec, ir: ModelIR, stage: str, source: Source, path: str) -> str:
    """The report: a title line, then one `key  value` row per fact."""
    model = getattr(loaded.spec.data, stage)
    kind = kind_of(model)
    facts = ir.training.data[stage] if ir.training is not None else None
    assert facts is not None
    sections = {"source": [kind.report(source_text(loaded, facts, _path), facts.features, facts.labels)],
                "files": [_files(source, facts.path)],
                "examples": [f"{source.examples:,}"],
                "classes": _classes(loaded, ir, stage, source),
                kind.name: kind.describe(model),
                "augment": augment_lines(model, stage),
                "batches": _batches(ir, stage, source)}
    rows = [[key if i == 0 else "", line] for key, lines in sections.items() for i, line in enumerate(lines)]
    return f"{ir.name} ({path}): data.{stage}\n\n" + "\n".join(text.table_lines(["", ""], rows)[2:])


def _path(path: Path) -> str:
    return shown(os.path.normpath(path))


def _files(source: Source, path: Path) -> str:
    files = source.files or (path,)
    names = [_path(f) for f in files[:SHOWN_FILES]] + ([f"... ({len(files) - SHOWN_FILES} more)"]
                                                       if len(files) > SHOWN_FILES else [])
    return f"{len(files)}: {', '.join(names)}"


def _classes(loaded: LoadedSpec, ir: ModelIR, stage: str, source: Source) -> list[str]:
    """`<n> classes of label '<name>'` and the count of each: from the reader, or one pass over the labels."""
    wanted = SourceContext(loaded, ir, stage).expected()
    sparse = [name for name, want in wanted.items() if want.bound is not None and name not in
              {i.name for i in ir.inputs}]
    if not sparse:
        return []
    label, bound = sparse[0], wanted[sparse[0]].bound
    assert bound is not None
    counts = dict(source.classes) if source.classes is not None else _count(source, label, bound)
    shown_counts = ", ".join(f"{name}: {count:,}" for name, count in counts.items())
    return [f"{len(counts)} of label '{label}': {shown_counts}"]


def _count(source: Source, label: str, bound: int) -> dict[str, int]:
    # Only the label is batched: batching whole examples would hold COUNT_BATCH of them, features and all.
    counts = np.zeros(bound, np.int64)
    for labels in source.dataset.map(lambda _, labels: labels[label]).batch(COUNT_BATCH):
        counts += np.bincount(labels.numpy().reshape(-1), minlength=bound)[:bound]
    return {str(i): int(c) for i, c in enumerate(counts)}


def augment_lines(model: Any, stage: str) -> list[str]:
    """The source's `augment` entries, one a line as `specgen report` shows them (kinds/augment's describe)."""
    entries = getattr(model, "augment", None) or []
    if not entries:
        return ["none" if stage == "train" else "none (augmentation runs on training batches only)"]
    return [f"{i}. {augment.describe(entry)}" for i, entry in enumerate(entries, 1)]


def _updates(examples: int, size: int, train: Any) -> str:
    """With train.accumulate K the pass is cut into whole updates of K micro-batches (runtime/data.py): how
    many, and the micro-batches left out of the pass; nothing to add when every batch is its own update."""
    micro = accumulate.of(train)
    if micro == 1:
        return ""
    updates = data.updates_per_pass(examples, size, micro)
    left = examples // size - updates * micro
    return f", {updates:,} updates of {micro} (train.accumulate; {left:,} left out of the pass)"


def _rotation(source: Source, size: int, train: Any) -> str:
    """Which examples a pass leaves out, where a fixed order would leave out the same ones every pass: the buffer
    is smaller than the pass, so the positions left out rotate (runtime/data.py); nothing to add otherwise."""
    micro = accumulate.of(train)
    if not data.rotates(source, size, micro, train.shuffle_buffer):
        return ""
    left = data.left_out(source, size, micro)
    return (f"; the {left:,} examples left out of a pass rotate from pass to pass (buffer {train.shuffle_buffer:,} < "
            f"{source.examples:,} examples), so every example is trained on over the passes")


def _batches(ir: ModelIR, stage: str, source: Source) -> list[str]:
    """Each tensor of a batch: its name, shape (batch first) and dtype, from the pipeline itself."""
    train = ir.training.train if ir.training is not None else None
    size = (train.batch_size if train is not None else None) or source.examples
    if stage == "train" and train is not None:
        batches = data.training_batches(source, size, train.seed, train.shuffle_buffer, accumulate.of(train))
        how = (f"{size} examples, full batches only, shuffled (buffer {min(train.shuffle_buffer, source.examples):,}"
               f", seed {train.seed}): {source.examples // size:,} a pass{_updates(source.examples, size, train)}"
               f"{_rotation(source, size, train)}")
    else:
        batches = data.eval_batches(source, size)
        smaller = ", the last one smaller" if source.examples % size else ""
        how = f"{size} examples in order{smaller}: {-(-source.examples // size):,} a pass"
    features, labels = batches.element_spec
    tensors = [f"{n} {text.shape(s.shape.as_list(), unknown='N')} {s.dtype.name}"
               for n, s in {**features, **labels}.items()]
    return [how, *tensors]


