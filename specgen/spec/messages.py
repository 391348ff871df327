"""Pydantic's validation errors as specgen diagnostics: one line each, at the key's line:column,
saying what was received and what was expected (with a did-you-mean for unknown keys).

Apart from load.py so that block expansion (expand.py, block_checks.py), which validates the layers
it builds, can use it without importing the loader that imports them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from specgen.diagnostics import (
    Diagnostic,
    Position,
    SpecError,
    closest,
    one_of,
    quoted,
    safe_repr,
    shown,
)
from specgen.fields.base import FLOAT32_BOUND, FLOAT32_MAX, IDENT, MAX_INT
from specgen.fields.unions import KEYS_CONTEXT
from specgen.spec.allowed_keys import COMPOSING, keys_at
from specgen.spec.literals import literal_expected, literal_message, near
from specgen.spec.model import SPEC_VERSION
from specgen.spec.received import flow
from specgen.spec.received import received as as_received
from specgen.spec.retag import retag
from specgen.spec.source_map import PathKey, SourceMap, data_path, tag_named_like_its_key
from specgen.spec.yaml_dialect import number_12
from specgen.spec.yaml_source import parse_document

TYPE_WORDS = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number", "bool_type": "true or false",
    "bool_parsing": "true or false", "string_type": "a string", "list_type": "a list",
    "dict_type": "a mapping", "model_type": "a mapping", "model_attributes_type": "a mapping",
}
# Comparing an unknown key with the allowed ones (difflib) is most of the cost of a diagnostic;
# past this many unknown keys in one file the rest are listed without a "did you mean".
MAX_SUGGESTIONS = 1000
BOUNDS = {"greater_than": "> {gt}", "greater_than_equal": ">= {ge}", "less_than": "< {lt}",
          "less_than_equal": "<= {le}"}


# `--set` overrides applied to a spec's data: where each wrote (a location in that data) and its text.
Overrides = tuple[tuple[PathKey, str], ...]
# Locates an error (its location as in `data`, and whether it is about a mapping key): the
# position and a note to append to the message. Expanded block layers need both (expand.py).
Locator = Callable[[PathKey, bool], tuple[Position | None, str]]


# Errors about a key that is not there (a required key, a layer's `op`, an optimizer's `kind`): what an abstract spec
# may leave to its variants (docs/spec.md, "Composing specs"). Without its `op` a layer's other keys cannot be
# checked (which keys it takes depends on the op): each variant checks them once it is whole.
ABSENT = frozenset({"missing", "union_tag_not_found"})


def validation_diagnostics(exc: ValidationError, data: Any, source: SourceMap, *, prefix: PathKey = (),
                           locator: Locator | None = None, missing: bool = True,
                           overrides: Overrides = ()) -> list[Diagnostic]:
    """One diagnostic per distinct (position, message), in time linear in the number of errors:
    the source map indexes each mapping once, and only the first MAX_SUGGESTIONS unknown keys
    (by position) are compared with the allowed ones for a "did you mean".

    `missing=False` leaves out missing required keys and `op`s / `kind`s (ABSENT: an abstract spec's children supply
    them).
    `prefix` goes in front of each error's location (a layer validated on its own is
    `("layers", 0)` of `data`); `locator` finds positions elsewhere than at that location in `data`.
    An error at or below a key that one of `overrides` set names that override instead of a position.
    """
    errors = [(error, _loc(prefix, error["loc"])) for error in exc.errors() if missing or error["type"] not in ABSENT]
    found_at = [_locate(error, loc, data, source, locator) for error, loc in errors]
    unknown = sorted((_order(position), loc) for (error, loc), (position, _) in zip(errors, found_at, strict=True)
                     if error["type"] == "extra_forbidden")
    suggestions = {loc: _suggestion(loc, data) for _, loc in unknown[:MAX_SUGGESTIONS]}
    # `filter: 2` is one mistake: report the unknown key (did you mean 'filters'?), not also
    # "missing required key 'filters'".
    misspelt = {(loc[:-1], close) for loc, close in suggestions.items()}
    # A misspelt `extends` (or `abstract`) is why keys are missing: the bases that give them were not read (or the
    # spec was meant to lack them). Its did-you-mean is the one problem to report.
    composing = any(loc[:-1] == () and close in COMPOSING for loc, close in suggestions.items())
    found: dict[tuple[Any, ...], Diagnostic] = {}
    for (error, loc), (position, note) in zip(errors, found_at, strict=True):
        if (error["type"] == "missing" and (loc[:-1], loc[-1]) in misspelt) or (composing and error["type"] in ABSENT):
            continue
        at = data_path(loc, data)[0] if overrides else loc
        override = override_at(overrides, [at])
        number = plain_number(error, loc, data, source) if override is None else _override_number(error, at, overrides)
        written = _written(error, loc, data, source) if override is None else _override_written(error, at, overrides)
        removal = _removal(error, loc, data, source) if override is None and locator is None else None
        if removal is not None:  # at the null that removed it, not at the mapping that lacks it (1:1 for a section)
            position, note = removal, ""
        message = _keyed(error, loc, data, _message(error, loc, data, suggestions.get(loc), written, number)) + \
            (REMOVED if removal is not None else "")
        if (change := retag(loc, data, source, overrides) if override is None and locator is None else None) is not None:
            position, note, message = (change.position(), "", change.unknown(keys_at(loc[:-1], data))) \
                if error["type"] == "extra_forbidden" else (position, note, message + change.note())
            override = change.by  # a `--set` changed the tag: the problem is that override's
        message += _context(loc, data)
        if override is not None:  # the value is the override's, not the file's
            found.setdefault((override, message), Diagnostic(f"--set {override}", None, message))
        else:
            found.setdefault((position, message), Diagnostic(source.path, position, message + note))
    return list(found.values())


REMOVED = ": this null removes the bases' value; give the key a value, or drop the null to keep the bases' one"


def _removal(error: Any, loc: PathKey, data: Any, source: SourceMap) -> Position | None:
    """Where a `key: null` over a base removed the required key an error says is missing, if one did."""
    if error["type"] != "missing" or not loc:
        return None
    return source.removal((*data_path(loc[:-1], data)[0], loc[-1]))


def override_at(overrides: Overrides, places: list[PathKey]) -> str | None:
    """The last of `overrides` that set one of `places` (locations in the data) or a key above it."""
    for path, text in reversed(overrides):
        if any(tuple(place[: len(path)]) == path for place in places):
            return text
    return None


def _override_written(error: Any, at: PathKey, overrides: Overrides) -> str | None:
    """A received number as the override that set it writes it (`--set rate=1.0e+400`)."""
    received = error.get("input")
    if error["type"] not in ECHOES_A_NUMBER or not isinstance(received, int | float) or isinstance(received, bool):
        return None
    return _override_text(at, overrides)


def _override_number(error: Any, at: PathKey, overrides: Overrides) -> tuple[str, int | float] | None:
    """plain_number for a value an override set (`--set units=1e1`: `received 1e1 (a float: write 10)`, as in a
    file)."""
    return _as_number(_override_text(at, overrides)) if isinstance(error.get("input"), str) else None


def _override_text(at: PathKey, overrides: Overrides) -> str | None:
    """The plain scalar at `at` as the last override that set it (or a key above it) writes it, if the value there
    is what that text reads as (source.written); else None."""
    for path, text in reversed(overrides):
        if tuple(at[: len(path)]) == path:
            try:
                value, source = parse_document(text.partition("=")[2], "--set")
            except SpecError:
                return None
            return source.written(at[len(path):], value)
    return None


def _loc(prefix: PathKey, loc: tuple[Any, ...]) -> PathKey:
    """The error's location, without the tag of the layer-or-instance union (spec/blocks.py) after a
    layer index: locations inside op layers read as they did before blocks existed."""
    full = (*prefix, *loc)
    if len(full) > 2 and full[0] == "layers" and full[2] == "layer":
        return (*full[:2], *full[3:])
    return full


def _locate(error: Any, loc: PathKey, data: Any, source: SourceMap,
            locator: Locator | None = None) -> tuple[Position | None, str]:
    # pydantic ends the location of a bad dict key with '[key]': point at the key itself.
    is_key = error["type"] == "extra_forbidden" or loc[-1:] == ("[key]",)
    # An unknown `op` / `kind` points at its value, not at the start of the mapping.
    at = (*loc, error["ctx"]["discriminator"].strip("'")) if error["type"] == "union_tag_invalid" else loc
    if misspelt := misspelt_branch_key(error):  # `cvs:` for `csv:`: point at the key written, as for an unknown key
        at, is_key = (*loc, misspelt[0]), True
    if locator is not None:
        return locator(at, is_key)
    return source.locate(at, data, key=is_key), ""


def _order(position: Position | None) -> tuple[int, int]:
    return (position.line, position.col) if position else (0, 0)


def _suggestion(loc: PathKey, data: Any) -> str | None:
    """The key a Keras spelling (`lr`, `kernel_size`) names, when this mapping has it (first: difflib would take
    `kernel_size` for `kernel_init`); else the allowed key closest to the unknown key at the end of `loc`, if one is."""
    allowed = keys_at(loc[:-1], data)
    keras = KERAS_SPELLINGS.get(loc[-1], ()) if isinstance(loc[-1], str) else ()
    return next((key for key in keras if key in allowed), None) or closest(_text(loc[-1]), allowed)


# Keras argument names a person coming from Keras writes, and the specgen keys they may mean (the first one the
# mapping has): too far apart in spelling for difflib's cutoff (`lr` and `learning_rate`: ratio 0.27).
KERAS_SPELLINGS: dict[str, tuple[str, ...]] = {
    "lr": ("learning_rate",),
    "kernel_size": ("kernel",),
    "pool_size": ("size",),
    "dilation_rate": ("dilation",),
    "eps": ("epsilon",),
    "act": ("activation",),
    "activation_fn": ("activation",),
    "kernel_initializer": ("kernel_init",),
    "bias_initializer": ("bias_init",),
    "embeddings_initializer": ("embeddings_init",),
    "recurrent_initializer": ("recurrent_init",),
    "depthwise_initializer": ("depthwise_init",),
    "pointwise_initializer": ("pointwise_init",),
    "input_dim": ("vocab_size",),
    "output_dim": ("dim", "units"),
    "heads": ("num_heads",),
    "n_heads": ("num_heads",),
    "global_clipnorm": ("clip",),
    "clipnorm": ("clip",),
}


def _text(value: Any) -> str:
    """A received value as text to compare with allowed names (bounded; `str` of a huge int raises)."""
    return value if isinstance(value, str) else safe_repr(value)


# Messages that already name the key they are about ("missing required key 'units'", "unknown
# op 'x'") or are about a mapping key rather than a value get no "<key>: " prefix.
NAMES_ITS_KEY = {"missing", "extra_forbidden", "union_tag_invalid", "union_tag_not_found"}


def _keyed(error: Any, loc: PathKey, data: Any, message: str) -> str:
    """`units: received -3, ...`: a value error names its key first, as Keras names the argument."""
    if error["type"] in NAMES_ITS_KEY or loc[-1:] == ("[key]",) or loc == ("specgen",) or misspelt_branch_key(error):
        return message
    label = key_label(loc, data)
    if not label or message.startswith((f"{label} ", f"'{label}' ")):  # "'to' refers to group 2 ...": named
        return message
    return f"{label}: {message}"


def key_label(loc: PathKey, data: Any) -> str:
    """The key a location ends at, as the user wrote it: `units`, `shape[1]`, `metrics[0]`.

    Walks the data like SourceMap.locate, skipping what pydantic adds (union tags such as
    'conv2d' or 'mapping'); list indexes after the last key are kept, layer indexes before it are not.
    """
    label, node = "", data
    for i, part in enumerate(loc):
        if tag_named_like_its_key(node, part, loc[i + 1:]):
            continue
        if isinstance(node, dict) and part in node:
            node, label = node[part], _text(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
            label = f"{label}[{part}]" if label else ""
    return shown(label) if label else ""


# Errors whose message echoes a received number: echoed as written (`1.0e+400`), not as Python prints it (`inf`).
ECHOES_A_NUMBER = {"finite_number", "value_error", *BOUNDS}


def _written(error: Any, loc: PathKey, data: Any, source: SourceMap) -> str | None:
    received = error.get("input")
    if error["type"] not in ECHOES_A_NUMBER or not isinstance(received, int | float) or isinstance(received, bool):
        return None
    return source.written(loc, data)


def plain_number(error: Any, loc: PathKey, data: Any, source: SourceMap) -> tuple[str, int | float] | None:
    """(its text, YAML 1.2's value) for received text that the file writes as a plain number PyYAML keeps as text
    (`1e999`, `3.2e1`, `0o7`: yaml_dialect.number_12); None for anything else, a quoted `'1e3'` included."""
    return _as_number(source.written(loc, data)) if isinstance(error.get("input"), str) else None


def _as_number(text: str | None) -> tuple[str, int | float] | None:
    """(`text`, YAML 1.2's value) for a plain number PyYAML keeps as text; None for other text."""
    value = None if text is None else number_12(text)
    return None if text is None or value is None else (text, value)


def _number_received(text: str, value: int | float, bounded: bool = True) -> str:
    """`3.2e1 (a float: write 32)`: a plain number PyYAML kept as text, said as YAML 1.2 (and the user) reads it,
    with how to write it where an integer goes (only an integer field refuses a float; a float field refuses only
    YAML 1.2's octal). `bounded` False: the field lists the values it takes (a literal), so the largest integer a
    spec holds is not said."""
    if isinstance(value, int):  # 0o17
        return f"{text} (YAML 1.2's octal {value}, which YAML 1.1 reads as text: write {value})"
    limit = f"; an integer in a spec is at most {MAX_INT}" if bounded else ""
    if math.isinf(value):
        return f"{text} (a float past float's range{limit})"
    if not value.is_integer():
        return f"{text} (a float)"
    if abs(value) > MAX_INT:
        return f"{text} (a float{limit})"
    return f"{text} (a float: write {int(value)})"


def _message(error: Any, loc: PathKey, data: Any, suggestion: str | None = None, written: str | None = None,
             number: tuple[str, int | float] | None = None) -> str:
    """The message for one error; `written` is the received number's text as the file writes it, if known; `number`
    is a plain number PyYAML read as text (plain_number), said as a number."""
    kind, ctx, received = error["type"], error.get("ctx") or {}, error.get("input")
    if number is not None:
        written = number[0]
    echo = written if written is not None else _echo(received)
    described = _number_received(*number) if number is not None else _received(received)
    last = _text(loc[-1]) if loc else "spec"
    if kind == "missing":
        return f"missing required key {quoted(last)}"
    if loc == ("specgen",) and kind in ("value_error", "int_parsing_size"):  # `specgen: true`, 401 digits
        return _literal_message(loc, received, ctx, echo)
    if kind == "finite_number":
        return f"expected a finite number, received {echo}"
    if kind == "extra_forbidden":
        allowed = keys_at(loc[:-1], data)
        hint = f"; did you mean '{suggestion}'?" if suggestion else ""
        return f"unknown key {quoted(loc[-1])}" + (hint or f"; expected one of {one_of(allowed)}" if allowed else "")
    if kind == "union_tag_invalid":
        field = ctx["discriminator"].strip("'")
        tags = [t.strip().strip("'") for t in ctx["expected_tags"].split(",")]
        return (f"unknown {field} {quoted(ctx['tag'])}" + near(_text(ctx["tag"]), tags)
                + f" (expected {one_of(tags)})")
    if kind == "union_tag_not_found":
        return f"missing required key {ctx['discriminator']}"
    if kind == "literal_error" and number is not None and loc != ("specgen",):  # `opset: 2.1e1`
        return f"received {_number_received(*number, bounded=False)}, expected {literal_expected(ctx['expected'])}"
    if kind == "literal_error":
        return _literal_message(loc, received, ctx, echo)
    if kind in ("float_type", "float_parsing") and isinstance(received, int) and not isinstance(received, bool):
        # an integer past float64's range (10**400): pydantic cannot make it a float, but it is a number
        return f"received {echo}, expected a float32 value (magnitude at most {FLOAT32_MAX:.8g})"
    if kind == "string_pattern_mismatch":
        return _name_message(received, ctx)
    if kind in BOUNDS and abs(float(next(iter(ctx.values()), 0))) == FLOAT32_BOUND:
        # Every float of a spec runs as float32 (ONNX, TensorFlow): say which range, not the bound's 17 digits. The
        # largest float32 as numpy prints it, 3.4028235e+38, is accepted (it rounds to that float32 exactly).
        return f"received {echo}, expected a float32 value (magnitude at most {FLOAT32_MAX:.8g})"
    if kind in BOUNDS:
        return f"received {echo}, expected a value {BOUNDS[kind].format(**ctx)}"
    if kind in TYPE_WORDS:
        return f"expected {TYPE_WORDS[kind]}, received {described}"
    if kind in ("too_short", "too_long"):
        return (f"expected {'at least' if kind == 'too_short' else 'at most'} "
                f"{ctx.get('min_length', ctx.get('max_length'))} item(s), received {ctx['actual_length']}")
    if kind == "string_too_long":
        return f"received a string of {len(received)} characters, expected at most {ctx['max_length']}"
    if kind == "string_too_short":
        return _too_short(received, ctx)
    if kind == "value_error":
        message: str = error["msg"].removeprefix("Value error, ")
        if written is not None:  # fields/base.py's checks echo the number as Python prints it
            message = message.replace(f"received {safe_repr(received)}", f"received {written}", 1)
        return message
    if kind == "wrong_shape":
        if misspelt := misspelt_branch_key(error):
            return f"unknown key {quoted(misspelt[0])}; did you mean '{misspelt[1]}'? ({error['msg']})"
        return f"{error['msg']}, received {described}"
    return f"{error['msg']}; received {described}"


def _too_short(received: Any, ctx: dict[str, Any]) -> str:
    """`received '' (an empty string), expected a path`: what the type says it expects (fields/base.py's FilePath
    names it), else how many characters."""
    least = ctx.get("min_length", 1)
    expected = ctx.get("expected") or ("a non-empty string" if least == 1 else f"at least {least} characters")
    what = "an empty string" if received == "" else f"a string of {len(received)} character{'s' * (len(received) != 1)}"
    return f"received {safe_repr(received)} ({what}), expected {expected}"


def misspelt_branch_key(error: Any) -> tuple[str, str] | None:
    """(the key written, the key it misspells) when a union picked by key (fields/unions.py by_key: a data source,
    an augmentation, a clip) gets a mapping with none of its keys but one key close to one of them (`cvs:` for
    `csv:`); None otherwise. Like a misspelt `kind:`, it gets a did-you-mean rather than the list of keys alone."""
    keys, received = (error.get("ctx") or {}).get(KEYS_CONTEXT), error.get("input")
    if error["type"] != "wrong_shape" or not isinstance(keys, str) or not isinstance(received, dict):
        return None
    choices = keys.split()
    if any(key in received for key in choices):  # it has a key of the union, or two: not a misspelling
        return None
    close = [(key, match) for key in received if isinstance(key, str) and (match := _near_key(key, choices))]
    return close[0] if len(close) == 1 else None


def _near_key(key: str, choices: list[str]) -> str | None:
    return next((choice for choice in choices if choice.casefold() == key.casefold()), None) or closest(key, choices)


def _received(value: Any) -> str:
    """A received value as the spec spells it, not as Python does: `true (a boolean)`, `null`, `{a: b} (a mapping)`,
    not `True (bool)` or `{'a': 'b'} (dict)` (spec/received.py)."""
    return as_received(value)


def _echo(value: Any) -> str:
    """A received value without its kind: a container, a boolean and null as YAML writes them (`[a]`, `true`), any
    other scalar as safe_repr has it."""
    return flow(value) if isinstance(value, dict | list | bool) or value is None else safe_repr(value)


def _literal_message(loc: PathKey, received: Any, ctx: dict[str, Any], echo: str) -> str:
    if loc == ("specgen",):
        return (f"unsupported spec format version {echo}; "
                f"this specgen reads version {SPEC_VERSION}")
    return literal_message(received, ctx["expected"])  # values keep their kinds: `'21'` is not 21 (literals.py)


def _name_message(received: Any, ctx: dict[str, Any]) -> str:
    if ctx.get("pattern") == IDENT:
        rule = "an ASCII letter, then ASCII letters and digits with single '_' between them"
    elif "/" in ctx.get("pattern", ""):
        rule = "parts joined by '/', each an ASCII letter, then ASCII letters and digits with single '_' between them"
    else:
        rule = "printable text without control characters"
    return f"invalid name {safe_repr(received)}: expected {rule}"


def _context(loc: PathKey, data: Any) -> str:
    """' (in layer 'conv1')' when the error sits inside a layer."""
    if len(loc) >= 2 and loc[0] == "layers" and isinstance(loc[1], int):
        layers = data.get("layers")
        if isinstance(layers, list) and loc[1] < len(layers) and isinstance(layers[loc[1]], dict):
            name = layers[loc[1]].get("name")
            if isinstance(name, str) and len(loc) > 2:
                return f" (in layer '{name[:64]}')"
    return ""
