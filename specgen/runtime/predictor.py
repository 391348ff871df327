"""onnxruntime sessions for exported models: provider choice, input checks, IO binding on GPU.

`auto` asks for CUDA first when the installed onnxruntime offers it. onnxruntime
falls back to the CPU silently when CUDA libraries are missing, so the provider
that actually runs is read back from the session (`Predictor.provider`).
"""

from __future__ import annotations

import ctypes.util
from pathlib import Path

import numpy as np
import onnxruntime as ort

from specgen.errors import SpecgenError
from specgen.runtime import lengths

CUDA, CPU = "CUDAExecutionProvider", "CPUExecutionProvider"
DTYPES = {"tensor(float)": np.float32, "tensor(int32)": np.int32, "tensor(int64)": np.int64, "tensor(double)": np.float64,
          "tensor(uint8)": np.uint8, "tensor(float16)": np.float16}


class InputError(SpecgenError, ValueError):
    """Inputs that do not fit the model: names, dtypes or shapes."""


def has_cuda_driver() -> bool:
    """Whether the NVIDIA driver library is present: without it CUDA cannot start, so `auto` skips it."""
    return ctypes.util.find_library("cuda") is not None


def _providers(choice: str) -> list[str]:
    available = ort.get_available_providers()
    if choice == "cpu":
        return [CPU]
    if choice == "cuda" and CUDA not in available:
        raise InputError(f"the CUDA provider is not in this onnxruntime (available: {', '.join(available)}); "
                         "install onnxruntime-gpu, or use --provider cpu")
    if choice == "cuda" or (choice == "auto" and CUDA in available and has_cuda_driver()):
        return [CUDA, CPU]
    if choice == "auto":
        return [CPU]
    raise InputError(f"unknown provider '{choice}'; expected auto, cuda or cpu")


def _check_range(name: str, array: np.ndarray, dtype: np.dtype) -> None:
    """Integers that the model's integer dtype cannot hold (300 for uint8 pixels): numpy's cast would wrap them."""
    if array.dtype == dtype or array.dtype.kind not in "iu" or dtype.kind not in "iu" or not array.size:
        return
    info, low, high = np.iinfo(dtype), array.min(), array.max()
    if low < info.min or high > info.max:
        raise InputError(f"input '{name}': received {low if low < info.min else high}, expected {dtype.name} values "
                         f"in [{info.min}, {info.max}]")


class Predictor:
    """Run an exported model: `Predictor("model.onnx")({"image": batch})` -> outputs by name."""

    def __init__(self, model: Path | str | bytes, provider: str = "auto", threads: int = 0):
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        # A failed CUDA start is logged by the default logger before any session option applies; it is
        # reported through `provider` (and by `specgen infer`) instead.
        ort.set_default_logger_severity(4)
        source = model if isinstance(model, bytes) else str(model)
        self.session = ort.InferenceSession(source, options, providers=_providers(provider))
        self.provider = self.session.get_providers()[0]
        self.fell_back = CUDA in _providers(provider) and self.provider != CUDA
        if provider == "cuda" and self.provider != CUDA:
            raise InputError("the CUDA provider could not start (CUDA or cuDNN libraries missing?); "
                             "onnxruntime fell back to the CPU. Use --provider cpu or auto to accept that.")
        self.inputs = {i.name: (tuple(i.shape), DTYPES.get(i.type, np.float32)) for i in self.session.get_inputs()}
        self.outputs = [o.name for o in self.session.get_outputs()]
        self.bounds = lengths.read(self.session.get_modelmeta().custom_metadata_map)

    def check(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The inputs as contiguous arrays of the model's dtypes, or an InputError naming what is wrong."""
        missing = sorted(set(self.inputs) - set(inputs))
        unknown = sorted(set(inputs) - set(self.inputs))
        if missing or unknown:
            raise InputError(f"inputs must be exactly {sorted(self.inputs)}; missing {missing}, unknown {unknown}")
        checked = {}
        for name, (shape, dtype) in self.inputs.items():
            array = np.asarray(inputs[name])
            if array.dtype != dtype and not np.can_cast(array.dtype, dtype, casting="same_kind"):
                raise InputError(f"input '{name}': received dtype {array.dtype}, expected {np.dtype(dtype).name}")
            _check_range(name, array, np.dtype(dtype))
            fixed = [d if isinstance(d, int) else None for d in shape]
            if array.ndim != len(shape) or any(f is not None and f != a for f, a in zip(fixed, array.shape, strict=True)):
                shown = [f if f is not None else d if isinstance(d, str) else "batch" for f, d in zip(fixed, shape, strict=True)]
                raise InputError(f"input '{name}': received shape {list(array.shape)}, expected {shown}")
            checked[name] = np.ascontiguousarray(array, dtype=dtype)
        too_long = self.too_long(checked)
        if too_long:
            raise InputError(too_long)
        return checked

    def too_long(self, inputs: dict[str, np.ndarray]) -> str | None:
        """Why an input is longer than a named dimension's bound (runtime/lengths.py), or None."""
        shapes = {n: np.shape(inputs[n]) for n in self.inputs if n in inputs}
        return lengths.violation(self.bounds, {n: s for n, (s, _) in self.inputs.items() if n in shapes}, shapes)

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        feeds = self.check(inputs)
        if self.provider != CUDA:
            return dict(zip(self.outputs, self.session.run(self.outputs, feeds), strict=True))
        binding = self.session.io_binding()  # inputs copied to the GPU once, outputs left there until read
        for name, array in feeds.items():
            binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array, "cuda", 0))
        for name in self.outputs:
            binding.bind_output(name, "cuda", 0)
        self.session.run_with_iobinding(binding)
        return dict(zip(self.outputs, binding.copy_outputs_to_cpu(), strict=True))
