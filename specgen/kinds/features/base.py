"""What a training feature declares: `FeatureDef`, and the trainer skeleton's fixed hook points.

The generated trainer (templates/tf/train.py.j2) is a skeleton: at each hook point it loops over the
spec's active features, in registry order, and calls the hook's macro of each feature's partial
(templates/tf/features/<name>.py.j2). A feature that owns the step (accumulation, Levenberg-Marquardt)
names the step-kind template the skeleton includes in place of the plain gradient step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specgen.diagnostics import Diagnostic

# The hook points of templates/tf/train.py.j2, in file order. `optimizer_*` hooks are called once per
# optimizer with its plan; the others once per spec.
HOOKS = (
    "imports",  # lines after the shared `from specgen.runtime.lib import ...` line
    "optimizer_variables",  # per optimizer, beside its learning-rate variable: more state variables
    "optimizer_init",  # per optimizer, after its slots and schedule
    "init",  # __init__, after the trainable lists: the feature's state
    "loss_init",  # __init__, after the metrics
    "loss",  # the loss method (replaces the single-term one)
    "before_step",  # inside the step, before the forward pass
    "step_methods",  # methods right after the step
    "before_update",  # apply(): the gradients of all optimizers, before any update
    "optimizer_gradients",  # apply(): one optimizer's gradient expression (the macro wraps it)
    "optimizer_update",  # apply(): per optimizer, before its update call
    "after_update",  # apply(): after every optimizer updated, before the global step advances
    "after_step",  # after the global step advanced (apply() and step kinds without it)
    "apply",  # replaces apply() (a step kind that updates inside its own step)
    "learning_rate",  # replaces learning_rate()'s body
    "ema_variables",  # replaces ema_variables()'s body
    "methods",  # methods after ema_variables()
    "optimizer_state",  # state_by_path(): per optimizer, beside its learning rate
    "state",  # state_by_path(): the feature's checkpointed variables
)
# Hooks whose macro replaces the skeleton's default instead of adding to it: at most one active feature
# may render each (tests/test_features_registry.py checks that two such features never combine).
REPLACING = ("loss", "apply", "learning_rate", "ema_variables")
# One row of training state: (checkpoint key, shape, dtype, collections).
StateRow = tuple[str, tuple[int, ...], str, tuple[str, ...]]


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class TrainKey:
    """A key a feature adds to the spec's `train` section, and the `TrainIR` field of the same name it becomes.

    spec/training.py builds the `Train` model from its shared keys and every feature's TrainKey, and
    ir/training/model.py builds `TrainIR` the same way, so neither names a feature. Their static types are
    the shared part only: code outside the feature's module reads its value through the feature's own typed
    accessor (`ema.of(train)`), inside it through `Any`.
    """

    name: str
    annotation: Any  # the spec field's type
    field: Any  # its pydantic FieldInfo (`Field(default, description=...)`): the schema's default and text
    # The key of `train` it comes after: the order of the JSON schema and of `specgen validate --resolved`
    # (features anchored on one key: the later in the pipeline is placed first, next to the key).
    after: str
    ir_type: Any  # the TrainIR field's type
    ir_default: Callable[[], Any]  # a factory of its TrainIR default (the IR of the spec field's default)
    resolve: Callable[[Any], Any] = _same  # the validated spec value -> its frozen IR value


@dataclass(frozen=True)
class Refusal:
    """One refused pair of the compatibility table (specgen/kinds/compat.py), declared by the feature that refuses it."""

    where: str  # the command that refuses it, and the spec key it points at
    message: str  # str.format template over the code site's facts


@dataclass(frozen=True)
class FeatureDef:
    """One training feature: where each of its pieces lives.

    Dotted names point at code in layers above this package (ir/, render/, runtime/, report): this
    package is imported by spec/ and must not import them.
    """

    name: str
    doc: str  # one line for the docs table
    spec_keys: tuple[str, ...]  # the spec keys that turn it on
    # Whether a spec uses it, read from its specgen.ir.model.ModelIR (typed Any: kinds/ sits below ir/).
    enabled: Callable[[Any], bool]
    # Where its IR resolution lives, when it is not its `train_key` (a section of its own, an optimizer's key).
    ir: str = ""
    # Its key of the `train` section, and the TrainIR field it resolves to (both built from the registry).
    train_key: TrainKey | None = None
    # Its names in compat.py's pairwise table, each with what a spec has when it uses it (`clip`: train.clip and
    # an optimizer's own clip are refused differently); empty for a SETTING, which keeps its own `refusal`.
    table: tuple[tuple[str, str], ...] = ()
    # The pairs it refuses: (its table name, the other name, why); compat.REFUSED gathers every feature's.
    refuses: tuple[tuple[str, str, Refusal], ...] = ()
    # Dotted names of what spells its checkpoint keys: its own module's (kinds/features/<name>.py) or the
    # shared scheme's (specgen/ir/training/keys.py); target copies are model variables: their keys are their paths.
    state: tuple[str, ...] = ()
    partial: str | None = None  # templates/ path of its macros, one per hook in `hooks`
    hooks: tuple[str, ...] = ()
    # Dotted name of a render/ function of the ModelIR returning its typed plan, instead of `plan`, where
    # building the plan needs render/ (loss_terms: its calls are Python text).
    render_plan: str | None = None
    step: str | None = None  # a step kind: the template that replaces the gradient step
    lib: tuple[str, ...] = ()  # specgen.runtime.lib modules train.py imports on the shared line
    runtime: tuple[str, ...] = ()  # dotted names of its runtime functions
    report: str | None = None  # dotted name of its `specgen report` section, if it has one
    # Its place in the one ordered pipeline (kinds/features/__init__.py PIPELINE): the features it comes
    # after, at every shared hook of the skeleton and every runtime point (ties: by name).
    after: tuple[str, ...] = ()
    # Its typed render plan: a function of the ModelIR returning a frozen dataclass whose fields are its
    # partial's context; a `gradient_options` field is added to the step's optimizers.global_gradients call.
    plan: Callable[[Any], Any] | None = None
    # The training state it adds to the IR's collections: a function of (TrainingIR, trainable paths,
    # shapes by path) returning (key, shape, dtype, collections) rows, in pipeline order after the optimizers'.
    variables: Callable[[Any, list[str], dict[str, tuple[int, ...]]], list[StateRow]] | None = None
    # The first parts of its state keys' paths (`ema` of `ema/dense/kernel`): no layer may be named under one, or
    # its variables would share the state's checkpoint keys (ir/naming.py STATE_ROOTS is built from these).
    roots: tuple[str, ...] = ()
    # The built-in collections it fills (`ema`: the shadows): no user collection may take their names
    # (ir/collections.py BUILTIN is the shared ones and these).
    collections: tuple[str, ...] = ()
    # Runtime points (specgen/runtime/hooks.py RUNTIME_POINTS) -> dotted names of its functions there.
    runtime_hooks: tuple[tuple[str, str], ...] = ()
    # Why it does not combine with `beside`, a feature a command adds (settings: their own refusals,
    # not rows of compat.py's table); None when it does.
    refusal: Callable[[Any, str], str | None] | None = None
    # Its refusals across sections at validate: a function of the LoadedSpec (typed Any: kinds/ sits below
    # spec/load.py) returning positioned diagnostics; ir/resolve.py calls every feature's, in pipeline order.
    check: Callable[[Any], list[Diagnostic]] | None = None


@dataclass(frozen=True)
class Interaction:
    """Two features whose code meets: declared once here, rendered from `partial` (or `context`)."""

    features: tuple[str, str]
    why: str
    partial: str | None = None  # macros, one per hook in `hooks`, rendered after the later feature's
    hooks: tuple[str, ...] = ()
    context: tuple[tuple[str, str, str], ...] = ()  # (feature, key, value): added to that feature's context
