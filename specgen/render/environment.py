"""The one jinja2 environment factory and its filters.

Templates only loop and place: every name and literal they emit was computed in
Python (specgen/render/*_plan.py). Free-form strings reach generated Python only
through `py`, which emits a literal that `ast.literal_eval` turns back into the
same value, so a spec cannot inject code (docs/security.md).
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
from jinja2.bccache import Bucket

_PACKAGED = Path(__file__).resolve().parent.parent / "templates"  # wheels: specgen/templates
_SOURCE_TREE = Path(__file__).resolve().parents[2] / "templates"  # checkouts and editable installs


def templates_dir() -> Path:
    return _PACKAGED if _PACKAGED.is_dir() else _SOURCE_TREE


def py_literal(value: Any, docstring: bool = False) -> str:
    """A Python literal for a str/number/bool/None or a tuple/list of them."""
    kind = type(value)
    if kind is int or kind is bool or value is None:
        return repr(value)
    if kind is str:
        return _py_str(value, docstring)
    if kind is float:
        if not math.isfinite(value):
            raise ValueError(f"cannot render the non-finite number {value!r}")
        return repr(value)
    if kind is list or kind is tuple:
        if all(type(v) is int for v in value):  # shapes, strides, axes: most lists a spec renders
            return "[" + ", ".join(map(repr, value)) + "]"
        return "[" + ", ".join(py_literal(v) for v in value) + "]"
    if isinstance(value, str | int | float | tuple | list):  # subclasses (enums, named tuples): as their base
        return py_literal(_plain(value))
    raise TypeError(f"no Python literal for {kind.__name__}")


def _plain(value: Any) -> Any:
    for base in (bool, int, float, str, list, tuple):
        if isinstance(value, base):
            return base(value)
    return value


def _py_str(value: str, docstring: bool) -> str:
    if not docstring and value.isprintable() and '"' not in value and "\\" not in value:
        return '"' + value + '"'  # exact by construction: printable text without quotes or backslashes
    text = (_docstring(value) if docstring else None) or repr(value)
    # repr() and docstring forms: check the round trip (defence in depth; never expected to fail).
    if ast.literal_eval(text) != value:
        raise ValueError(f"literal {text!r} does not round-trip")
    return text


def _docstring(text: str) -> str | None:
    """Triple-quoted form for prose that needs no escapes; None otherwise."""
    if '"""' in text or "\\" in text or text.endswith('"'):
        return None
    if any(not (c.isprintable() or c == "\n") for c in text):
        return None
    return '"""' + text + '"""'


def onnx_literal(value: Any) -> str:
    """An ONNX text attribute value: numbers and lists of numbers only."""
    kind = type(value)
    if kind is int:
        return repr(value)
    if kind is bool:
        return str(int(value))
    if kind is float:
        if not math.isfinite(value):
            raise ValueError(f"cannot render the non-finite number {value!r}")
        return repr(value)
    if kind is list or kind is tuple:
        if all(type(v) is int for v in value):
            return "[" + ", ".join(map(repr, value)) + "]"
        return "[" + ", ".join(onnx_literal(v) for v in value) + "]"
    raise TypeError(f"no ONNX attribute literal for {kind.__name__}")


_PLAIN = re.compile(r"[A-Za-z0-9_/.-]*\Z")


def yaml_literal(value: Any) -> str:
    """A YAML flow scalar or list: JSON's double-quoted form is valid YAML and never ambiguous."""
    kind = type(value)
    if kind is str and _PLAIN.match(value):
        plain: str = value
        return '"' + plain + '"'  # what json.dumps gives for these characters, without its overhead
    if kind is list or kind is tuple:
        if all(type(v) is int for v in value):
            return "[" + ", ".join(map(repr, value)) + "]"
        if all(type(v) is str and _PLAIN.match(v) for v in value):
            return "[" + ", ".join('"' + v + '"' for v in value) + "]"
    return json.dumps(value, ensure_ascii=True)


class Fields(dict[str, Any]):
    """A mapping that templates read by attribute (`s.attrs.strides`, `s.w.kernel`).

    Jinja resolves `a.b` with getattr first and falls back to `a["b"]` only after an
    AttributeError; on a plain dict that costs a raised exception per lookup, thousands per
    spec. Here getattr succeeds directly. A missing key still raises AttributeError, so
    StrictUndefined reports it as before.
    """

    __slots__ = ()

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


FILTERS = {"py": py_literal, "onnx": onnx_literal, "yaml": yaml_literal}


class _QuietCache(jinja2.FileSystemBytecodeCache):
    """Jinja's file cache, where any failure to read or write an entry means "no cache" for that template.

    The cache only saves compile time: a full disk, a file-size limit, a read-only or vanished folder, or a
    corrupted entry must never fail a command (`build --check` itself writes nothing else). Jinja raises those.
    """

    def load_bytecode(self, bucket: Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception:  # OSError, or an entry another version or a crash left half-written (pickle, EOFError)
            bucket.reset()

    def dump_bytecode(self, bucket: Bucket) -> None:
        try:
            super().dump_bytecode(bucket)  # removes its own temporary file on failure
        except Exception:
            pass


def cache_folder() -> Path | None:
    """Where compiled templates are kept: $XDG_CACHE_HOME/specgen/jinja-<version>, else ~/.cache/specgen/...;
    None with SPECGEN_NO_CACHE set. A relative $XDG_CACHE_HOME is ignored, as the XDG spec says."""
    from specgen import __version__

    if os.environ.get("SPECGEN_NO_CACHE"):
        return None
    xdg, home = os.environ.get("XDG_CACHE_HOME", ""), os.path.expanduser("~")
    if os.path.isabs(xdg):
        return Path(xdg, "specgen", f"jinja-{__version__}")
    return Path(home, ".cache", "specgen", f"jinja-{__version__}") if os.path.isabs(home) else None


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """Compiled templates kept per user and specgen version: each build process skips compiling them.

    Only Jinja's compiled code is cached (keyed by template source), never rendered output; docs/cli.md
    ("The template cache") says where and how to turn it off. The folder holding the cache root ($HOME, or
    $XDG_CACHE_HOME's parent) must exist: specgen never creates a home folder (Debian's system users have
    HOME=/nonexistent, at the filesystem root). Any failure to create the folder means no cache.
    """
    folder = cache_folder()
    if folder is None:
        return None
    base = folder.parent.parent.parent  # $HOME for ~/.cache/specgen/jinja-x, the parent of $XDG_CACHE_HOME
    try:
        if not base.is_dir():
            return None
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return _QuietCache(str(folder)) if os.access(folder, os.W_OK) else None


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        bytecode_cache=_bytecode_cache(),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
        auto_reload=False,  # templates do not change during a build; skip the per-lookup stat
    )
    env.filters.update(FILTERS)
    return env
