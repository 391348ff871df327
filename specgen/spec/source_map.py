"""Where each value of a YAML file was written: the composed node tree kept beside the plain values.

The converter (yaml_source.py) builds the values; a SourceMap walks the node tree only when a diagnostic
needs a position, so a valid spec pays nothing for positions.
"""

from __future__ import annotations

from typing import Any

import yaml

from specgen.diagnostics import MAX_ECHO, Position
from specgen.spec.yaml_compose import mark_position

PathKey = tuple[str | int, ...]
STR_TAG = "tag:yaml.org,2002:str"
MERGE_TAG = "tag:yaml.org,2002:merge"


class SourceMap:
    """Where each value and mapping key of one YAML file is, looked up by path on demand.

    It keeps the composed node tree and walks it only when a diagnostic needs a position,
    so the common case (a valid spec) pays nothing for positions. Each mapping's keys are
    indexed the first time a lookup passes through it, so N diagnostics in one mapping cost
    O(N), not O(N x keys).
    """

    def __init__(self, path: str, root: yaml.Node | None = None):
        self.path = path
        self.root = root
        self._keys: dict[int, dict[Any, tuple[yaml.Node, yaml.Node]]] = {}  # id(mapping node) -> key -> nodes

    def locate(self, loc: PathKey, data: Any, *, key: bool = False) -> Position | None:
        """Position of the deepest node along `loc` that exists in `data`.

        Components that are not in the data (pydantic adds union tags such as
        'conv2d' to error locations) are skipped, so every location maps to the
        nearest real node.
        """
        return self.position(data_path(loc, data)[0], key=key)

    def position(self, path: PathKey, *, key: bool = False) -> Position | None:
        """Position of the value at `path` (or of its mapping key), which must exist."""
        value, key_node = self._nodes(path)
        target = key_node if key and key_node is not None else value
        return None if target is None else mark_position(target)

    def value(self, path: PathKey) -> Any:
        """The value at `path` as YAML reads it, None where the file has none (`explain extends`: composition takes
        `extends` out of the data, so only the file still holds it)."""
        found, _ = self._nodes(path)
        return None if found is None else yaml.SafeLoader("").construct_document(found)

    def removal(self, path: PathKey) -> Position | None:
        """Where a `key: null` over a base removed the key at `path` (a composed spec's, tree.ComposedSourceMap); a
        single file removes nothing."""
        return None

    def written(self, loc: PathKey, data: Any) -> str | None:
        """The text of the plain scalar at `loc` as the file writes it (`1.0e+400`, which Python prints as `inf`),
        if the value `data` holds there is what that text reads as (an override may have replaced it); else None."""
        path, value = data_path(loc, data)
        node = self._nodes(path)[0]
        if not isinstance(node, yaml.ScalarNode) or node.style or len(node.value) > MAX_ECHO:
            return None
        # A tag written (`!!float 1e400`) asks for its reading; text is resolved as PyYAML would (`!!str 5` is no 5).
        tag = node.tag if node.tag != STR_TAG else \
            _KEY_CONSTRUCTOR.resolve(yaml.ScalarNode, node.value, (True, False))  # type: ignore[no-untyped-call]
        read = key_value(yaml.ScalarNode(tag, node.value))
        same = read == value or (read != read and value != value)  # NaN is not equal to itself
        return node.value if same and type(read) is type(value) else None

    def _nodes(self, path: PathKey) -> tuple[yaml.Node | None, yaml.Node | None]:
        """(value node, key node) at `path`; None where it leaves the file."""
        value: yaml.Node | None = self.root
        key_node: yaml.Node | None = None
        for part in path:
            if value is None:
                return None, None
            value, key_node = self._child(value, part)
        return value, key_node

    def _child(self, node: yaml.Node, part: str | int) -> tuple[yaml.Node | None, yaml.Node | None]:
        """(value node, key node) of one step."""
        if isinstance(node, yaml.SequenceNode):
            ok = isinstance(part, int) and 0 <= part < len(node.value)
            return (node.value[part], None) if ok else (None, None)
        if not isinstance(node, yaml.MappingNode) or not hashable(part):
            return None, None
        return self._index(node).get(part, (None, None))

    def _index(self, node: yaml.MappingNode) -> dict[Any, tuple[yaml.Node, yaml.Node]]:
        """key -> (value node, key node): own keys first, then `<<` merges, as the converter reads them."""
        index = self._keys.get(id(node))
        if index is not None:
            return index
        index = self._keys[id(node)] = {}  # before the merges: a mapping merging itself stops here
        merges: list[yaml.Node] = []
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:
                merges += value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            elif isinstance(key_node, yaml.ScalarNode):
                key = key_value(key_node)
                if hashable(key):
                    index.setdefault(key, (value_node, key_node))
        for source in merges:
            if isinstance(source, yaml.MappingNode):
                for key, found in self._index(source).items():
                    index.setdefault(key, found)
        return index


def data_path(loc: PathKey, data: Any) -> tuple[PathKey, Any]:
    """The parts of `loc` that are in `data` (pydantic adds union tags such as 'conv2d' to error locations), and
    the value they lead to."""
    found: list[str | int] = []
    node = data
    for i, part in enumerate(loc):
        if tag_named_like_its_key(node, part, loc[i + 1:]):
            continue
        if isinstance(node, dict) and hashable(part) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            continue
        found.append(part)
    return tuple(found), node


def hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


_KEY_CONSTRUCTOR = yaml.SafeLoader("")  # only its scalar constructors are used


def key_value(node: yaml.ScalarNode) -> Any:
    if node.tag == STR_TAG:
        return node.value
    try:
        return _KEY_CONSTRUCTOR.construct_object(node, deep=True)
    except (yaml.YAMLError, *CONSTRUCTOR_ERRORS):
        return None
    finally:  # it remembers every node it built (or failed to); keep it from holding on to this file's
        _KEY_CONSTRUCTOR.constructed_objects.clear()
        _KEY_CONSTRUCTOR.recursive_objects.clear()


# What PyYAML's scalar constructors raise besides YAMLError on text their tag does not fit:
# ValueError (`!!timestamp 2020-99-99`), IndexError (`!!int ''`), AttributeError (`!!timestamp ''`),
# KeyError (`!!bool ''`). They are pure functions of the scalar's text, so none of these is ours.
CONSTRUCTOR_ERRORS = (ValueError, LookupError, AttributeError, TypeError, OverflowError)


def tag_named_like_its_key(node: Any, part: Any, rest: PathKey) -> bool:
    """A union tag that is also a key of the mapping (fields/unions.py by_key: a data source's `npz: PATH`, a sweep
    range's `int: [8, 64]`): when the location goes on with a sibling key (`augment`, `step`), the tag is skipped
    instead of following the key into its value. The value is followed only where it holds that next part itself
    (a mapping with that key, a list and an index): a scalar, or a list and a key name, cannot hold it. (Following a
    list value put `{int: [8, 64], step: 0}`'s error at the list and named it `int`.)"""
    if not (isinstance(node, dict) and hashable(part) and part in node and bool(rest) and hashable(rest[0])
            and rest[0] in node):
        return False
    value, after = node[part], rest[0]
    if isinstance(value, dict):
        return after not in value
    return not (isinstance(value, list) and isinstance(after, int))
