"""Collections: the user's glob collections, the built-in ones, and the checks across sections.

Built-in collections (docs/collections.md): `trainable`, `frozen`, `model`, `update`,
`optimizer`, `ema`, `step`, `metrics`, `target` (ir/targets.py), and `pruning` for a spec that prunes
(ir/pruning.py). User patterns match model variables only
(the variables layers own); `*` matches any run of characters, `/` included, and
a bare collection name stands for that collection. What an entry that selects nothing is told (a layer's name
for its variables, a near name) is ir/collection_hints.py's.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

from specgen.diagnostics import Diagnostic
from specgen.ir.collection_hints import selects_nothing, unexplained
from specgen.ir.model import Variable
from specgen.ir.training import TrainingIR, keys
from specgen.kinds import features
from specgen.kinds.metrics import REGISTRY as METRICS
from specgen.spec.load import LoadedSpec

# The built-in collection names: the shared ones, then those the training features fill (FeatureDef.collections).
SHARED = ("trainable", "frozen", "model", "update", "optimizer", "step", "metrics")
BUILTIN = (*SHARED, *(name for f in features.PIPELINE_DEFS for name in f.collections))


# What each VarDecl.kind (specgen/kinds/ops/base.py) puts a variable in before user collections:
# "weight": trainable or frozen, decided by the optimizers; "update": changed by update ops each
# training step (batch-norm statistics); "constant": needed by inference but changed by nothing in
# training (normalize's mean and variance): set by its initializer, a restore or a checkpoint.
KIND_COLLECTIONS = {"weight": ("model",), "update": ("model", "update"), "constant": ("model",)}


@dataclass
class Membership:
    """Which collections each model variable path is in, filled in as collections resolve."""

    weights: list[str]  # trainable-or-frozen candidates, in layer order
    updates: list[str]  # batch-norm statistics
    constants: list[str] = field(default_factory=list)  # model state no optimizer may claim
    # Each statistic -> the weights of its layer. A layer whose weights are all frozen (in a spec that
    # trains) runs in inference mode, as Keras runs a layer with `trainable = False`: nothing updates
    # its statistics, so they are `held` (in `model`, not in `update`). A layer without weights has
    # nothing to freeze and keeps updating them.
    layer_weights: dict[str, tuple[str, ...]] = field(default_factory=dict)
    held: set[str] = field(default_factory=set)
    collections: dict[str, list[str]] = field(default_factory=dict)
    optimizers: dict[str, list[str]] = field(default_factory=dict)
    problems: list[Diagnostic] = field(default_factory=list)
    # Copies that `targets:` entries write (ir/targets.py): trained by no optimizer, frozen or not.
    targets: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, kinds: list[tuple[str, str]], layer_weights: dict[str, tuple[str, ...]] | None = None) -> Membership:
        """From (path, VarDecl.kind) pairs in layer order, and each statistic's layer weights."""
        unknown = sorted({kind for _, kind in kinds} - set(KIND_COLLECTIONS))
        if unknown:
            raise ValueError(f"unknown variable kind(s) {unknown}; known: {', '.join(KIND_COLLECTIONS)}")
        return cls([p for p, k in kinds if k == "weight"], [p for p, k in kinds if k == "update"],
                   [p for p, k in kinds if k == "constant"], layer_weights=dict(layer_weights or {}))

    @property
    def updated(self) -> list[str]:
        """The built-in `update` collection: statistics that training changes (not the held ones)."""
        return [p for p in self.updates if p not in self.held]

    @property
    def model(self) -> list[str]:
        return self.weights + self.updates + self.constants


class Resolver:
    """Resolves selections (collection names or patterns) against the model variables."""

    def __init__(self, loaded: LoadedSpec, members: Membership):
        self.loaded, self.members = loaded, members
        self.user = loaded.spec.collections
        self.order = {p: i for i, p in enumerate(members.model)}
        self.resolved: dict[str, list[str]] = {"model": members.model, "update": members.updated}
        self.visiting: set[str] = set()
        # Per entry that named nothing: the variables its hint's rewrite selects, or None when no hint says which
        # (resolve_collections leaves those out of the "neither frozen nor claimed" error, or drops it).
        self.missed: list[set[str] | None] = []

    def collection(self, name: str) -> list[str]:
        if name in self.resolved:
            return self.resolved[name]
        if name in self.visiting:
            self.members.problems.append(self.loaded.diagnostic(
                ("collections", name), f"collection '{name}' refers to itself through other collections"))
            return []
        self.visiting.add(name)
        paths: list[str] = []
        for i, entry in enumerate(self.user[name]):
            paths += self.select(entry, ("collections", name, i))
        self.visiting.discard(name)
        self.resolved[name] = self._sorted(paths)
        return self.resolved[name]

    def select(self, entry: str, loc: tuple[str | int, ...]) -> list[str]:
        """Variables named by one entry; a diagnostic at `loc` when it names nothing."""
        if entry in self.user or entry in self.resolved:
            return self.collection(entry)
        if entry in BUILTIN:
            rest = " (an optimizer's 'variables: trainable' alone takes every weight left)" if entry == REST else ""
            what = BUILTIN_WHAT.get(entry, "is resolved from the optimizers")
            self._problem(loc, f"collection '{entry}' {what} and cannot be "
                               f"used here; name the variables or a user collection instead{rest}")
            return []
        matches = [p for p in self.order if fnmatch.fnmatchcase(p, entry)]
        if matches:
            return matches
        message, meant = selects_nothing(self.loaded, entry, self.order, self.resolved)
        self._problem(loc, message)
        self.missed.append(meant)
        return []

    def selection(self, value: str | list[str], loc: tuple[str | int, ...]) -> list[str]:
        entries = [value] if isinstance(value, str) else value
        paths: list[str] = []
        for i, entry in enumerate(entries):
            paths += self.select(entry, loc if isinstance(value, str) else (*loc, i))
        return self._sorted(paths)

    def _sorted(self, paths: list[str]) -> list[str]:
        return sorted(set(paths), key=self.order.__getitem__)

    def _problem(self, loc: tuple[str | int, ...], message: str) -> None:
        self.members.problems.append(self.loaded.diagnostic(loc, message))


def resolve_collections(loaded: LoadedSpec, members: Membership) -> None:
    """Fill `members` with user collections, frozen and trainable sets and optimizer claims."""
    spec = loaded.spec
    weights = set(members.weights)
    # `update` (a selectable name) depends on which weights are frozen, and `frozen` takes weights only, so
    # a first pass that reports nothing finds them; the second pass resolves everything with the final `update`.
    probe = Membership(members.weights, members.updates, members.constants)
    copies = set(members.targets)
    members.held = _held(members, _frozen(loaded, Resolver(loaded, probe), weights) | copies) if spec.optimizers else set()
    resolver = Resolver(loaded, members)
    for name in spec.collections:
        if name in BUILTIN:
            members.problems.append(loaded.diagnostic(("collections", name), (
                f"collection name '{name}' is built in ({', '.join(BUILTIN)}); choose another name"), key=True))
    for name in (n for n in spec.collections if n not in BUILTIN):
        members.collections[name] = resolver.collection(name)
    frozen = _frozen(loaded, resolver, weights)
    owner: dict[str, str] = {}
    known_problems = len(members.problems)
    rest = [name for name, optimizer in spec.optimizers.items() if takes_the_rest(optimizer.variables)]
    for name, optimizer in spec.optimizers.items():
        if name in rest or optimizer.variables is None:  # None takes the rest: always in `rest`
            continue
        claimed = [p for p in resolver.selection(optimizer.variables, ("optimizers", name, "variables"))
                   if p in weights]
        _check_claims(loaded, members, name, claimed, owner, frozen | copies)
        members.optimizers[name] = claimed
    _take_the_rest(loaded, members, rest, owner, frozen | copies)
    members.optimizers = {name: members.optimizers[name] for name in spec.optimizers if name in members.optimizers}
    if spec.optimizers:
        loose = [p for p in members.weights if p not in frozen and p not in owner and p not in copies]
        loose = unexplained(loose, resolver.missed)
        if loose and len(members.problems) == known_problems:  # else they are a symptom of a bad selection
            members.problems.append(loaded.diagnostic(("optimizers",), (
                f"{variable_list(loose)} {'is' if len(loose) == 1 else 'are'} neither frozen nor claimed by an "
                "optimizer; add them to an optimizer's variables or to 'frozen'"), key=True))
    else:
        frozen = weights  # no optimizer: nothing trains
    members.collections["frozen"] = [p for p in members.weights if p in frozen and p not in copies]
    members.collections["trainable"] = [p for p in members.weights if p in owner]
    if copies:
        members.collections["target"] = [p for p in members.model if p in copies]


def _frozen(loaded: LoadedSpec, resolver: Resolver, weights: set[str]) -> set[str]:
    """The weights `frozen` selects (statistics it matches are dropped: it holds weights only)."""
    return {p for i, e in enumerate(loaded.spec.frozen) for p in resolver.select(e, ("frozen", i)) if p in weights}


def _held(members: Membership, frozen: set[str]) -> set[str]:
    """Statistics of layers that have weights, all of them frozen: those layers run in inference mode."""
    return {p for p, ws in members.layer_weights.items() if ws and all(w in frozen for w in ws)}


# Why a built-in collection cannot be selected, by what it really holds (docs/collections.md); the rest
# (`trainable`, `frozen`) are resolved from the optimizers.
BUILTIN_WHAT = {
    "optimizer": "holds optimizer state (slots, learning rates, counters), not model variables,",
    "step": "holds the global step, not a model variable,", "metrics": "holds metric accumulators, not model variables,",
    "ema": "holds EMA shadows (training state that follows the trainable weights), not model variables,",
    "pruning": "holds pruning masks, not model variables,",
    "target": "is resolved from 'targets' (target-network copies, which follow their online weights)",
}

REST = "trainable"  # what users of tf.trainable_variables() write for "every weight left"


def takes_the_rest(variables: str | list[str] | None) -> bool:
    """True for an optimizer without `variables`, or with `variables: trainable` (or `[trainable]`)."""
    return variables is None or variables == REST or variables == [REST]


def _rest_loc(loaded: LoadedSpec, name: str) -> tuple[tuple[str, ...], bool]:
    """Where to point for an optimizer that takes the rest: its `variables` value, else its name."""
    written = loaded.spec.optimizers[name].variables is not None
    return (("optimizers", name, "variables"), False) if written else (("optimizers", name), True)


def _take_the_rest(loaded: LoadedSpec, members: Membership, rest: list[str], owner: dict[str, str],
                   frozen: set[str]) -> None:
    """The one optimizer without `variables` takes every weight neither frozen nor claimed by another."""
    for name in rest[1:]:  # which of two should take what the other leaves is anyone's guess: refuse
        loc, key = _rest_loc(loaded, name)
        members.problems.append(loaded.diagnostic(loc, (
            f"optimizer '{name}' takes every weight that is not frozen or claimed by another optimizer (no "
            f"'variables', or 'trainable'), and so does optimizer '{rest[0]}'; only one optimizer may: give the "
            "others their 'variables'"), key=key))
    if not rest:
        return
    name = rest[0]
    claimed = [p for p in members.weights if p not in frozen and p not in owner]
    if not claimed and members.weights:
        loc, key = _rest_loc(loaded, name)
        members.problems.append(loaded.diagnostic(loc, (
            f"optimizer '{name}' takes every weight that is not frozen or claimed by another optimizer, but none "
            "is left; remove the optimizer, or give it 'variables'"), key=key))
    for path in claimed:
        owner[path] = name
    members.optimizers[name] = claimed


def _check_claims(loaded: LoadedSpec, members: Membership, name: str, claimed: list[str],
                  owner: dict[str, str], frozen: set[str]) -> None:
    loc = ("optimizers", name, "variables")
    taken = [p for p in claimed if p in owner]
    if taken:
        others = sorted({owner[p] for p in taken})
        members.problems.append(loaded.diagnostic(loc, (
            f"optimizer '{name}' claims {variable_list(taken)}, already claimed by optimizer "
            f"{', '.join(repr(o) for o in others)}; each variable belongs to one optimizer")))
    copies = [p for p in claimed if p in members.targets]
    if copies:
        members.problems.append(loaded.diagnostic(loc, (
            f"optimizer '{name}' claims {variable_list(copies)} of the 'target' collection; a target network's "
            "weights follow their online weights (targets:) and no optimizer trains them: remove them from this "
            "optimizer's variables")))
    iced = [p for p in claimed if p in frozen and p not in members.targets]
    if iced:
        members.problems.append(loaded.diagnostic(loc, (
            f"optimizer '{name}' claims frozen {variable_list(iced)}; remove them from 'frozen' or from this optimizer")))
    for path in claimed:
        owner.setdefault(path, name)


def variable_list(paths: list[str]) -> str:
    shown = ", ".join(f"'{p}'" for p in paths[:4])
    more = f" and {len(paths) - 4} more" if len(paths) > 4 else ""
    return f"variable{'s' if len(paths) > 1 else ''} {shown}{more}"


def training_state(training: TrainingIR, trainable: list[str], shapes: dict[str, tuple[int, ...]]) -> list[Variable]:
    """Variables that training creates: step, optimizer slots, accumulators, EMA shadows, metrics."""
    state: list[Variable] = []
    if training.optimizers:
        state.append(Variable(keys.STEP, (), "int64", ("step",)))
    for opt in training.optimizers:
        if opt.learning_rate_key:
            state.append(Variable(opt.learning_rate_key, (), "float32", ("optimizer",)))
        if opt.damping_key:
            state.append(Variable(opt.damping_key, (), "float32", ("optimizer",)))
            state.append(Variable(opt.step_bound_key, (), "float32", ("optimizer",)))
        state.append(Variable(opt.iterations_key, (), "int64", ("optimizer",)))
        for slot in opt.slots:
            state += [Variable(f"{slot.key}/{p}", shapes[p], "float32", ("optimizer",)) for p in opt.paths]
    train = training.train
    # What the features keep (accumulators, the loss scale, EMA shadows): each declares its rows
    # (FeatureDef.variables), in pipeline order.
    state += [Variable(*row) for row in features.state_rows(training, trainable, shapes)]
    for metric in train.metrics if train else ():
        state += [Variable(keys.metric(metric.name, acc), shape, "float32", ("metrics",))
                  for acc, shape in METRICS[metric.name].state]
    return state
