"""`specgen infer`: an exported model on arrays from an .npz, with onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specgen.diagnostics import Diagnostic, SpecError
from specgen.runtime.predictor import InputError, Predictor


def _feeds(npz: np.lib.npyio.NpzFile, names: list[str], mapping: list[str], path: Path) -> dict[str, np.ndarray]:
    chosen = {name: name for name in names}
    for item in mapping:
        input_name, sep, array = item.partition("=")
        if not sep or input_name not in chosen:
            raise SpecError([Diagnostic(f"--feed {item}", None, f"expected INPUT=ARRAY with INPUT one of {names}")])
        chosen[input_name] = array
    missing = [a for a in chosen.values() if a not in npz.files]
    if missing:
        raise SpecError([Diagnostic(str(path), None, f"no array {missing} in the .npz (arrays: {', '.join(npz.files)}); "
                                    "use --feed INPUT=ARRAY to pick one")])
    return {name: npz[array] for name, array in chosen.items()}


def infer(model: Path, input_path: Path, output: Path | None, provider: str, feed: list[str],
          labels: str | None) -> int:
    try:
        predictor = Predictor(model, provider=provider)
    except InputError as exc:
        raise SpecError([Diagnostic(str(model), None, str(exc))]) from None
    except Exception as exc:  # onnxruntime raises its own exception types for unreadable models
        raise SpecError([Diagnostic(str(model), None, f"cannot load the model: {exc}")]) from None
    with np.load(input_path, allow_pickle=False) as npz:
        feeds = _feeds(npz, list(predictor.inputs), feed, input_path)
        label_values = npz[labels] if labels else None
    try:
        outputs = predictor(feeds)
    except InputError as exc:
        raise SpecError([Diagnostic(str(input_path), None, str(exc))]) from None
    note = " (CUDA was asked for but could not start: CUDA/cuDNN libraries missing?)" if predictor.fell_back else ""
    print(f"provider: {predictor.provider}{note}")
    for name, value in outputs.items():
        print(f"output {name}: shape {list(value.shape)}, dtype {value.dtype}")
    if label_values is not None:
        first = outputs[predictor.outputs[0]]
        accuracy = float(np.mean(np.argmax(first, axis=-1) == label_values.reshape(-1)))
        print(f"accuracy of '{predictor.outputs[0]}' against '{labels}': {accuracy:.4f} on {len(label_values)} examples")
    if output is not None:
        np.savez(output, **outputs)
        print(f"wrote {output}")
    return 0
