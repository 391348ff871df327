"""YAML syntax mistakes said in the spec writer's terms (specgen/spec/yaml_errors.py), one case per mistake.

Each case is a small text with one mistake a person makes while writing a spec; the whole diagnostic line is
asserted: PyYAML's position (unchanged), then what the reader found, what it expected and what to do. Before
yaml_errors.py every one of them passed PyYAML's own words through (`invalid YAML: expected <block end>, but found
'<block mapping start>'`, `mapping values are not allowed here`, `found character '\\t' that cannot start any token`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specgen.cli import main
from specgen.diagnostics import SpecError
from specgen.spec.overrides import parse_override
from specgen.spec.yaml_source import parse_yaml

MISTAKES: dict[str, tuple[str, str]] = {
    # --- indentation -------------------------------------------------------------------------------------------
    "tab_indents": (
        "outputs:\n\ty: d\n",
        "s.yaml:2:1: error: a tab character indents this line; YAML indents with spaces only: replace the tab with "
        "spaces"),
    "tab_after_spaces": (
        "outputs:\n  \ty: d\n",
        "s.yaml:2:3: error: a tab character indents this line; YAML indents with spaces only: replace the tab with "
        "spaces"),
    "key_deeper_than_sibling_with_flow_value": (
        "collections:\n  a: [x]\n    b: [y]\n",
        "s.yaml:3:5: error: 'b' is indented 4 spaces, more than 'a' on line 2 (2 spaces), which already has a value, "
        "so it can be neither inside it nor beside it: indent it 2 spaces like 'a'"),
    "key_deeper_than_sibling_with_plain_value": (
        "loss:\n  kind: mean_squared_error\n   predictions: y\n  labels: t\n",
        "s.yaml:3:15: error: 'predictions' is indented 3 spaces, more than 'kind' on line 2 (2 spaces), so YAML "
        "reads it as more of the value of 'kind' ('mean_squared_error'), where a key cannot start: indent it 2 "
        "spaces like 'kind'"),
    "key_deeper_inside_list_item": (
        "layers:\n  - name: a\n     op: dense\n",
        "s.yaml:3:8: error: 'op' is indented 5 spaces, more than 'name' on line 2 (4 spaces), so YAML reads it as "
        "more of the value of 'name' ('a'), where a key cannot start: indent it 4 spaces like 'name'"),
    "key_between_two_levels": (
        "loss:\n  kind: mse\n # the labels\n predictions: y\n",
        "s.yaml:4:2: error: 'predictions' is indented 1 space: less than 'kind' on line 2 (2 spaces) and more than "
        "'loss' on line 1 (0 spaces), so YAML cannot tell which it belongs with: indent it 2 spaces like 'kind', or "
        "0 spaces like 'loss'"),
    "list_item_between_two_levels": (
        "layers:\n  - a\n - b\n",
        "s.yaml:3:2: error: the list item is indented 1 space: less than the list item on line 2 (2 spaces) and more "
        "than 'layers' on line 1 (0 spaces), so YAML cannot tell which it belongs with: indent it 2 spaces like the "
        "list item, or 0 spaces like 'layers'"),
    "list_item_deeper_than_the_one_above": (
        "layers:\n  - {name: a}\n    - {name: b}\n",
        "s.yaml:3:5: error: the list item is indented 4 spaces, more than the list item on line 2 (2 spaces), which "
        "already has a value, so it can be neither inside it nor beside it: indent it 2 spaces like the list item"),
    "key_under_a_flow_list_item": (
        "layers:\n  - {name: a}\n    op: dense\n",
        "s.yaml:3:5: error: 'op' is indented 4 spaces, more than the list item on line 2 (2 spaces), which already "
        "has a value, so it can be neither inside it nor beside it: start it with '- ' at 2 spaces to make it an "
        "item, or put it inside the item above"),
    "top_level_key_indented": (
        "  specgen: 1\nname: m\n",
        "s.yaml:2:1: error: 'name' is indented 0 spaces, less than the first key 'specgen' on line 1 (2 spaces); a "
        "spec's top-level keys all start at one column: indent them alike (0 spaces)"),
    "top_level_key_indented_one_space": (  # the unit, singular (rt6 review, finding 12: it printed a bare "(1)")
        "# a comment\n specgen: 1\nname: m\n",
        "s.yaml:3:1: error: 'name' is indented 0 spaces, less than the first key 'specgen' on line 2 (1 space); a "
        "spec's top-level keys all start at one column: indent them alike (0 spaces)"),
    "list_item_among_keys": (
        "name: m\n- conv1\n",
        "s.yaml:2:1: error: a list item ('-') where the mapping expects a key (like 'name' on line 1): a list goes "
        "under a key of its own, written 'key:' with the items indented below it; move the item there, or delete it"),
    "key_among_list_items": (
        "frozen:\n  - conv1/*\n  head: x\n",
        "s.yaml:3:3: error: 'head' is a key among the items of the list on line 2, which each start with '- ': make "
        "it an item ('- head: x'), or indent it 0 spaces like 'frozen' if it is a key beside 'frozen'"),
    # --- "mapping values are not allowed here" ------------------------------------------------------------------
    "colon_space_inside_a_value": (
        "doc: a model: small\n",
        "s.yaml:1:13: error: a second ': ' in the value of 'doc'; a plain value cannot hold ': ': put the value in "
        "quotes (\"a model: small\")"),
    "no_space_after_colon_above": (
        "name:m\nspecgen: 1\n",
        "s.yaml:2:8: error: line 1 ('name:m') has no space after its ':', so YAML reads it as text, not 'key: value', "
        "and 'specgen' as more of that text: write a space after the ':'"),
    "line_above_without_colon": (
        "inputs:\n  x\n  y: {shape: [4]}\n",
        "s.yaml:3:4: error: line 2 ('x') is not 'key: value', so YAML reads 'y' as more of that text, where a key "
        "cannot start: give that line a ':' and a value, or delete it"),
    "list_item_on_the_keys_line": (
        "layers: - {name: a, op: relu}\n",
        "s.yaml:1:9: error: a list item ('- ') on the line of 'layers'; the items of a list start on lines of their "
        "own: end the line after 'layers:' and write each item below it as '- ...', indented, or write the list as "
        "[a, b]"),
    # --- "could not find expected ':'" --------------------------------------------------------------------------
    "key_without_colon": (
        "layers:\n  - name: a\n    op dense\n    units: 2\n",
        "s.yaml:4:5: error: 'op dense' on line 3 is read as a key, but no ':' follows it: write it as 'key: value' "
        "('op: dense'), or indent it under the key whose value it continues"),
    # --- quotes -------------------------------------------------------------------------------------------------
    "unclosed_double_quote": (
        'doc: "a model\nname: m\n',
        "s.yaml:3:1: error: the quote '\"' opened at 1:6 is never closed, so the value runs on to the end of the "
        "file: close it with '\"'"),
    "unclosed_single_quote": (
        "doc: 'a model\nname: m\n",
        "s.yaml:3:1: error: the quote \"'\" opened at 1:6 is never closed, so the value runs on to the end of the "
        "file: close it with \"'\""),
    "text_after_closing_quote": (
        'doc: "a" model\n',
        "s.yaml:1:10: error: more text ('model') after a value that already ended at its closing quote or bracket: "
        "put all of it inside the quotes or brackets, or begin a comment with ' #'"),
    "unknown_escape": (
        'doc: "C:\\data"\n',
        "s.yaml:1:10: error: '\\d' is not an escape that YAML knows inside double quotes (expected one such as '\\n', "
        "'\\t', '\\\\' or '\\\"'): write '\\\\' for a backslash, or use single quotes, which keep backslashes as "
        "written"),
    # --- brackets and braces ------------------------------------------------------------------------------------
    "unclosed_brace_before_next_item": (
        "layers:\n  - {name: a, op: dense\n  - {name: b, op: relu}\n",
        "s.yaml:3:5: error: the '{' opened at 2:5 is still open on line 3, where '{' cannot follow; expected '}' to "
        "close it at the end of line 2, or ',' there if its entries go on: add the missing '}' or ','"),
    "unclosed_bracket_before_next_key": (
        "frozen: [conv1/*\nname: m\n",
        "s.yaml:2:5: error: the '[' opened at 1:9 is still open on line 2, where ':' cannot follow; expected ']' to "
        "close it at the end of line 1, or ',' there if its entries go on: add the missing ']' or ','"),
    "unclosed_bracket_at_end": (
        "frozen: [conv1/*, bn1/*\n",
        "s.yaml:2:1: error: the '[' opened at 1:9 is never closed: the file ends first; add ']' where it ends"),
    "missing_comma_in_braces": (
        "x: {shape: [4] dtype: int32}\n",
        "s.yaml:1:16: error: the '{' opened at 1:4 is still open here, where 'dtype' cannot follow; expected ',' "
        "before "
        "the next entry or '}' to close it: add the missing ',' or '}'"),
    "bracket_closed_by_brace": (
        "x: {shape: [4, 4}\n",
        "s.yaml:1:17: error: the '[' opened at 1:12 is closed by '}'; expected ']': close it with ']'"),
    "closer_without_opener": (
        "frozen: [conv1/*]]\n",
        "s.yaml:1:18: error: a ']' that closes nothing (no '[' is open here): delete it, or add the '[' it closes"),
    # --- reserved characters, anchors and aliases ---------------------------------------------------------------
    "reserved_first_character": (
        "doc: @home\n",
        "s.yaml:1:6: error: a value starts with '@', which YAML reserves; expected a value that starts otherwise: put "
        "the value in quotes (\"@home\")"),
    "unknown_alias": (
        "a: *defaults\n",
        "s.yaml:1:4: error: the alias '*defaults' names no anchor; an alias repeats a value marked '&defaults' earlier "
        "in the file: mark that value with '&defaults', or write the value here"),
    "duplicate_anchor": (
        "a: &d 1\nb: &d 2\n",
        "s.yaml:2:4: error: the anchor '&d' is defined a second time here (first at 1:4); each anchor is defined once: "
        "rename one, and the aliases that mean it"),
    # --- the fallback: a mistake the table does not know keeps PyYAML's words -----------------------------------
    "unknown_to_the_table": (
        "doc: |x\n  text\n",
        "s.yaml:1:7: error: invalid YAML: expected chomping or indentation indicators, but found 'x'"),
}


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_each_yaml_mistake_is_said_in_the_writers_terms(name: str) -> None:
    text, expected = MISTAKES[name]
    with pytest.raises(SpecError) as caught:
        parse_yaml(text, "s.yaml")
    assert [str(d) for d in caught.value.diagnostics] == [expected]


def test_the_newcomers_three_files_through_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The checker's repro (an indented key, a tab, a continuation), through the CLI with a whole spec around it."""
    head = "specgen: 1\nname: m\ninputs:\n  x: {shape: [4]}\noutputs:\n"
    layers = "layers:\n  - {name: d, op: dense, units: 2}\n"
    (tmp_path / "ind.yaml").write_text(f"{head}  y: d\n{layers}collections:\n  a: [\"d/*\"]\n    b: [\"d/kernel\"]\n")
    (tmp_path / "tab.yaml").write_text(f"{head}\ty: d\n{layers}")
    (tmp_path / "ind2.yaml").write_text(f"{head}  y: d\n{layers}loss:\n  kind: mean_squared_error\n"
                                        "   predictions: y\n  labels: t\n")
    code = main(["validate", *(str(tmp_path / n) for n in ("ind.yaml", "tab.yaml", "ind2.yaml"))])
    err = capsys.readouterr().err.replace(f"{tmp_path}/", "")
    assert code == 1
    assert err.splitlines() == [
        "ind.yaml:11:5: error: 'b' is indented 4 spaces, more than 'a' on line 10 (2 spaces), which already has a "
        "value, so it can be neither inside it nor beside it: indent it 2 spaces like 'a'",
        "ind2.yaml:11:15: error: 'predictions' is indented 3 spaces, more than 'kind' on line 10 (2 spaces), so YAML "
        "reads it as more of the value of 'kind' ('mean_squared_error'), where a key cannot start: indent it 2 "
        "spaces like 'kind'",
        "tab.yaml:6:1: error: a tab character indents this line; YAML indents with spaces only: replace the tab with "
        "spaces",
        "3 errors found",
    ]


def test_an_alias_in_a_text_only_pyyaml_reads_is_no_traceback() -> None:
    """libyaml refuses `labels:{label: y}` in a flow mapping, PyYAML reads it; compose falls back to PyYAML, but
    marking the aliases read the text again with libyaml and raised its ScannerError (a traceback)."""
    data, _ = parse_yaml("a: &k {kind: x}\nb: {c: 1, labels:{label: y}}\nd: *k\n", "s.yaml")
    assert data["d"] == {"kind": "x"}


def test_a_set_value_says_the_value_ends_not_the_file() -> None:
    with pytest.raises(SpecError) as caught:
        parse_override("train.batch_size='16")
    assert str(caught.value) == (
        "--set train.batch_size='16: error: the quote \"'\" opened at 1:1 is never closed, so the value runs on to "
        "the end of the value: close it with \"'\" (column 4 of the value)")
