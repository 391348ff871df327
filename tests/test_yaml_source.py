"""The YAML front end: tags match PyYAML's own safe loader, positions are found on demand."""

from __future__ import annotations

import yaml

from specgen.diagnostics import Position
from specgen.spec.yaml_compose import FAST_LOADER, compose
from specgen.spec.yaml_source import parse_yaml

# YAML 1.1 scalars whose tag depends on their exact text and quoting.
SCALARS = ["yes", "No", "on", "~", "null", "1e-3", "1.0e-3", "0x1F", "0o17", "017", "1_000", ".inf", "-.Inf",
           ".nan", "2020-01-01", "2020-01-01 10:00:00", "12:30", "'1'", '"true"', "true", "'yes'", "1", "same", "conv2d", "",
           "+1", "0.5", "1:20", "0b101"]


def _tags(node: yaml.Node) -> list[str]:
    if isinstance(node, yaml.ScalarNode):
        return [node.tag]
    if isinstance(node, yaml.MappingNode):
        return [tag for key, value in node.value for tag in (*_tags(key), *_tags(value))]
    return [node.tag] + [tag for item in node.value for tag in _tags(item)]


def test_cached_tags_equal_pyyaml_safe_loader() -> None:
    """Twice over, so the second pass answers from the tag cache."""
    text = "\n".join(f"k{i}: {s}" for i, s in enumerate(SCALARS)) + "\nlist: [1, a, 2.5, null, [x]]\n"
    expected = _tags(yaml.compose(text, Loader=yaml.SafeLoader))
    assert FAST_LOADER is not None  # the wheel of PyYAML on every supported platform ships libyaml
    for _ in range(2):
        assert _tags(compose(text)) == expected
    # The values: those YAML 1.2 reads alike are PyYAML's; the rest are refused (yaml_dialect.py, test_cli_hostile.py)
    same = [s for s in SCALARS if s not in YAML11_ONLY]
    text = "\n".join(f"k{i}: {s}" for i, s in enumerate(same)) + "\nlist: [1, a, 2.5, null, [x]]\n"
    data, _ = parse_yaml(text, "t.yaml")
    assert data == yaml.load(text, Loader=yaml.SafeLoader)


YAML11_ONLY = {"yes", "No", "on", "017", "1_000", "2020-01-01", "2020-01-01 10:00:00", "12:30", "1:20", "0b101"}


def test_positions_of_values_keys_and_merged_keys() -> None:
    text = "base: &b\n  x: 1\n  y: [a, b]\nitem:\n  <<: *b\n  x: 2\n"
    data, source = parse_yaml(text, "t.yaml")
    assert data == {"base": {"x": 1, "y": ["a", "b"]}, "item": {"x": 2, "y": ["a", "b"]}}
    assert source.locate(("item", "x"), data) == Position(6, 6)  # the key written in the mapping won
    assert source.locate(("item", "x"), data, key=True) == Position(6, 3)
    assert source.locate(("item", "y", 1), data) == Position(3, 10)  # found through the merge
    assert source.locate(("item", "nope", "deeper"), data) == Position(5, 3)  # nearest existing node
    assert source.locate((), data) == Position(1, 1)
