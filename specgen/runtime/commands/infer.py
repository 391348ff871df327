"""`specgen infer`: an exported model on arrays from an .npz, with onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specgen.atomic import refuse_links, write_atomic
from specgen.diagnostics import Diagnostic, SpecError
from specgen.paths import shown
from specgen.runtime.graph_runs import ORT_ERRORS, failure_detail, predictor_batch, run_rows
from specgen.runtime.parity import accuracy
from specgen.runtime.predictor import InputError, Predictor
from specgen.runtime.sources.base import DataError
from specgen.runtime.sources.npz import npz_array, npz_bytes, open_npz


def _feeds(npz: np.lib.npyio.NpzFile, names: list[str], mapping: list[str], path: Path) -> dict[str, np.ndarray]:
    chosen = {name: name for name in names}
    for item in mapping:
        input_name, sep, array = item.partition("=")
        if not sep or input_name not in chosen:
            raise SpecError([Diagnostic(f"--feed {item}", None, f"expected INPUT=ARRAY with INPUT one of {names}")])
        chosen[input_name] = array
    missing = [a for a in chosen.values() if a not in npz.files]
    if missing:
        raise SpecError([Diagnostic(shown(path), None, f"no array {missing} in the .npz (arrays: {', '.join(npz.files)}); "
                                    "use --feed INPUT=ARRAY to pick one")])
    return {name: _array(npz, array, path) for name, array in chosen.items()}


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
                                        f"{', '.join(npz.files)})")])
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


def _run(predictor: Predictor, feeds: dict[str, np.ndarray], path: Path) -> dict[str, np.ndarray]:
    """The model on every row of the .npz: a model with a fixed batch (export.onnx.dynamic_batch: false) takes
    them in chunks of it, as export's checks ran it. An input the model refuses is one line at the .npz, whether
    Predictor's check or onnxruntime refuses it (an id past an embedding's vocabulary: docs/serve.md)."""
    try:
        return run_rows(predictor, feeds)
    except InputError as exc:
        raise SpecError([Diagnostic(shown(path), None, str(exc))]) from None
    except ORT_ERRORS as exc:
        detail = failure_detail(exc)
        raise SpecError([Diagnostic(shown(path), None, f"onnxruntime refused these inputs: {detail}")]) from None


def infer(model: Path, input_path: Path, output: Path | None, provider: str, feed: list[str],
          labels: str | None) -> int:
    target = npz_target(output) if output is not None else None
    try:
        predictor = Predictor(model, provider=provider)
    except InputError as exc:
        raise SpecError([Diagnostic(shown(model), None, str(exc))]) from None
    except Exception as exc:  # onnxruntime raises its own exception types for unreadable models
        raise SpecError([Diagnostic(shown(model), None, f"cannot load the model: {exc}")]) from None
    feeds, label_values = _read_input(input_path, list(predictor.inputs), feed, labels)
    outputs = _run(predictor, feeds, input_path)
    note = " (CUDA was asked for but could not start: CUDA/cuDNN libraries missing?)" if predictor.fell_back else ""
    print(f"provider: {predictor.provider}{note}")
    batch, rows = predictor_batch(predictor), len(next(iter(feeds.values())))
    if batch is not None and rows != batch:
        print(f"batch: the model's batch is fixed to {batch} (export.onnx.dynamic_batch: false); ran the {rows} rows "
              f"{'one at a time' if batch == 1 else f'{batch} at a time'}")
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
