"""Words for a model file that onnxruntime cannot load, in the user's terms (`specgen infer`, `specgen serve`).

onnxruntime's own text (`[ONNXRuntimeError] : 7 : INVALID_PROTOBUF : Load model from x failed:Protobuf parsing
failed.`) says neither what the file is nor what to do. The usual cause is a file that is no ONNX model at
all, most often the .npz given first by mistake: the file's first bytes tell what it is.
"""

from __future__ import annotations

from pathlib import Path

from specgen.runtime.sources.npz import NPY_MAGIC, ZIP_MAGICS

EXPECTED = "expected an .onnx model written by specgen export"
ORDER = "MODEL comes first, then --input: specgen infer MODEL.onnx --input DATA.npz"
SNIFF = 4096  # bytes read to tell what a file is
# The kinds of data file `--input` reads: given as MODEL, the arguments were most likely swapped.
DATA = ("an .npz archive", "an .npy array")


def unloadable(model: Path, exc: Exception, arguments: bool = True) -> str:
    """The message for `model`, which onnxruntime refused with `exc`; `arguments`: the file was named on the command
    line (infer), so a data file there means the arguments were swapped."""
    what, text = _what(model), str(exc)
    if what is None and "INVALID_PROTOBUF" in text:
        what = "onnxruntime cannot parse it: a damaged model or another format"
    if what is None:  # an ONNX model it refuses (an opset, an op it lacks): its words say which
        return f"onnxruntime cannot load the model: {text}"
    swapped = arguments and what.removeprefix("it is ") in DATA
    return f"not an ONNX model ({what}); {ORDER if swapped else EXPECTED}"


def _what(path: Path) -> str | None:
    """What the file is, from its first bytes, when that is easily known and no ONNX model; None otherwise."""
    try:
        with path.open("rb") as file:
            head = file.read(SNIFF)
    except OSError:
        return None
    if not head:
        return "it is empty"
    if head.startswith(ZIP_MAGICS):
        return "it is an .npz archive" if path.suffix.lower() == ".npz" else "it is a zip archive"
    if head.startswith(NPY_MAGIC):
        return "it is an .npy array"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        text = ""  # binary, or a multi-byte character cut at SNIFF: decided below
    # A model's protobuf starts with a field tag byte below 0x20 (ir_version: 0x08): never printable text.
    return "it is a text file" if text and all(c.isprintable() or c in "\t\r\n" for c in text) else None
