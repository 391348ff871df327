"""A small reader of protobuf text format, for `config.pbtxt` where tritonclient's ModelConfig is not installed.

It knows no schema: every field becomes a list of values (scalars or nested dicts), so
`name: "x"` reads as `{"name": ["x"]}` and `input [ {..}, {..} ]` as `{"input": [{..}, {..}]}`.
It covers the grammar Triton configs use: `field: value`, `field { .. }` / `field: { .. }`
(or `< .. >`), lists `field: [ a, b ]` of scalars or `field [ {..}, {..} ]` of messages, `#` comments, quoted strings with
escapes (adjacent strings concatenate), numbers, and identifiers (enums, true/false).
"""

from __future__ import annotations

import ast
import re
from typing import Any

from specgen.errors import SpecgenError

Message = dict[str, list[Any]]

_TOKEN = re.compile(r"""
    (?P<space>\s+|\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<number>[-+]?(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)[fF]?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<punct>[{}\[\]<>:,;])
""", re.VERBOSE)
_CLOSE = {"{": "}", "<": ">"}


class TextProtoError(SpecgenError, ValueError):
    """Text that is not protobuf text format, with the line and column of the problem."""


class _Tokens:
    def __init__(self, text: str):
        self.items: list[tuple[str, str, int]] = []  # (kind, text, offset)
        self.text = text
        position = 0
        while position < len(text):
            match = _TOKEN.match(text, position)
            if match is None:
                raise TextProtoError(f"{self.where(position)}: unexpected character {text[position]!r}")
            kind = match.lastgroup or ""
            if kind != "space":
                self.items.append((kind, match.group(), position))
            position = match.end()
        self.index = 0

    def where(self, offset: int) -> str:
        line = self.text.count("\n", 0, offset) + 1
        return f"line {line} column {offset - (self.text.rfind(chr(10), 0, offset) + 1) + 1}"

    def peek(self) -> tuple[str, str, int]:
        return self.items[self.index] if self.index < len(self.items) else ("end", "", len(self.text))

    def take(self, expected: str | None = None) -> tuple[str, str, int]:
        token = self.peek()
        if expected is not None and token[1] != expected:
            raise TextProtoError(f"{self.where(token[2])}: expected '{expected}', found {token[1] or 'the end'!r}")
        self.index += 1
        return token


def _scalar(tokens: _Tokens) -> Any:
    kind, text, offset = tokens.take()
    if kind == "string":
        parts = [ast.literal_eval(text)]
        while tokens.peek()[0] == "string":
            parts.append(ast.literal_eval(tokens.take()[1]))
        return "".join(parts)
    if kind == "number":
        body = text.rstrip("fF") if not text.lower().startswith(("0x", "-0x", "+0x")) else text
        return int(body, 0) if re.fullmatch(r"[-+]?(0[xX][0-9a-fA-F]+|\d+)", body) else float(body)
    if kind == "ident":
        return {"true": True, "True": True, "false": False, "False": False}.get(text, text)
    raise TextProtoError(f"{tokens.where(offset)}: expected a value, found {text or 'the end'!r}")


def _message_or_scalar(tokens: _Tokens) -> Any:
    if tokens.peek()[1] in _CLOSE:
        opener = tokens.take()[1]
        return _message(tokens, _CLOSE[opener])
    return _scalar(tokens)


def _message(tokens: _Tokens, closer: str | None) -> Message:
    fields: Message = {}
    while True:
        kind, text, offset = tokens.peek()
        if closer is not None and text == closer:
            tokens.take()
            return fields
        if kind == "end":
            if closer is None:
                return fields
            raise TextProtoError(f"{tokens.where(offset)}: expected '{closer}' before the end")
        if kind != "ident":
            raise TextProtoError(f"{tokens.where(offset)}: expected a field name, found {text!r}")
        tokens.take()
        values = fields.setdefault(text, [])
        if tokens.peek()[1] == ":":
            tokens.take()
        elif tokens.peek()[1] not in (*_CLOSE, "["):
            raise TextProtoError(f"{tokens.where(tokens.peek()[2])}: expected ':', '{{' or '[' after '{text}'")
        if tokens.peek()[1] == "[":
            tokens.take()
            while tokens.peek()[1] != "]":
                values.append(_message_or_scalar(tokens))
                if tokens.peek()[1] != "]":
                    tokens.take(",")
            tokens.take("]")
        else:
            values.append(_message_or_scalar(tokens))
        if tokens.peek()[1] in (",", ";"):
            tokens.take()


def parse(text: str) -> Message:
    """The fields of a text-format message: each field name maps to the list of its values."""
    return _message(_Tokens(text), None)
