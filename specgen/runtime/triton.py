"""A Triton Inference Server model repository for an exported model (onnxruntime backend).

Layout: `<root>/<spec name>/config.pbtxt` and `<root>/<spec name>/<version>/model.onnx`; exporting
again into the same repository adds the next version folder (write_repository). Two exports into one repository
at once are ordered by `<root>/.specgen-export.lock` (render/build_lock.py, as builds are): the next version is
chosen and written under it, so two never take the same number, and what a killed export left in the model's
folders is removed under it (`remove_leftovers`).
No TensorFlow here. Tensor names are the ONNX graph's: inputs by input name, outputs by
output name. With a dynamic batch, `dims` leave the batch out (Triton adds it because
max_batch_size > 0); a graph exported with a fixed batch of 1 gets max_batch_size 0,
full dims and no dynamic batching, since Triton cannot batch requests into it.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from specgen import text
from specgen.atomic import TEMP_NAME, checked_folder, pid_alive, read_regular, refuse_links, write_atomic
from specgen.atomic import kind as path_kind
from specgen.errors import SpecgenError
from specgen.ir.exported import exported
from specgen.ir.model import ModelIR, Shape
from specgen.paths import plain_name, shown
from specgen.render.build_lock import locked
from specgen.runtime.file_set import write_set
from specgen.serve.coupling import rows_coupled
from specgen.serve.repository import MAX_VERSION, version_number


class RepositoryRefused(SpecgenError, ValueError):
    """What `specgen export --triton` will not write into a model repository (the message says why and what to do);
    raised before anything is written. A ValueError too, for callers that caught that before."""


# config.pbtxt parameter saying why a model is written without dynamic_batching (config_text's `rows_coupled`)
BATCHING_PARAMETER = "specgen_dynamic_batching"
TRITON_DTYPES = {"float32": "TYPE_FP32", "int32": "TYPE_INT32", "int64": "TYPE_INT64", "uint8": "TYPE_UINT8"}
ONNX_ELEM_TYPES = {"float32": onnx.TensorProto.FLOAT, "int32": onnx.TensorProto.INT32, "int64": onnx.TensorProto.INT64,
                   "uint8": onnx.TensorProto.UINT8}


def _quote(text: str) -> str:
    """A protobuf text-format string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _ints(values: tuple[int, ...] | list[int]) -> str:
    return "[ " + ", ".join(map(str, values)) + " ]" if values else "[ ]"


def _tensor(name: str, dtype: str, shape: Shape, batch: int | None, last: bool) -> list[str]:
    """One `input` / `output` entry: `batch` None leaves the batch out, else it is the first dim.

    A per-example scalar under batching becomes dims [1] reshaped to [], as Triton asks.
    """
    if dtype not in TRITON_DTYPES:
        raise RepositoryRefused(f"tensor '{name}' has dtype {dtype}; Triton configs are written for "
                                f"{', '.join(TRITON_DTYPES)}")
    # -1: open, the batch and named dynamic dimensions (kinds/dims.py) alike
    dims = [d if isinstance(d, int) else -1 for d in (shape[1:] if batch is None else (batch, *shape[1:]))]
    lines = ["  {", f"    name: {_quote(name)}", f"    data_type: {TRITON_DTYPES[dtype]}"]
    if dims:
        lines.append(f"    dims: {_ints(dims)}")
    else:
        lines += ["    dims: [ 1 ]", "    reshape: { shape: [ ] }"]
    lines.append("  }" if last else "  },")
    return lines


def _check_batching(max_batch_size: int, max_queue_delay_us: int, preferred: tuple[int, ...]) -> None:
    if max_batch_size < 0:
        raise RepositoryRefused(f"max_batch_size must be 0 (no batching) or positive; received {max_batch_size}")
    if max_queue_delay_us < 0:
        raise RepositoryRefused(f"max_queue_delay_us must be 0 or more microseconds; received {max_queue_delay_us}")
    bad = [p for p in preferred if not 1 <= p <= max_batch_size]
    if bad:
        raise RepositoryRefused(f"preferred batch sizes must lie in 1..max_batch_size ({max_batch_size}); received {bad}")


def config_text(ir: ModelIR, max_batch_size: int = 64, max_queue_delay_us: int = 1000,
                preferred: tuple[int, ...] = (), parameters: Mapping[str, str] | None = None,
                rows_coupled: str | None = None) -> str:
    """A deterministic `config.pbtxt` serving the exported `model.onnx` with onnxruntime.

    `parameters`: Triton's free-form `parameters` map (specgen_precision / specgen_verified mark a precision
    variant, runtime/precision/verify.py); Triton shows the ones its backend does not know and ignores them.
    `rows_coupled`: why the rows of one run of the model depend on each other (serve/coupling.py: a dynamically
    quantized int8 variant computes one activation scale over the whole batch), or None. Such a model keeps
    `max_batch_size` (a request may hold that many rows) but gets no `dynamic_batching`, so neither Triton nor
    `specgen serve` joins unrelated requests in one run; the parameter `specgen_dynamic_batching` says why.
    """
    _check_batching(max_batch_size, max_queue_delay_us, preferred)
    lines = [text.header(ir.source, "specgen export --triton")]  # a file name can hold a newline
    if not ir.dynamic_batch and max_batch_size > 0:
        lines.append("# The graph has a fixed batch of 1 (export.onnx.dynamic_batch: false), so Triton does not batch it.")
        max_batch_size, preferred = 0, ()
    batched = max_batch_size > 0
    joined = batched and rows_coupled is None
    if batched and not joined:
        lines.append("# No dynamic_batching: requests joined in one run would change each other's answers "
                     "(parameter specgen_dynamic_batching).")
        parameters = {**(parameters or {}), BATCHING_PARAMETER: f"off: {rows_coupled}"}
    batch = None if batched else (-1 if ir.dynamic_batch else 1)
    view = exported(ir)  # the model.onnx tensors: export.onnx.outputs and the inputs they read
    inputs = [(i.onnx_name, i.dtype, i.shape) for i in view.inputs]
    outputs = [(out, view.node(layer).dtype, view.node(layer).shape) for out, layer in view.outputs.items()]
    lines += [f"name: {_quote(ir.name)}", 'backend: "onnxruntime"', f"max_batch_size: {max_batch_size}"]
    for field, tensors in (("input", inputs), ("output", outputs)):
        lines.append(f"{field} [")
        for k, (name, dtype, shape) in enumerate(tensors):
            lines += _tensor(name, dtype, shape, batch, last=k == len(tensors) - 1)
        lines.append("]")
    if joined:
        lines.append("dynamic_batching {")
        if preferred:
            lines.append(f"  preferred_batch_size: {_ints(sorted(set(preferred)))}")
        lines += [f"  max_queue_delay_microseconds: {max_queue_delay_us}", "}"]
    lines.append("instance_group [ { kind: KIND_AUTO count: 1 } ]")
    lines += [f"parameters: {{ key: {_quote(k)} value: {{ string_value: {_quote(v)} }} }}"
              for k, v in sorted((parameters or {}).items())]
    return "\n".join(lines) + "\n"


def check_model_matches(ir: ModelIR, model_bytes: bytes) -> None:
    """Raise ValueError unless the model's graph inputs and outputs are the config's tensors."""
    graph = onnx.load_from_string(model_bytes).graph
    weights = {t.name for t in graph.initializer}
    actual = {
        "input": {v.name: v.type.tensor_type.elem_type for v in graph.input if v.name not in weights},
        "output": {v.name: v.type.tensor_type.elem_type for v in graph.output},
    }
    expected = {
        "input": {i.onnx_name: ONNX_ELEM_TYPES[i.dtype] for i in exported(ir).inputs},
        "output": {out: ONNX_ELEM_TYPES[ir.node(layer).dtype] for out, layer in exported(ir).outputs.items()},
    }
    for kind in ("input", "output"):
        if actual[kind] != expected[kind]:
            hint = (" (weights are graph inputs: this looks like the built model.onnx; pass the one "
                    "`specgen export` writes)" if kind == "input" and len(actual[kind]) > len(expected[kind]) else "")
            raise RepositoryRefused(f"model.onnx {kind}s are {_describe(actual[kind])}; the spec '{ir.name}' declares "
                                    f"{_describe(expected[kind])}{hint}")


def _describe(tensors: Mapping[str, int]) -> str:
    return "[" + ", ".join(f"{name}: {onnx.TensorProto.DataType.Name(t)}" for name, t in tensors.items()) + "]"


# `default_model_filename: "NAME"` outside a comment (protobuf's text format also takes single quotes).
_FILENAME = re.compile(r"""^[^#\n]*\bdefault_model_filename\s*:\s*(?:"([^"\n]*)"|'([^'\n]*)')""", re.MULTILINE)


def _check_model_filename(root: Path, config_file: Path) -> None:
    """Refuse a model whose hand-written config.pbtxt serves another file name than the model.onnx export writes: a
    new version would hold a file the server does not read, and version 1 a second model beside the served one."""
    real = checked_folder(root, config_file.parent, create=False) / config_file.name
    if path_kind(real, config_file) != "file":
        return
    text = (read_regular(real, config_file) or b"").decode("utf-8", "replace")
    if "default_model_filename" not in text:
        return
    found = _FILENAME.search(text)
    name = next((g for g in found.groups() if g is not None), None) if found else None
    if name not in ("", "model.onnx"):
        shown_name = repr(name) if name is not None else "(a value this reader cannot read)"
        raise RepositoryRefused(f"{shown(config_file)} serves default_model_filename {shown_name}; specgen export writes "
                                "model.onnx, which the server would not read: export into another repository, or set "
                                "default_model_filename to \"model.onnx\" (or remove it) first")


def _existing_versions(root: Path, folder: Path) -> list[int]:
    """The version folders of `folder` holding a model.onnx, ascending; none when it is absent. No link is followed."""
    real = checked_folder(root, folder, create=False)
    if not real.is_dir():
        return []
    found = {version_number(p.name): p for p in real.iterdir()}  # the names a server reads as versions (serve/)
    return sorted(v for v, p in found.items() if v is not None and path_kind(p, folder / p.name) == "folder"
                  and path_kind(p / "model.onnx", folder / p.name / "model.onnx") == "file")


def _signature(model_bytes: bytes) -> dict[str, dict[str, tuple[int, tuple[int, ...]]]]:
    """A model's data inputs and its outputs: name -> (ONNX element type, dims with -1 for a named or open one)."""
    graph = onnx.load_from_string(model_bytes).graph
    weights = {t.name for t in graph.initializer}

    def entry(value: onnx.ValueInfoProto) -> tuple[int, tuple[int, ...]]:
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in value.type.tensor_type.shape.dim)
        return value.type.tensor_type.elem_type, dims

    return {"inputs": {v.name: entry(v) for v in graph.input if v.name not in weights},
            "outputs": {v.name: entry(v) for v in graph.output}}


def _describe_signature(signature: dict[str, dict[str, tuple[int, tuple[int, ...]]]]) -> str:
    return "; ".join(f"{kind} " + ", ".join(f"{name}: {onnx.TensorProto.DataType.Name(t)} {list(dims)}"
                                            for name, (t, dims) in tensors.items())
                     for kind, tensors in signature.items())


def _check_next_version(root: Path, folder: Path, newest: int, model_bytes: bytes) -> None:
    """Raise ValueError unless `model_bytes` has the inputs and outputs of the newest version already in `folder`."""
    path = folder / str(newest) / "model.onnx"
    existing = read_regular(checked_folder(root, path.parent, create=False) / path.name, path)
    try:
        before = _signature(existing or b"")
    except Exception as exc:  # onnx's own error types for a damaged file
        raise RepositoryRefused(f"{shown(path)} cannot be read to compare it with the new version: {exc}") from None
    after = _signature(model_bytes)
    if before != after:
        raise RepositoryRefused(f"{shown(folder)} serves version {newest} with {_describe_signature(before)}; this model has "
                                f"{_describe_signature(after)}. Versions of one model share its config.pbtxt, so they must "
                                "have the same inputs and outputs: export into another repository, or remove "
                                f"{shown(folder)} first")


@dataclass(frozen=True)
class RepositoryWrite:
    """What one `write_repository` writes, every check passed: `write()` writes it.

    `version` holds the version folder's files (name -> bytes, model.onnx among them), written as one set with
    model.onnx last and removed first (runtime/file_set.py): after a kill the folder holds the old version, the
    new one, or no model.onnx (no version: Triton and `specgen serve` skip it), never a variant.json, sample or
    reference beside a model they do not describe. `config`, when written, comes after the version: a polling
    server never sees a config without its model."""

    root: Path
    folder: Path
    version: Path
    files: Mapping[str, bytes]
    config: bytes | None

    @property
    def number(self) -> int:
        """The version written: `version`'s folder name."""
        return int(self.version.name)

    def write(self, since: float | None = None) -> Path:
        """Write the version (and config); `root/<name>`. Call it under `locked(root, "export")`, taken before
        `plan_repository` chose the version. `since`: when that lock was taken; the temporaries a killed export
        left in the model's folders (older than it) are removed first (`remove_leftovers`)."""
        if since is not None:
            remove_leftovers(self.root, self.folder, since)
        write_set(self.version, self.files, last="model.onnx", root=self.root)
        if self.config is not None:
            write_atomic(self.folder / "config.pbtxt", self.config, root=self.root)
        return self.folder


def remove_leftovers(root: Path, folder: Path, since: float, names: Iterable[str] | None = None) -> list[Path]:
    """Remove the temporaries a killed writer left in `folder` and its version folders (`.NAME.<pid>.<hex>.tmp`,
    atomic.TEMP_NAME; with `names`, only those of these files, in `folder` alone); their paths.

    Called under the export lock, taken at `since`: every export writing here holds it, so a temporary older than
    it is no live export's. Its pid must be gone too (a writer that took no lock, here). Regular files only, never
    through a link. Without this, one left in a version folder stayed for ever: atomic.remove_stale_temps runs only
    when that file is written again, and no export writes into an earlier version again."""
    real = checked_folder(root, folder, create=False)
    if not real.is_dir():
        return []
    folders = [real] if names is not None else [real, *(p for p in real.iterdir() if version_number(p.name) is not None
                                                       and path_kind(p, folder / p.name) == "folder")]
    wanted = None if names is None else set(names)
    removed = []
    for where in folders:
        for entry in os.scandir(where):
            found = TEMP_NAME.fullmatch(entry.name)
            if found is None or (wanted is not None and found["target"] not in wanted):
                continue
            if _left_behind(entry, int(found["pid"]), since):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed


def _left_behind(entry: os.DirEntry[str], pid: int, since: float) -> bool:
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:  # gone already
        return False
    return stat.S_ISREG(info.st_mode) and info.st_mtime < since and not pid_alive(pid)


def write_repository(root: Path, ir: ModelIR, model_bytes: bytes, version: int | None = None,
                     files: Mapping[str, bytes] | None = None, **config: Any) -> Path:
    """`plan_repository(...).write()` under the export lock: the model's version folder (and config.pbtxt)
    written; `root/<name>`."""
    with locked(Path(root), "export"):
        since = time.time()
        return plan_repository(root, ir, model_bytes, version, files, **config).write(since)


def plan_repository(root: Path, ir: ModelIR, model_bytes: bytes, version: int | None = None,
                    files: Mapping[str, bytes] | None = None, **config: Any) -> RepositoryWrite:
    """What writing `root/<name>/<version>/model.onnx` (and `root/<name>/config.pbtxt`) takes, every check made
    and nothing written yet: `specgen export` checks this before it writes its own files, and again under
    `locked(root, "export")`, held through `write()`: two exports choosing at once would take the same version.

    `version` None (what `specgen export --triton` passes): the next version of the model folder, 1 in a
    new one. A folder that already holds versions gets the next number beside them, after a check that
    the new model has the inputs and outputs (names, dtypes, shapes) of the newest one there (ValueError
    otherwise, nothing written), and its config.pbtxt is kept: it describes every version, and may carry
    settings written by hand (a version_policy serving several versions). A server polling the repository
    then loads the new version and swaps it in (docs/serve.md). An explicit `version` writes that folder
    and rewrites config.pbtxt.

    `config` goes to `config_text` (max_batch_size, max_queue_delay_us, preferred, parameters), with
    `rows_coupled` read from the model's graph (serve/coupling.py): a dynamically quantized variant's config has
    no dynamic_batching. A kept config.pbtxt is not rewritten for it (it serves the other versions too);
    `specgen serve` reads each version's graph and runs such a version's requests one at a time. Each file is
    written as one set with the model last (RepositoryWrite), then the config, so a polling server never sees a
    config without its model; other version folders are left alone. `files` (name -> bytes) go into the version
    folder beside the model: a precision variant's float32 reference, gate sample and variant.json
    (runtime/precision/verify.py).
    """
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or not
                                1 <= version <= MAX_VERSION):
        raise RepositoryRefused(f"version must be an integer from 1 to {MAX_VERSION} (Triton's version folders "
                                f"are int64 numbers); received {version!r}")
    if not plain_name(ir.name):
        raise RepositoryRefused(f"the spec name '{ir.name}' cannot name a model folder")
    # a graph whose rows depend on each other (dynamic quantization) is written without dynamic_batching
    text = config_text(ir, rows_coupled=rows_coupled(model_bytes), **config)  # checks the arguments first
    check_model_matches(ir, model_bytes)
    folder = Path(root) / ir.name
    config_file = folder / "config.pbtxt"
    keep_config = False
    _check_model_filename(root, config_file)
    if version is None:
        existing = _existing_versions(root, folder)
        if existing and existing[-1] >= MAX_VERSION:
            raise RepositoryRefused(f"{shown(folder)} holds version {existing[-1]}, the largest Triton's int64 versions "
                                    "allow: there is no next version; export into another repository")
        version = existing[-1] + 1 if existing else 1
        if existing:
            _check_next_version(root, folder, existing[-1], model_bytes)
            keep_config = path_kind(checked_folder(root, folder, create=False) / "config.pbtxt", config_file) == "file"
    model = folder / str(version) / "model.onnx"
    extra = {folder / str(version) / name: data for name, data in (files or {}).items()}
    if any(not plain_name(name) or name == "model.onnx" for name in files or {}):
        raise RepositoryRefused(f"files {sorted(files or {})} cannot all be written beside model.onnx; expected plain file names")
    targets = (*extra, model) if keep_config else (*extra, model, config_file)
    for target in targets:  # checked before the first write: no link below root
        refuse_links(checked_folder(root, target.parent, create=False) / target.name, target)
    version_files = {**(files or {}), "model.onnx": model_bytes}
    return RepositoryWrite(Path(root), folder, model.parent, version_files, None if keep_config else text.encode())
