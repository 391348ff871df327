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
from pathlib import Path
from typing import Any

from specgen.diagnostics import Diagnostic, SpecError, did_you_mean, quoted
from specgen.diagnostics import shown as shown_text
from specgen.spec.compose import load_composed
from specgen.spec.key_slips import KeySlips, placed_slips
from specgen.spec.load import LoadedSpec, validate_data
from specgen.spec.received import received
from specgen.spec.source_map import PathKey
from specgen.spec.yaml_source import not_utf8, parse_placed_value


def parse_override(text: str) -> tuple[list[str | int], Any]:
    """(key path, value) of one `--set KEY.PATH=VALUE`; the value is YAML read by the spec loader,
    so it has the same bounds as a spec file (size, nesting, aliases, tags) and no others."""
    parts, value, slips = _parse_placed(text)
    if slips:
        raise SpecError([Diagnostic(f"--set {shown_text(text)}", None, _in_value(problem)) for _, problem in slips])
    return parts, value


def _parse_placed(text: str) -> tuple[list[str | int], Any, KeySlips]:
    """parse_override's key path and value, with the value's keys that are not names (`{0: 2}`) left for the place
    it is set at to judge (`_apply_one`): under a key the spec does not have, that key is the mistake to report,
    as in a file."""
    shown = f"--set {shown_text(text)}"
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise SpecError([Diagnostic(shown, None, "expected KEY.PATH=VALUE, e.g. train.batch_size=32")])
    undecoded = not_utf8(raw)
    if undecoded is not None:  # before PyYAML, which cannot encode it
        raise SpecError([Diagnostic(shown, None, f"the value is not UTF-8 text ({undecoded} of the value); "
                                    "write it in UTF-8")])
    try:
        value, slips = parse_placed_value(raw, shown) if raw.strip() else ("", [])
    except SpecError as exc:  # positions are within the value, which has no file: say where in it
        raise SpecError([Diagnostic(shown, None, _in_value(d)) for d in exc.diagnostics]) from None
    problem = key_problem(key.strip())
    if problem is not None:
        raise SpecError([Diagnostic(shown, None, problem)])
    return key_parts(key.strip()), value, slips


_KEY_PART = re.compile(r"\[([^\]]*)\]|([^.\[\]]+)")
KEY = re.compile(r"[^.\[\]]+(?:\.[^.\[\]]+|\[[^\[\]]+\])*")


def key_problem(key: str) -> str | None:
    """Why `key` is not a key path (`key_parts` would skip what it cannot read: `layers[` would name `layers`, and
    `--set layers[=3` would replace every layer with 3),
    or None."""
    undecoded = not_utf8(key)
    if undecoded is not None:  # no spec key holds it: say why, not "no key" with a did-you-mean
        return f"KEY {quoted(key)} is not UTF-8 text ({undecoded}); write it in UTF-8"
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
    return applied(data, overrides)[0]


def applied(data: dict[str, Any], overrides: list[str]) -> tuple[dict[str, Any], tuple[PathKey, ...]]:
    """`data` with `overrides` applied, and where each override wrote, as a location in that data (each `[NAME]` as
    the index of the item it selected when it was applied: a later override may rename that item)."""
    result = copy.deepcopy(data)
    return result, tuple(_apply_one(result, text) for text in overrides)


def _apply_one(result: dict[str, Any], text: str) -> PathKey:
    parts, value, slips = _parse_placed(text)
    node: Any = result
    path: list[str | int] = []
    for i, part in enumerate(parts[:-1]):
        _check_selector(text, parts, i, node)
        item = named_item(node, part)
        if item is not None:
            path.append([id(entry) for entry in node].index(id(item)))  # that very item (two may be equal)
            node = item
        else:
            path.append(part)
            node = _descend(text, parts, i, node)
    _check_selector(text, parts, len(parts) - 1, node)
    _set(text, node, parts[-1], value)
    at: PathKey = (*path, parts[-1])
    if problems := placed_slips(at, slips, result):
        raise SpecError([Diagnostic(f"--set {shown_text(text)}", None, _in_value(problem)) for problem in problems])
    return at


def _descend(text: str, parts: list[str | int], i: int, node: Any) -> Any:
    """The value at `parts[i]` of `node` (not a `[NAME]` selector that names an item), a new mapping for a new key."""
    part = parts[i]
    if isinstance(node, list) and isinstance(part, int) and part < len(node):
        return node[part]
    if isinstance(node, dict):
        return node.setdefault(part, {})
    if isinstance(part, str) and part.startswith("[") and isinstance(node, list):
        raise SpecError([Diagnostic(f"--set {text}", None, _no_item(parts, i, node))])
    raise SpecError([Diagnostic(f"--set {text}", None, _cannot(parts, i, node, None))])


def _set(text: str, node: Any, last: str | int, value: Any) -> None:
    if isinstance(node, list) and isinstance(last, int) and last < len(node) and not (value is None and _named(node)):
        node[last] = value
    elif isinstance(node, dict) and value is None and last in node:
        del node[last]  # `--set KEY=null` removes the key, as `key: null` over a base does: its default applies
    elif isinstance(node, dict):
        node[last] = value
    else:
        parts = key_parts(text.partition("=")[0].strip())
        raise SpecError([Diagnostic(f"--set {text}", None, _cannot(parts, len(parts) - 1, node, value))])


def _named(items: list[Any]) -> bool:
    """A list merged by name (`layers`, a block's `layers`): its items are mappings with a `name`."""
    return bool(items) and all(isinstance(item, dict) and isinstance(item.get("name"), str) for item in items)


def _cannot(parts: list[str | int], i: int, node: Any, value: Any) -> str:
    """Why `--set` cannot write at `parts[i]` of `node` (what is there, what it can set instead): a list item it would
    add or remove, a key under a value that is not a mapping, a `[NAME]` item set whole."""
    part, where = parts[i], _joined(parts[:i]) or "the spec"
    if not isinstance(node, list):
        return (f"'{where}' holds {received(node)}, not a mapping or a list, so it has no key {quoted(str(part))}; "
                f"set '{where}' itself")
    named = _named(node)

    def remove(name: str) -> str:
        return f"write `{{name: {name}, remove: true}}` in a variant file's '{where}' (docs/spec.md, \"Composing specs\")"

    if isinstance(part, str) and part.startswith("["):
        index = next((n for n, item in enumerate(node) if isinstance(item, dict) and item.get("name") == part[1:-1]),
                     None)
        if index is None:  # `_set` found no item to write into either
            return _no_item(parts, i, node)
        if value is None:
            return f"'{_joined(parts[: i + 1])}' selects a list item; --set cannot remove a list item: {remove(part[1:-1])}"
        return (f"'{_joined(parts[: i + 1])}' selects a list item to set its keys ({_joined(parts[: i + 1])}.KEY=VALUE); "
                f"to replace the whole item, set it by its index: {where}.{index}=VALUE")
    if not isinstance(part, int):
        return (f"'{where}' is a list: select an item by its index ({where}.0)"
                + (f" or by its name ({where}[{node[0]['name']}])" if named else "") + f", not {quoted(part)}")
    size = f"has {len(node)} item{'' if len(node) == 1 else 's'} (0..{len(node) - 1})" if node else "is empty"
    if part < len(node):  # a null at an item of a named list: it would not remove the item
        return (f"--set cannot remove a list item ({where}.{part}=null would leave a null in the list): "
                f"{remove(node[part]['name'])}")
    if named:
        return (f"'{where}' {size}: an index sets an existing item; --set cannot add a list item: write it in a "
                f"variant file (a new name is appended, or placed with after: NAME)")
    return (f"'{where}' {size}: an index sets an existing item; to change its length, set the whole list: "
            f"{where}=[...]")


def _no_item(parts: list[str | int], i: int, items: list[Any]) -> str:
    """`parts[i]` is a `[NAME]` selector that no item of `items` answers to."""
    name = str(parts[i])[1:-1]
    names = [str(item.get("name")) for item in items if isinstance(item, dict) and "name" in item]
    return f"no item named {quoted(name)} in '{_joined(parts[:i])}'{did_you_mean(name, names)}"


def _check_selector(text: str, parts: list[str | int], i: int, node: Any) -> None:
    """`[NAME]` selects an item of a named list; on a mapping it would become a key named '[NAME]'."""
    part = parts[i]
    if isinstance(part, str) and part.startswith("[") and isinstance(node, dict):
        where = _joined(parts[:i]) or "the spec"
        key = _joined([*parts[:i], part[1:-1]])
        raise SpecError([Diagnostic(f"--set {text}", None, f"'{where}' is a mapping, not a list of named items: "
                                    f"write {key}, not {_joined(parts[: i + 1])}")])


def load_with_overrides(path: Path, overrides: list[str]) -> LoadedSpec:
    """A spec with `--set` overrides applied. A problem at or below a key an override set names that override
    (`--set KEY=VALUE: error: ...`), at validation and in every later check (LoadedSpec.diagnostic); any other problem
    the overrides made (the file alone is valid) names them all."""
    data, source = load_composed(path)
    if not overrides:
        return validate_data(data, source, path)
    changed, paths = applied(data, overrides)
    try:
        return validate_data(changed, source, path, tuple(zip(paths, overrides, strict=True)))
    except SpecError as exc:
        validate_data(data, source, path)  # the file's own problems come first
        shown = "--set " + " --set ".join(overrides)
        raise SpecError([d if d.path.startswith("--set ") and d.position is None else Diagnostic(shown, None, d.message)
                         for d in exc.diagnostics]) from None


def overridden_learning_rates(overrides: list[str]) -> set[str]:
    """Optimizer names whose learning rate an override sets. A resume (and `--probe --resume`) notes no change of
    their rates, the --set being in view already (on the `resumed from` line; the probe's command line); every rate
    follows the spec after a resume, not only these (runtime/commands/resume_rates.py follow_spec_rates)."""
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
