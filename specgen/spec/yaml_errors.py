"""PyYAML's syntax errors said in a spec writer's terms: what the reader found, what it expected, what to do.

PyYAML names its own machinery (`expected <block end>, but found '<block mapping start>'`, `mapping values are
not allowed here`); a person who indented a key one space too far cannot act on that. Each entry of `_TABLE` is
keyed on PyYAML's problem text and context and turns one error into a sentence about the lines the person wrote
(the rule reads the text around the error's marks with yaml_lines.py). A rule returns None when the text is not
shaped as it expects, and so does an error no entry knows: the caller then shows PyYAML's own words, which are still
right.
The error's position is PyYAML's, unchanged; other places a message names (where a quote opened) are line:col.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import yaml

from specgen.diagnostics import quoted
from specgen.spec.yaml_lines import (
    Marked,
    char,
    cut,
    has_content,
    indent_of,
    key_column,
    key_of,
    label_at,
    level_above,
    line_at,
    previous_line,
    spaces,
    value_of,
)

_Rule = Callable[[re.Match[str], Marked], str | None]


def translated(exc: yaml.MarkedYAMLError, text: str, whole: str = "the file") -> str | None:
    """`exc` in the spec writer's terms, or None where the table does not know it (the caller shows PyYAML's)."""
    if exc.problem_mark is None:
        return None
    context = (exc.context_mark.line, exc.context_mark.column) if exc.context_mark else None
    error = Marked(text.split("\n"), exc.problem_mark.line, exc.problem_mark.column, context, whole)
    for problem, context_prefix, rule in _TABLE:
        match = problem.fullmatch(str(exc.problem or ""))
        if match and (context_prefix is None or str(exc.context or "").startswith(context_prefix)):
            return rule(match, error)
    return None


# --- the rules ---------------------------------------------------------------------------------------------------

def _tab(match: re.Match[str], error: Marked) -> str:
    if not error.text(error.line)[:error.col].strip(" "):
        return "a tab character indents this line; YAML indents with spaces only: replace the tab with spaces"
    return "a tab character here; YAML separates the parts of a line with spaces only: replace the tab with a space"


def _reserved(match: re.Match[str], error: Marked) -> str:
    token = re.match(r"[^\s,\]}#]+", error.text(error.line)[error.col:])
    example = f' ("{cut(token.group())}")' if token else ""
    return (f"a value starts with {char(match.group(1))}, which YAML reserves; expected a value that starts "
            f"otherwise: put the value in quotes{example}")


def _indentation(match: re.Match[str], error: Marked) -> str | None:
    """A line indented to no column that an open mapping or list has: deeper than an entry that already has its
    value, or between two levels. The open collection's entries start at the context mark's column."""
    if error.context is None:
        return None
    line, n = error.text(error.line), error.col
    column = error.context[1]
    sibling, previous = line_at(error, column, error.line), previous_line(error, error.line)
    if sibling is None or previous is None:
        return None
    what, there = label_at(line, n), label_at(error.text(sibling), column)
    sibling_at = f"{there} on line {sibling + 1} ({spaces(column)})"
    above = level_above(error.text(previous), n)
    if above is not None:  # dedented, but not as far as the level above
        near = label_at(error.text(previous), above)
        return (f"{what} is indented {spaces(n)}: less than {near} on line {previous + 1} ({spaces(above)}) and "
                f"more than {sibling_at}, so YAML cannot tell which it belongs with: indent it {spaces(above)} like "
                f"{near}, or {spaces(column)} like {there}")
    if there == "the list item" and what != "the list item":
        fix = f"start it with '- ' at {spaces(column)} to make it an item, or put it inside the item above"
    else:
        fix = f"indent it {spaces(column)} like {there}"
    return (f"{what} is indented {spaces(n)}, more than {sibling_at}, which already has a value, so it can be "
            f"neither inside it nor beside it: {fix}")


def _top_level(match: re.Match[str], error: Marked) -> str | None:
    first = next((i for i in range(error.line) if has_content(error.text(i))), None)
    if first is None:
        return None
    start = indent_of(error.text(first))
    return (f"{label_at(error.text(error.line), error.col)} is indented {spaces(error.col)}, less than the first "
            f"key {label_at(error.text(first), start)} on line {first + 1} ({spaces(start)}); a spec's top-level keys all "
            "start at one column: indent them alike (0 spaces)")


def _item_among_keys(match: re.Match[str], error: Marked) -> str | None:
    if error.context is None:
        return None
    sibling = line_at(error, error.context[1], error.line)
    like = "" if sibling is None else f" (like {label_at(error.text(sibling), error.context[1])} on line {sibling + 1})"
    return (f"a list item ('-') where the mapping expects a key{like}: a list goes under a key of its own, "
            "written 'key:' with the items indented below it; move the item there, or delete it")


def _key_among_items(match: re.Match[str], error: Marked) -> str | None:
    if error.context is None:
        return None
    column, line = error.context[1], error.text(error.line)
    owner = next((i for i in range(error.context[0] - 1, -1, -1)
                  if has_content(error.text(i)) and indent_of(error.text(i)) < column), None)
    if owner is None:
        beside = ""
    else:
        level = key_column(error.text(owner))
        name = label_at(error.text(owner), level)
        beside = f", or indent it {spaces(level)} like {name} if it is a key beside {name}"
    return (f"{label_at(line, error.col)} is a key among the items of the list on line {error.context[0] + 1}, "
            f"which each start with '- ': make it an item ({quoted(cut('- ' + line.strip()))}){beside}")


def _stray_closer(match: re.Match[str], error: Marked) -> str:
    closer = match.group(1)
    opener = "[" if closer == "]" else "{"
    return f"a '{closer}' that closes nothing (no '{opener}' is open here): delete it, or add the '{opener}' it closes"


def _after_value(match: re.Match[str], error: Marked) -> str | None:
    line = error.text(error.line)
    rest = cut(re.sub(r"\s+#.*$", "", line[error.col:]).strip())
    if line[:error.col].strip():
        return (f"more text ({quoted(rest)}) after a value that already ended at its closing quote or bracket: "
                "put all of it inside the quotes or brackets, or begin a comment with ' #'")
    previous = previous_line(error, error.line)
    if previous is None:
        return None
    return (f"{quoted(rest)} follows the complete value on line {previous + 1} without a key of its own: write "
            "it as 'key: value' at the indentation of the keys, or delete it")


def _colon_in_value(match: re.Match[str], error: Marked) -> str | None:
    """A `: ` where PyYAML is inside a plain value: on the value's own line, or on a line it read as more of it."""
    line = error.text(error.line)
    own = key_of(line)
    if own is not None and own[0] + len(own[1]) < error.col:  # `doc: a: b`
        value = value_of(line)
        return (f"a second ': ' in the value of {quoted(own[1])}; a plain value cannot hold ': ': put the value "
                f"in quotes ({cut(chr(34) + value + chr(34))})")
    previous = previous_line(error, error.line)
    if own is None or previous is None:
        return None
    return _continued(error, own, previous)


def _continued(error: Marked, own: tuple[int, str], previous: int) -> str | None:
    """The key on the error's line, which PyYAML read as the continuation of the value on the line above."""
    above = error.text(previous)
    key, column = quoted(own[1]), own[0]
    before = key_of(above)
    if before is None:
        written = cut(above.strip())
        if re.search(r":\S", written):
            return (f"line {previous + 1} ({quoted(written)}) has no space after its ':', so YAML reads it as text, "
                    f"not 'key: value', and {key} as more of that text: write a space after the ':'")
        return (f"line {previous + 1} ({quoted(written)}) is not 'key: value', so YAML reads {key} as more of "
                "that text, where a key cannot start: give that line a ':' and a value, or delete it")
    if not value_of(above) or column <= before[0]:
        return None
    return (f"{key} is indented {spaces(column)}, more than {quoted(before[1])} on line {previous + 1} "
            f"({spaces(before[0])}), so YAML reads it as more of the value of {quoted(before[1])} "
            f"({quoted(cut(value_of(above)))}), where a key cannot start: indent it {spaces(before[0])} like "
            f"{quoted(before[1])}")


def _item_after_key(match: re.Match[str], error: Marked) -> str | None:
    """`layers: - {name: a}`: a list item on its key's line."""
    found = key_of(error.text(error.line))
    if found is None or found[0] + len(found[1]) >= error.col:
        return None
    return (f"a list item ('- ') on the line of {quoted(found[1])}; the items of a list start on lines of their "
            f"own: end the line after '{found[1]}:' and write each item below it as '- ...', indented, or write the "
            "list as [a, b]")


def _no_colon(match: re.Match[str], error: Marked) -> str | None:
    if error.context is None:
        return None
    written = re.sub(r"\s+#.*$", "", error.text(error.context[0])[error.context[1]:]).strip()
    words = written.split(None, 1)
    fix = f"{words[0]}: {words[1]}" if len(words) == 2 else f"{written}: VALUE"
    return (f"{quoted(cut(written))} on line {error.context[0] + 1} is read as a key, but no ':' follows it: "
            f"write it as 'key: value' ({quoted(cut(fix))}), or indent it under the key whose value it continues")


def _unclosed_quote(match: re.Match[str], error: Marked) -> str | None:
    if error.context is None:
        return None
    line, col = error.context
    quote = error.text(line)[col:col + 1]
    end = f"the end of {error.whole}" if match.group(1) == "end of stream" else "the '---' here"
    return (f"the quote {char(quote)} opened at {line + 1}:{col + 1} is never closed, so the value runs on to "
            f"{end}: close it with {char(quote)}")


_FOUND = {"<scalar>": "more text", "<document start>": "'---'"}


def _unclosed_flow(match: re.Match[str], error: Marked) -> str | None:
    if error.context is None:
        return None
    closer, got = match.group(1), match.group(2)
    opener = "[" if closer == "]" else "{"
    opened = f"the '{opener}' opened at {error.context[0] + 1}:{error.context[1] + 1}"
    if got == "<stream end>":
        return f"{opened} is never closed: {error.whole} ends first; add '{closer}' where it ends"
    if got in ("]", "}"):
        return f"{opened} is closed by '{got}'; expected '{closer}': close it with '{closer}'"
    word = re.match(r"[^\s,\]}:]+", error.text(error.line)[error.col:]) if got == "<scalar>" else None
    found = quoted(cut(word.group())) if word else _FOUND.get(got, char(got))
    previous = previous_line(error, error.line)
    if error.line > error.context[0] and "," not in error.text(error.line)[:error.col] and previous is not None:
        return (f"{opened} is still open on line {error.line + 1}, where {found} cannot follow; expected "
                f"'{closer}' to close it at the end of line {previous + 1}, or ',' there if its entries go on: "
                f"add the missing '{closer}' or ','")
    return (f"{opened} is still open here, where {found} cannot follow; expected ',' before the next entry or "
            f"'{closer}' to close it: add the missing ',' or '{closer}'")


def _escape(match: re.Match[str], error: Marked) -> str:
    return (f"'\\{match.group(1)}' is not an escape that YAML knows inside double quotes (expected one such as "
            "'\\n', '\\t', '\\\\' or '\\\"'): write '\\\\' for a backslash, or use single quotes, which keep "
            "backslashes as written")


def _unknown_alias(match: re.Match[str], error: Marked) -> str:
    name = match.group(1)
    return (f"the alias '*{name}' names no anchor; an alias repeats a value marked '&{name}' earlier in the file: "
            f"mark that value with '&{name}', or write the value here")


def _duplicate_anchor(match: re.Match[str], error: Marked) -> str | None:
    if error.context is None:
        return None
    name = re.match(r"&?([^\s,\]}]+)", error.text(error.line)[error.col:])
    if name is None:
        return None
    return (f"the anchor '&{name.group(1)}' is defined a second time here (first at {error.context[0] + 1}:"
            f"{error.context[1] + 1}); each anchor is defined once: rename one, and the aliases that mean it")


# PyYAML's problem text (matched whole) and context (its start; None: any) -> the rule that says it in user terms.
_TABLE: tuple[tuple[re.Pattern[str], str | None, _Rule], ...] = (
    (re.compile(r"found character '\\t' that cannot start any token"), None, _tab),
    (re.compile(r"found character '(.)' that cannot start any token"), None, _reserved),
    (re.compile(r"expected <block end>, but found '<block (?:mapping|sequence) start>'"), None, _indentation),
    (re.compile(r"expected '<document start>', but found '<block mapping start>'"), None, _top_level),
    (re.compile(r"expected <block end>, but found '-'"), "while parsing a block mapping", _item_among_keys),
    (re.compile(r"expected <block end>, but found '\?'"), "while parsing a block collection", _key_among_items),
    (re.compile(r"expected <block end>, but found '([\]}])'"), None, _stray_closer),
    (re.compile(r"expected <block end>, but found '<scalar>'"), "while parsing a block mapping", _after_value),
    (re.compile(r"mapping values are not allowed here"), None, _colon_in_value),
    (re.compile(r"sequence entries are not allowed here"), None, _item_after_key),
    (re.compile(r"could not find expected ':'"), "while scanning a simple key", _no_colon),
    (re.compile(r"found unexpected (end of stream|document separator)"), "while scanning a quoted scalar",
     _unclosed_quote),
    (re.compile(r"expected ',' or '([\]}])', but got '(.*)'"), "while parsing a flow", _unclosed_flow),
    (re.compile(r"found unknown escape character '(.*)'"), "while scanning a double-quoted scalar", _escape),
    (re.compile(r"found undefined alias '(.*)'"), None, _unknown_alias),
    (re.compile(r"second occurrence"), "found duplicate anchor", _duplicate_anchor),
)
