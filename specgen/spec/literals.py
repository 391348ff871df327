"""The line for a value a `Literal[...]` field refuses: what was received and which values the field takes, each
spelled as the spec writes it (integers and booleans plain, strings quoted), with its kind named when it differs.

Pydantic's literal errors compare values, not text: `opset: "21"` is the string '21', which no integer literal
equals, so a message that compared spellings listed '21' as allowed and suggested it back ("received '21', expected
'18', ..., '21', ...; did you mean '21'?"). Here the allowed values keep their types (read back from pydantic's
`expected`, which spells each with Python's repr), a received value of another kind says so, and a quoted value that
would be right unquoted says what to write instead. A near-miss string keeps its "did you mean".
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Callable
from typing import Any

from pydantic_core import PydanticCustomError

from specgen.diagnostics import did_you_mean, one_of, safe_repr
from specgen.spec.received import flow
from specgen.spec.received import received as as_received

# A kind's name in a message, and the order kinds are listed in when one field takes several.
KINDS = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
ORDER: list[type] = [bool, int, float, str]


def literal_message(received: Any, expected: str) -> str:
    """`received X, expected Y` for pydantic's literal error; `expected` is its ctx text (`18, 19 or 20`)."""
    allowed = _values(expected)
    if allowed is None:  # not a list of plain literals: pydantic's own text, as it is
        return f"received {_plain(received)}, expected {expected}"
    kinds = {type(v) for v in allowed}
    if type(received) in kinds:  # the right kind, a value not among them
        strings = [v for v in allowed if isinstance(v, str)]
        hint = near(received, strings) if isinstance(received, str) else ""
        return f"received {_plain(received)}, expected {_listed(allowed)}" + hint
    match = next((v for v in allowed if _spelt_alike(received, v)), None)
    if match is not None:  # `'21'` for 21: the value is right, its kind is not
        what = f"({'a quoted string' if isinstance(received, str) else _kind(received)}: write {_advice(match)})"
    else:
        what = f"({_kind(received)})" if received is not None else ""
    kind = f"{KINDS[next(iter(kinds))]}: " if len(kinds) == 1 and next(iter(kinds)) in KINDS else ""
    return f"received {_plain(received)}{' ' + what if what else ''}, expected {kind}{_listed(allowed)}"


def literal_expected(expected: str) -> str:
    """What a literal field takes, as its messages say it (`an integer: 18, 19 or 20`), from pydantic's ctx text."""
    allowed = _values(expected)
    if allowed is None:
        return expected
    kinds = {type(v) for v in allowed}
    kind = f"{KINDS[next(iter(kinds))]}: " if len(kinds) == 1 and next(iter(kinds)) in KINDS else ""
    return f"{kind}{_listed(allowed)}"


def int_literal(*allowed: int) -> Callable[[object], object]:
    """A before-validator for a `Literal[<ints>]` field: an integer not among `allowed` is pydantic's literal_error,
    as for a small one; pydantic itself first tries to fit it in 64 bits and fails on a longer one
    (`int_parsing_size`: "Unable to parse input string as an integer", about a plain integer the user wrote)."""
    expected = ", ".join(map(str, allowed[:-1])) + f" or {allowed[-1]}" if len(allowed) > 1 else str(allowed[0])

    def check(value: object) -> object:
        if isinstance(value, int) and not isinstance(value, bool) and value not in allowed:
            raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})
        return value
    return check


def near(received: str, choices: list[str]) -> str:
    """A did-you-mean for a value not among `choices`: first one that differs only in case (`SAME`, TensorFlow's
    spelling, for `same`: difflib compares case-sensitively and finds nothing), else difflib's closest."""
    folded = received.casefold()
    same = next((choice for choice in choices if choice.casefold() == folded), None)
    return f"; did you mean '{same}'?" if same is not None else did_you_mean(received, choices)


def _values(expected: str) -> list[Any] | None:
    """The literals in pydantic's `expected` (`18, 19 or 20`, `'same' or 'valid'`, `False`), with their types; None
    when the text holds anything else. Tokenized, not split on commas: a string literal may hold `, ` or ` or `."""
    values: list[Any] = []
    sign = ""
    try:
        for token in tokenize.generate_tokens(io.StringIO(expected).readline):
            if token.type in (tokenize.STRING, tokenize.NUMBER) or token.string in ("True", "False", "None"):
                values.append(ast.literal_eval(sign + token.string))
                sign = ""
            elif token.string == "-" and not sign:
                sign = "-"
            elif token.string not in (",", "or") and token.type not in (tokenize.NEWLINE, tokenize.ENDMARKER):
                return None
    except (tokenize.TokenError, SyntaxError, ValueError):
        return None
    return values or None


def _listed(allowed: list[Any]) -> str:
    """`18, 19 or 20`; `'same' or 'valid'`: sorted within each kind, integers plain and strings quoted."""
    if all(isinstance(v, str) for v in allowed):
        return one_of(allowed)  # as every other list of names is written
    texts: list[str] = []
    for kind in ORDER:
        same: list[Any] = sorted(v for v in allowed if type(v) is kind)
        texts += [f"'{v}'" if kind is str else flow(v) for v in same]
    texts += [flow(v) for v in allowed if type(v) not in ORDER]  # null, last
    return texts[0] if len(texts) == 1 else ", ".join(texts[:-1]) + " or " + texts[-1]


def _plain(value: Any) -> str:
    """A received value without its kind: a string quoted (as every received name is), anything else as YAML
    writes it (`true`, `null`, `[1, 2]`), bounded."""
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return safe_repr(value)
    return flow(value)


def _kind(value: Any) -> str:
    for kind, word in KINDS.items():
        if isinstance(value, kind):
            return word
    text = as_received(value)  # `[1] (a list)`, `{a: b} (a mapping)`: the kind in its parentheses
    return text[text.rfind("(") + 1: -1] if text.endswith(")") else type(value).__name__


def _spelt_alike(received: Any, value: Any) -> bool:
    """Whether `received` is `value` written as another kind: `'21'` for 21, `'false'` for false, 32 for '32'."""
    if isinstance(received, str) and isinstance(value, bool):
        return received.lower() == str(value).lower()  # `True` and `TRUE` are YAML booleans too
    if isinstance(received, str) and isinstance(value, int | float):
        return received == str(value)
    if isinstance(value, str) and isinstance(received, bool | int | float):
        return flow(received) == value
    return False


def _advice(value: Any) -> str:
    """How to write `value` in the spec: 21, false, or a string quoted ('32')."""
    return f"'{value}'" if isinstance(value, str) else flow(value)
