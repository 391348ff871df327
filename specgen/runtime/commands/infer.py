"""`specgen infer`: an exported model on arrays from an .npz, with onnxruntime, in chunks of rows.

The input is run in chunks (`chunk_rows`), never as one batch: onnxruntime holds every intermediate activation of
a run, tens of times the input's size (a 1 GiB input of 8x8 digits reached 22.9 GB in one run), so one run of a
large file could exhaust the machine. The outputs are kept for the whole input (the accuracy and --output read
them), so their size is bounded too: over MAX_OUTPUT_BYTES the command refuses before the input is run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from specgen.atomic import refuse_links, write_atomic
from specgen.diagnostics import Diagnostic, SpecError, closest, did_you_mean
from specgen.paths import shown
from specgen.runtime.graph_runs import ORT_ERRORS, failure_detail, predictor_batch, run_rows
from specgen.runtime.model_file import EXPECTED, unloadable
from specgen.runtime.parity import accuracy
from specgen.runtime.predictor import InputError, Predictor, empty_batch, shape_shown
from specgen.runtime.sources.base import MISSING, DataError, file_kind
from specgen.runtime.sources.npz import npz_array, npz_bytes, open_npz


def _feeds(npz: np.lib.npyio.NpzFile, names: list[str], mapping: list[str], path: Path) -> dict[str, np.ndarray]:
    chosen, fed = {name: name for name in names}, set[str]()
    for item in mapping:
        input_name, sep, array = item.partition("=")
        if not sep or input_name not in chosen:
            inputs = ", ".join(f"'{n}'" for n in names)
            hint = did_you_mean(input_name, names) if len(names) > 1 else ""
            raise SpecError([Diagnostic(f"--feed {item}", None, f"the model has no input '{input_name}' (its inputs: "
                                        f"{inputs}); expected INPUT=ARRAY with INPUT one of them{hint}")])
        chosen[input_name] = array
        fed.add(input_name)
    missing = [_no_array(npz, name, array, name in fed, path) for name, array in chosen.items() if array not in npz.files]
    if missing:
        raise SpecError(missing)
    return {name: _array(npz, array, path) for name, array in chosen.items()}


def _no_array(npz: np.lib.npyio.NpzFile, name: str, array: str, fed: bool, path: Path) -> Diagnostic:
    """The line for model input `name`'s array `array`, which the .npz lacks: a --feed's is a misspelling to
    correct; the input's own name means the arrays are named otherwise, which --feed maps."""
    arrays, close = ", ".join(npz.files) or "none", closest(array, npz.files)
    if fed:
        hint = f"; did you mean '{close}'?" if close else ""
        return Diagnostic(shown(path), None, f"--feed {name}={array}: no array '{array}' in the .npz (its arrays: "
                                             f"{arrays}){hint}")
    pick = close or "ARRAY"
    return Diagnostic(shown(path), None, f"no array '{array}' for model input '{name}' in the .npz (its arrays: "
                                         f"{arrays}); pick one with --feed {name}={pick}")


def _array(npz: np.lib.npyio.NpzFile, name: str, path: Path) -> np.ndarray:
    """One array of the input .npz; an object array or a damaged member is an error line, not a traceback."""
    try:
        return npz_array(npz, name)
    except DataError as exc:
        raise SpecError([Diagnostic(shown(path), None, str(exc))]) from None


def _read_input(path: Path, names: list[str], feed: list[str],
                labels: str | None) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """Feeds and labels from the --input .npz, which is read without pickles and checked like a data source."""
    try:
        npz = open_npz(path)
    except DataError as exc:
        raise SpecError([Diagnostic(shown(path), None, str(exc))]) from None
    with npz:
        feeds = _feeds(npz, names, feed, path)
        if labels is not None and labels not in npz.files:
            raise SpecError([Diagnostic(shown(path), None, f"--labels: no array '{labels}' in the .npz (arrays: "
                                        f"{', '.join(npz.files)}){did_you_mean(labels, npz.files)}")])
        return feeds, (_array(npz, labels, path) if labels is not None else None)


def _accuracy(output: str, logits: np.ndarray, labels: str, values: np.ndarray, path: Path) -> float:
    """The accuracy, or an error line when it would mean nothing (NaN outputs, bad or too few labels)."""
    try:
        return accuracy(logits, values, output)
    except ValueError as exc:
        raise SpecError([Diagnostic(shown(path), None, f"accuracy of '{output}' against '{labels}': {exc}")]) from None


def npz_target(output: Path) -> Path:
    """Where the outputs go: np.savez's rule, `.npz` added unless the name has it; checked before any work.

    Refuses a link, a folder or a device there (UnsafePathError) before the model even loads,
    so a mistake in --output costs no inference and leaves nothing half-written.
    """
    target = output if output.name.endswith(".npz") else output.with_name(output.name + ".npz")
    refuse_links(target)
    return target


def _save(target: Path, outputs: dict[str, np.ndarray]) -> None:
    """The .npz built in memory, then written atomically (np.savez itself would follow a link)."""
    write_atomic(target, npz_bytes(outputs))  # not np.savez(**outputs): outputs named `file`, `allow_pickle` clash


# A chunk holds at most CHUNK_ROWS rows and CHUNK_BYTES of inputs and outputs (at least one row): onnxruntime's
# intermediate activations grow with the rows of a run. 1024 rows: the export's checks and `specgen serve` run
# batches of that order; 16 MiB: 27 ResNet50 images at 224, whose activations are about 20x the input.
CHUNK_ROWS, CHUNK_BYTES = 1024, 16 * 2**20
MAX_OUTPUT_BYTES = 2**30  # the outputs of the whole input, held in memory (twice, with --output)


@contextmanager
def _refusing(path: Path) -> Iterator[None]:
    """An input the model refuses is one line at the .npz, whether Predictor's check or onnxruntime refuses it (an id
    past an embedding's vocabulary: docs/serve.md)."""
    try:
        yield
    except InputError as exc:
        raise SpecError([Diagnostic(shown(path), None, str(exc))]) from None
    except ORT_ERRORS as exc:
        detail = failure_detail(exc)
        raise SpecError([Diagnostic(shown(path), None, f"onnxruntime refused these inputs: {detail}")]) from None


def _same_rows(feeds: dict[str, np.ndarray], predictor: Predictor) -> None:
    """Rows in every input, at least one, as many as the first's (Predictor.check says so of a whole run; a fixed
    batch runs in pieces, each checked alone, cut by the first input's rows)."""
    for name, array in feeds.items():
        if not np.ndim(array):  # a single value has no rows to cut (len() of it was a traceback)
            raise InputError(f"input '{name}': received shape [], expected {shape_shown(predictor.inputs[name][0])}")
    (first, array), *rest = feeds.items()
    if not len(array):
        raise InputError(empty_batch(first, np.shape(array)))
    for name, other in rest:
        if len(other) != len(array):
            raise InputError(f"input '{name}': received batch size {len(other)} (shape {list(np.shape(other))}), "
                             f"expected {len(array)} like input '{first}'")


def _row_bytes(outputs: dict[str, np.ndarray], path: Path) -> int:
    """Bytes of one row of every output (from a run of one row); an output that is not one row per input row
    cannot be joined from chunks: refused."""
    for name, value in outputs.items():
        if value.ndim == 0 or value.shape[0] != 1:
            raise SpecError([Diagnostic(shown(path), None, f"output '{name}' has shape {list(value.shape)} for one "
                                        "row: not one row per input row, so specgen infer cannot run the input in "
                                        "chunks; run it with Predictor from Python")])
    return sum(value.nbytes for value in outputs.values())


def _size(count: int) -> str:
    """A byte count as people read it: 1.5 GiB, 60.0 KiB, 12 bytes."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"


def chunk_rows(rows: int, in_row: int, out_row: int, batch: int | None, asked: int | None = None) -> int:
    """Rows per run: `asked`, else the most of CHUNK_ROWS whose inputs and outputs fit CHUNK_BYTES (at least one);
    a multiple of a fixed batch (export.onnx.dynamic_batch: false), which runs in pieces of it anyway."""
    chunk = asked or max(1, min(CHUNK_ROWS, CHUNK_BYTES // max(in_row + out_row, 1)))
    if batch is not None:
        chunk = max(batch, chunk // batch * batch)
    return min(chunk, max(rows, 1))


def _run(predictor: Predictor, feeds: dict[str, np.ndarray], path: Path,
         asked: int | None = None) -> tuple[dict[str, np.ndarray], int]:
    """The model on every row of the .npz, in chunks (`chunk_rows`), and the chunk used. The outputs' size is known
    from one row before the input runs: over MAX_OUTPUT_BYTES is refused in one line."""
    batch = predictor_batch(predictor)
    with _refusing(path):
        _same_rows(feeds, predictor)  # pieces cut by the first input's rows would drop another input's extra rows unseen
        if batch is None:  # the whole input checked as one run would check it (a fixed batch: in each piece)
            feeds = predictor.check(feeds)
        rows = len(next(iter(feeds.values())))
        out_row = _row_bytes(run_rows(predictor, {k: v[:1] for k, v in feeds.items()}), path)
    if out_row * rows > MAX_OUTPUT_BYTES:
        raise SpecError([Diagnostic(shown(path), None, f"the outputs of its {rows:,} rows would take "
                                    f"{_size(out_row * rows)} ({out_row:,} bytes a row), over the "
                                    f"{_size(MAX_OUTPUT_BYTES)} specgen infer holds in memory; split the input into "
                                    f"files of at most {MAX_OUTPUT_BYTES // out_row:,} rows")])
    chunk = chunk_rows(rows, sum(v[:1].nbytes for v in feeds.values()), out_row, batch, asked)
    outputs: dict[str, np.ndarray] = {}
    with _refusing(path):
        for start in range(0, rows, chunk):  # a fixed batch: in pieces of it
            part = run_rows(predictor, {k: v[start:start + chunk] for k, v in feeds.items()})
            if not outputs:  # filled in place: never the chunks and their concatenation at once
                outputs = {n: np.empty((rows, *v.shape[1:]), v.dtype) for n, v in part.items()}
            for name, value in part.items():
                outputs[name][start:start + len(value)] = value
    return outputs, chunk


def infer(model: Path, input_path: Path, output: Path | None, provider: str, feed: list[str],
          labels: str | None, chunk: int | None = None) -> int:
    """`chunk`: rows per run (--chunk), else `chunk_rows`'s choice."""
    target = npz_target(output) if output is not None else None
    if file_kind(model) == MISSING:  # onnxruntime's own words for it are a multi-part NO_SUCHFILE text
        raise SpecError([Diagnostic(shown(model), None, f"no such file; {EXPECTED}")])
    try:
        predictor = Predictor(model, provider=provider)
    except InputError as exc:
        raise SpecError([Diagnostic(shown(model), None, str(exc))]) from None
    except Exception as exc:  # onnxruntime raises its own exception types for unreadable models
        raise SpecError([Diagnostic(shown(model), None, unloadable(model, exc))]) from None
    feeds, label_values = _read_input(input_path, list(predictor.inputs), feed, labels)
    outputs, chunk = _run(predictor, feeds, input_path, chunk)
    note = " (CUDA was asked for but could not start: CUDA/cuDNN libraries missing?)" if predictor.fell_back else ""
    print(f"provider: {predictor.provider}{note}")
    batch, rows = predictor_batch(predictor), len(next(iter(feeds.values())))
    if batch is not None and rows != batch:
        print(f"batch: the model's batch is fixed to {batch} (export.onnx.dynamic_batch: false); ran the {rows} rows "
              f"{'one at a time' if batch == 1 else f'{batch} at a time'}")
    elif rows > chunk:
        print(f"chunks: ran the {rows:,} rows in runs of {chunk:,}")
    for name, value in outputs.items():
        print(f"output {name}: shape {list(value.shape)}, dtype {value.dtype}")
    if labels is not None and label_values is not None:
        first = predictor.outputs[0]
        share = _accuracy(first, outputs[first], labels, label_values, input_path)
        print(f"accuracy of '{first}' against '{labels}': {share:.4f} on {label_values.size} examples")
    if target is not None:
        _save(target, outputs)
        print(f"wrote {shown(target)}")
    return 0
