"""`--set key.path=value` overrides, applied to the YAML data before validation.

Values are parsed as YAML scalars (`--set train.batch_size=32`, `--set
optimizers.head.learning_rate=1e-4`) and the result is validated like the spec
itself. A mistake in an override is reported against the override, not the file.
`--set KEY=null` removes the key (its default applies), as `key: null` in a file that
extends another does; a null that removes nothing stays a null.
"""

from __future__ import annotations

import copy
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from specgen.diagnostics import Diagnostic, SpecError, did_you_mean, quoted
from specgen.diagnostics import shown as shown_text
from specgen.spec.compose import load_composed
from specgen.spec.load import LoadedSpec, validate_data
from specgen.spec.yaml_source import parse_value


def parse_override(text: str) -> tuple[list[str | int], Any]:
    """(key path, value) of one `--set KEY.PATH=VALUE`; the value is YAML read by the spec loader,
    so it has the same bounds as a spec file (size, nesting, aliases, tags) and no others."""
    shown = f"--set {shown_text(text)}"
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise SpecError([Diagnostic(shown, None, "expected KEY.PATH=VALUE, e.g. train.batch_size=32")])
    try:
        value = parse_value(raw, shown) if raw.strip() else ""
    except SpecError as exc:  # positions are within the value, which has no file: say where in it
        raise SpecError([Diagnostic(shown, None, _in_value(d)) for d in exc.diagnostics]) from None
    problem = key_problem(key.strip())
    if problem is not None:
        raise SpecError([Diagnostic(shown, None, problem)])
    return key_parts(key.strip()), value


_KEY_PART = re.compile(r"\[([^\]]*)\]|([^.\[\]]+)")
KEY = re.compile(r"[^.\[\]]+(?:\.[^.\[\]]+|\[[^\[\]]+\])*")


def key_problem(key: str) -> str | None:
    """Why `key` is not a key path (`key_parts` would skip what it cannot read: `layers[` would name `layers`, and
    `--set layers[=3` would replace every layer with 3),
    or None."""
    if KEY.fullmatch(key):
        return None
    return (f"KEY {quoted(key)} is not a key path; expected keys joined by '.', with [NAME] selecting a named list "
            "item: train.batch_size, layers[conv1].filters, layers.0.units")




def key_parts(key: str) -> list[str | int]:
    """`layers[head/out].units` -> ['layers', '[head/out]', 'units']; `layers.3.units` -> ['layers', 3, 'units'].

    `[NAME]` selects the item of a list whose `name` is NAME (a layer, a block's layer); spec keys never hold
    brackets, so the bracketed form cannot be mistaken for a key.
    """
    parts: list[str | int] = []
    for match in _KEY_PART.finditer(key):
        named, plain = match.groups()
        parts.append(f"[{named}]" if named is not None else _part(plain))
    return parts


def _joined(parts: list[str | int]) -> str:
    """Key parts as written: `layers[conv1].filters`."""
    return "".join(p if isinstance(p, str) and p.startswith("[") else f".{p}" for p in parts).lstrip(".")


def named_item(node: Any, part: str | int) -> Any:
    """The item of list `node` that `[NAME]` selects, or None."""
    if not (isinstance(part, str) and part.startswith("[") and isinstance(node, list)):
        return None
    return next((item for item in node if isinstance(item, dict) and item.get("name") == part[1:-1]), None)


def _part(text: str) -> str | int:
    """A list index when the part is a short run of ASCII digits (`int('²')` raises, and so does
    `int()` of thousands of digits), else a mapping key."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else text


def _in_value(diagnostic: Diagnostic) -> str:
    message = diagnostic.message.replace("invalid YAML", "the value is not valid YAML", 1)
    where = diagnostic.position
    if where is None:
        return message
    return f"{message} (line {where.line}, column {where.col} of the value)" if where.line > 1 else \
        f"{message} (column {where.col} of the value)"


def apply(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    result = copy.deepcopy(data)
    for text in overrides:
        parts, value = parse_override(text)
        node: Any = result
        for i, part in enumerate(parts):
            _check_selector(text, parts, i, node)
            if i == len(parts) - 1:
                break
            if named_item(node, part) is not None:
                node = named_item(node, part)
            elif isinstance(node, list) and isinstance(part, int) and part < len(node):
                node = node[part]
            elif isinstance(node, dict):
                node = node.setdefault(part, {})
            elif isinstance(part, str) and part.startswith("[") and isinstance(node, list):
                names = [str(item.get("name")) for item in node if isinstance(item, dict) and "name" in item]
                raise SpecError([Diagnostic(f"--set {text}", None, f"no item named {quoted(part[1:-1])} in "
                                            f"'{_joined(parts[:i])}'{did_you_mean(part[1:-1], names)}")])
            else:
                raise SpecError([Diagnostic(f"--set {text}", None, f"'{_joined(parts[: i + 1])}' is not a mapping or "
                                            "list index in the spec")])
        if isinstance(node, list) and isinstance(parts[-1], int) and parts[-1] < len(node):
            node[parts[-1]] = value
        elif isinstance(node, dict) and value is None and parts[-1] in node:
            del node[parts[-1]]  # `--set KEY=null` removes the key, as `key: null` over a base does: its default applies
        elif isinstance(node, dict):
            node[parts[-1]] = value
        else:
            raise SpecError([Diagnostic(f"--set {text}", None, "cannot set a value there")])
    return result


def _check_selector(text: str, parts: list[str | int], i: int, node: Any) -> None:
    """`[NAME]` selects an item of a named list; on a mapping it would become a key named '[NAME]'."""
    part = parts[i]
    if isinstance(part, str) and part.startswith("[") and isinstance(node, dict):
        where = _joined(parts[:i]) or "the spec"
        key = _joined([*parts[:i], part[1:-1]])
        raise SpecError([Diagnostic(f"--set {text}", None, f"'{where}' is a mapping, not a list of named items: "
                                    f"write {key}, not {_joined(parts[: i + 1])}")])


def load_with_overrides(path: Path, overrides: list[str]) -> LoadedSpec:
    data, source = load_composed(path)
    if not overrides:
        return validate_data(data, source, path)
    changed = apply(data, overrides)
    try:
        loaded = validate_data(changed, source, path)
    except SpecError as exc:
        validate_data(data, source, path)  # the file's own problems come first
        shown = "--set " + " --set ".join(overrides)
        raise SpecError([Diagnostic(shown, None, d.message) for d in exc.diagnostics]) from None
    # Later checks (validate's across sections, train's of the data) name the override that set their key.
    return replace(loaded, overrides=tuple((_data_path(changed, key_parts(text.partition("=")[0].strip())), text)
                                           for text in overrides))


def _data_path(data: Any, parts: list[str | int]) -> tuple[str | int, ...]:
    """An override's key path as a location in the spec data: each `[NAME]` becomes its item's list index."""
    path: list[str | int] = []
    node = data
    for part in parts:
        item = named_item(node, part)
        if item is not None:
            part = [id(entry) for entry in node].index(id(item))  # that very item (two may be equal)
        path.append(part)
        node = _child(node, part)
    return tuple(path)


def _child(node: Any, part: str | int) -> Any:
    if isinstance(node, dict):
        return node.get(part)
    if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
        return node[part]
    return None


def overridden_learning_rates(overrides: list[str]) -> set[str]:
    """Optimizer names whose learning rate an override sets (they win over the checkpoint's)."""
    names = set()
    for text in overrides:
        parts, _ = parse_override(text)
        if len(parts) >= 3 and parts[0] == "optimizers" and parts[2] == "learning_rate":
            names.add(str(parts[1]))
    return names


def override_key(text: str) -> tuple[str, ...]:
    """The key path an override sets (`optimizers.head.learning_rate=1e-4` -> ('optimizers', 'head', 'learning_rate'))."""
    key = text.partition("=")[0]
    return tuple(part.strip() for part in key.strip().split("."))


def merge_overrides(kept: list[str], new: list[str]) -> list[str]:
    """Overrides saved with a run, then this command's; a new one replaces a kept one of the same key, or one
    above or below it (a new `a.b=1` drops a kept `a.b.c=2` and a kept `a=...`), so the two never fight."""
    keys = [override_key(text) for text in new]

    def covered(key: tuple[str, ...]) -> bool:
        return any(key[: len(other)] == other or other[: len(key)] == key for other in keys)

    return [text for text in kept if not covered(override_key(text))] + list(new)
