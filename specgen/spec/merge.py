"""The merge of spec trees that `extends` composes (compose.py loads the files): every value keeps the `Setting`s
that wrote it, in order (the last one won), so diagnostics point where the winning value was written and `specgen
explain` lists every place that set a key.

The rules (docs/spec.md, "Composing specs"):

- mappings merge key by key; `key: null` in a file that extends removes the key its bases gave (Helm's rule for
  values files; a null that removes nothing stays a null, as in a plain spec), and the removal stays in the
  history;
- a list whose items are all mappings with a `name` (`layers`, a block's `layers`) merges by name: an item naming
  an existing one changes only the fields it gives, a new one is appended or placed with `after: NAME` /
  `before: NAME` (one of the two, naming another item; several placed after one item keep their written order),
  and `{name: X, remove: true}` removes one (a name twice in one list is an error, and so is a removal that would
  silently rewire the layer after it, which read the removed one implicitly); once one item of a file's list over a
  named list has a `name`, an item without one is an error at that item (_check_named);
- every other value, lists included, is replaced whole (its history keeps the places it replaced).

A named list merges in one pass, linear in its length (a linked list by name): a variant of 16,000 layers once
took a minute, rebuilding the list of names for each of its items.

A value's history keeps each place that wrote it once, so a diamond of bases (a extends [b, c], both extend d)
cannot double at every level.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from specgen.diagnostics import SpecError, did_you_mean, quoted
from specgen.spec.tree import Added, ComposedSourceMap, Gone, Node, Orphan, Setting, error_at, node, received

__all__ = ["ComposedSourceMap", "Node", "Setting", "check_added", "check_orphans", "error_at", "merge", "node", "received"]

CONTROL = ("remove", "after", "before")  # the keys of a named item that steer the merge; never in the result


def merge(base: Node, child: Node) -> Node:
    """`child` written over `base` by the rules of the module docstring."""
    if base.mapping is not None and child.mapping is not None:
        merged = dict(base.mapping)
        for key, value in child.mapping.items():
            old = merged.get(key)
            if value.removed:  # a key a later base removed: that base gives nothing there
                merged.setdefault(key, value)
            elif old is None:
                merged[key] = value
            elif _is_null(value):
                merged[key] = _removal(old, value)  # `key: null` removes what the bases gave
            else:
                if old.removed:  # written again: it comes last, as a key the bases never gave (the data's order)
                    del merged[key]
                merged[key] = merge(old, value)
        return Node(_history(base.settings, child.settings), mapping=merged)
    if base.items is not None and child.items is not None and _named(base.items):
        _check_named(child.items)
    if base.items is not None and child.items is not None and _named(base.items) and _named(child.items):
        items, orphans, gone, added = _merge_named(base.items, child.items)
        live = {item.name() for item in items}
        gone = {name: g for name, g in {**base.gone, **gone}.items() if name not in live}
        return Node(_history(base.settings, child.settings), items=items,
                    orphans=(*base.orphans, *child.orphans, *orphans), gone=gone, added={**base.added, **added})
    # Anything else is replaced whole (a leaf, a list that is not named, a type change the schema then refuses):
    # the child's value, with the places it replaced first in its history (`explain` lists them all).
    return Node(_history(base.settings, child.settings), value=child.value, mapping=child.mapping,
                items=child.items, orphans=child.orphans, gone=child.gone, added=child.added)


def _is_null(value: Node) -> bool:
    return value.mapping is None and value.items is None and value.value is None


def _removal(old: Node, null: Node) -> Node:
    """What `key: null` leaves of a key the bases gave: nothing in the data, the history for `explain`."""
    return Node(_history(old.settings, [replace(s, removes=True) for s in null.settings]), removed=True)


def _history(first: list[Setting], then: list[Setting]) -> list[Setting]:
    """The settings of `first`, then of `then`, each place once at its last: a base reached along two paths (a
    diamond) wrote its values once, and keeping both copies would double every history at every level."""
    if not first or not then:
        return first + then
    later = {s.place() for s in then}
    return [s for s in first if s.place() not in later] + then


def _named(items: list[Node]) -> bool:
    """Every item a mapping with a string `name` (a child's item may be only `{name, remove}`)."""
    return bool(items) and all(isinstance(i.name(), str) for i in items)


def _check_named(items: list[Node]) -> None:
    """A list written over a named one, with items that name theirs, merges by name: an item without a string `name`
    is then a mistake of its own, reported as itself. (Replacing the whole list for it silently dropped the bases'
    items and reported the named ones as lacking their `op`.) A list no item of which is named is replaced whole."""
    if not any(isinstance(item.name(), str) for item in items):
        return
    found = [_unnamed(item) for item in items if not isinstance(item.name(), str)]
    if found:
        raise SpecError([d for problem in found for d in problem.diagnostics])


def _unnamed(item: Node) -> SpecError:
    why = "this list merges by name with its bases' list: each item names the item it adds or changes"
    at = item.settings[-1]
    if item.mapping is None:
        return error_at(at, f"{_key(at.loc)}: expected a mapping with a `name` ({why}); received {received(item.data())}")
    if "name" not in item.mapping or item.mapping["name"].removed:
        return error_at(at, f"{_key(at.loc)}: missing required key 'name' ({why})")
    name = item.mapping["name"]
    return error_at(name.settings[-1], f"name: expected a string ({why}); received {received(name.data())}")


def _key(loc: tuple[Any, ...]) -> str:
    """A location as messages write a key: `layers[1]`, `blocks.unit.layers[0]`."""
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")


class _Chain:
    """A named list as a doubly linked list: finding, changing, moving and removing an item by name cost O(1).
    A name a base lists twice (a plain spec's error, which validation reports) keeps its first item findable."""

    END = object()  # before the first item and after the last

    def __init__(self, items: list[Node]) -> None:
        self.node: dict[Any, Node] = {}
        self.next: dict[Any, Any] = {self.END: self.END}
        self.prev: dict[Any, Any] = {self.END: self.END}
        self.keys: dict[str, Any] = {}  # name -> its item's key (the name, or a fresh object for a repeat)
        for item in items:
            key = item.name() if item.name() not in self.keys else object()
            self.keys.setdefault(item.name(), key)
            self.node[key] = item
            self.link(key, before=self.END)

    def link(self, key: Any, before: Any) -> None:
        after = self.prev[before]
        self.next[after], self.prev[key], self.next[key], self.prev[before] = key, after, before, key

    def unlink(self, key: Any) -> None:
        after, before = self.prev.pop(key), self.next.pop(key)
        self.next[after], self.prev[before] = before, after

    def find(self, name: Any) -> Any:
        key = self.keys.get(name) if isinstance(name, str) else None
        return key if key is not None and key in self.prev else None

    def items(self) -> list[Node]:
        out, key = [], self.next[self.END]
        while key is not self.END:
            out.append(self.node[key])
            key = self.next[key]
        return out

    def names(self) -> list[Any]:
        return [item.name() for item in self.items()]


def _merge_named(base: list[Node], child: list[Node]) -> tuple[list[Node], list[Orphan], dict[str, Gone],
                                                             dict[str, Added]]:
    chain = _Chain(base)
    before = tuple(str(name) for name in chain.names())
    added: dict[str, Added] = {}
    seen: dict[str, Setting] = {}
    placed: set[str] = set()  # new items and items moved with after/before: where this list put them is deliberate
    behind: dict[Any, Any] = {}  # an item's key -> the last item this list placed `after:` it (_place)
    orphans: list[Orphan] = []
    gone: dict[str, Gone] = {}
    for item in child:
        assert item.mapping is not None
        name = item.name()
        _check_once(item, name, seen)
        steer = {k: item.mapping[k] for k in CONTROL if k in item.mapping}
        key = chain.find(name)
        if "remove" in steer and steer["remove"].value is not False:
            _check_remove(item, steer["remove"], name, key, chain)
            following = chain.next[key]
            gone[name] = Gone(chain.node[key], steer["remove"].settings[-1])
            chain.unlink(key)
            if following is not chain.END and _reads_previous(chain.node[following]):
                orphans.append(Orphan(chain.node[following].name(), name, steer["remove"].settings[-1], None))
            continue
        body = Node(item.settings, mapping={k: v for k, v in item.mapping.items() if k not in CONTROL})
        if key is None:
            added[name] = Added(item.settings[-1], before)
            key = chain.keys[name] = name if name not in chain.node else object()
            chain.node[key] = body
            placed.add(name)
            chain.link(key, before=_place(name, key, steer, chain, behind, chain.END))
        else:
            chain.node[key] = merge(chain.node[key], body)
            if "after" in steer or "before" in steer:
                placed.add(name)
                after = chain.next[key]
                chain.unlink(key)  # placed relative to the others: `{name: a, after: a}` names no other item
                # What this list placed behind it stays where it was: an item placed after it later goes right after
                # it, not after a record of where it stood (_place). (It was placed nowhere before: a name is listed
                # once in a list, so no record points at it.)
                behind.pop(key, None)
                chain.link(key, before=_place(name, key, steer, chain, behind, after))
        gone.pop(name, None)
    result = chain.items()
    return result, _orphaned(result, orphans, placed), gone, added


def _check_once(item: Node, name: str, seen: dict[str, Setting]) -> None:
    """One item per name in a list that merges by name (as a plain spec's layer names are unique)."""
    at = _name_at(item)
    if name in seen:
        raise error_at(at, f"name: {quoted(name)} is listed twice in this list (first at {seen[name].where()}); an item "
                      "is changed in one place: merge the two into one")
    seen[name] = at


def _name_at(item: Node) -> Setting:
    """Where a named item's `name` was last written: diagnostics about the item point there."""
    assert item.mapping is not None  # only the items of a named list (_named) get here
    return item.mapping["name"].settings[-1]


def _check_remove(item: Node, flag: Node, name: str, key: Any, chain: _Chain) -> None:
    assert item.mapping is not None
    if flag.data() is not True:  # data(): a list or mapping holds no `value` (it printed as null)
        raise error_at(flag.settings[-1], f"remove: expected true; received {received(flag.data())}")
    extra = next((k for k in item.mapping if k not in ("name", "remove")), None)
    if extra is not None:  # `after`, `units`, ... beside `remove: true` would be silently ignored
        raise error_at(item.mapping[extra].settings[-1], f"{extra}: an item with `remove: true` takes only `name`; "
                                                    f"drop {quoted(extra)} or `remove`")
    if key is None:
        raise error_at(flag.settings[-1], f"remove: no base defines an item named {quoted(name)}; "
                                     f"{_choices(chain.names())}")


def _given(item: Node, key: str) -> bool:
    found = item.mapping.get(key) if item.mapping is not None else None
    return found is not None and not found.removed and not _is_null(found)


def _reads_previous(item: Node) -> bool:
    """A layer (or block instance) without `input` / `inputs`: it reads the layer listed before it."""
    return (_given(item, "op") or _given(item, "block")) and not (_given(item, "input") or _given(item, "inputs"))


def _positions(items: list[Node]) -> dict[Any, int]:
    """Each name's index (its first, as `list.index` finds it)."""
    found: dict[Any, int] = {}
    for n, item in enumerate(items):
        found.setdefault(item.name(), n)
    return found


def _orphaned(result: list[Node], orphans: list[Orphan], placed: set[str]) -> list[Orphan]:
    """The orphans this list leaves, each with the layer it now reads: not those this list gave an input or a
    layer of its own right before them (as an insertion does, on purpose), nor those removed as well."""
    index_of = _positions(result) if orphans else {}
    left = []
    for orphan in orphans:
        if orphan.reader not in index_of:
            continue  # removed as well: the layer after it was checked when it was
        index = index_of[orphan.reader]
        before = result[index - 1].name() if index else None
        if _reads_previous(result[index]) and orphan.reader not in placed and before not in placed:
            left.append(orphan._replace(now_reads=before))
    return left


def check_orphans(tree: Node) -> None:
    """After the whole spec is merged: a layer that read a removed layer implicitly and would now silently read the
    one before that is an error at the reader (docs/spec.md), unless a later file gave it an input or changed the
    layer before it (an insertion, a move: on purpose)."""
    if tree.items is not None and tree.orphans:
        index_of = _positions(tree.items)
        for orphan in tree.orphans:
            index = index_of.get(orphan.reader)
            if index is None or not _reads_previous(tree.items[index]):
                continue
            if (tree.items[index - 1].name() if index else None) == orphan.now_reads:
                raise _orphan_error(tree.items[index], orphan)
    children = tree.mapping.values() if tree.mapping is not None else tree.items or []
    for child in children:
        check_orphans(child)


def check_added(tree: Node) -> None:
    """After the whole spec is merged: a layer a file appended to its bases' list that no file gave an `op` (or a
    `block`) is most likely one that tunes a layer the bases no longer have (renamed in a shared base): say so at
    the entry, with the bases' names, rather than the schema's bare "missing required key 'op'"."""
    if tree.items is not None and tree.added:
        layers = any(_given(item, "op") or _given(item, "block") for item in tree.items)
        for item in tree.items:
            found = tree.added.get(item.name())
            if layers and found is not None and not (_given(item, "op") or _given(item, "block")):
                raise _added_error(str(item.name()), found)
    children = tree.mapping.values() if tree.mapping is not None else tree.items or []
    for child in children:
        check_added(child)


def _added_error(name: str, added: Added) -> SpecError:
    names = ", ".join(added.before[:12]) + (", ..." if len(added.before) > 12 else "")
    return error_at(added.at, f"layer {quoted(name)} is not in any base (their layers: {names}"
                              f"{did_you_mean(name, added.before)}): a new layer needs an 'op' (or a 'block'); to "
                              "change a layer of the bases, name it")


def _orphan_error(reader: Node, orphan: Orphan) -> SpecError:
    before = orphan.now_reads
    now = f"the layer before it is now {quoted(before)}" if before is not None else "it is now the first layer"
    return error_at(_name_at(reader), f"layer {quoted(orphan.reader)} reads {quoted(orphan.removed)} implicitly (as the "
                                      f"layer before it), and {orphan.flag.where()} removes {quoted(orphan.removed)}; "
                                      f"give {quoted(orphan.reader)} an explicit `input:` ({now})")


def _place(name: str, key: Any, steer: dict[str, Node], chain: _Chain, behind: dict[Any, Any], default: Any) -> Any:
    """The key the item `name` (chain key `key`) goes before: after/before a named one, else `default` (where it was;
    a new one: the end).

    Items placed `after:` one item keep their written order (`{name: a, after: h1}`, `{name: b, after: h1}` read
    h1, a, b): each goes after the items this list already placed behind that one, and behind those in turn
    (`behind`, kept short by pointing the target at the newest). Placing each right after the target reversed them.
    `before:` keeps the written order by itself: each goes right before the target, after the ones before it."""
    if "after" in steer and "before" in steer:  # one of the two would be silently dropped
        raise error_at(steer["before"].settings[-1], "before: an item is placed `after:` one item or `before:` one, "
                                                     "not both; drop one")
    for word, after in (("after", True), ("before", False)):
        if word in steer:
            target = steer[word]
            if not isinstance(target.data(), str):  # a list, a mapping, a number: a name is text
                raise error_at(target.settings[-1], f"{word}: expected the name of another item (text); received "
                                                    f"{received(target.data())}")
            if target.value == name:
                raise error_at(target.settings[-1], f"{word}: an item cannot be placed {word} itself ({quoted(name)}); "
                                                    f"{_choices([n for n in chain.names() if n != name])}")
            found = chain.find(target.value)
            if found is None:
                raise error_at(target.settings[-1], f"{word}: no item named {quoted(target.value)} to place it "
                                                    f"{word}; {_choices(chain.names())}")
            if not after:
                return found
            last = found
            while last in behind:  # the items placed behind it, and behind those, in the order they were placed
                last = behind[last]
            behind[found] = key  # the next one placed after `found` goes after this one (and after what follows it)
            return chain.next[last]
    return default


def _choices(names: list[Any]) -> str:
    shown_names = ", ".join(str(n) for n in names[:12]) + (", ..." if len(names) > 12 else "")
    return f"expected one of {shown_names}" if names else "the list is empty"
