"""The searched keys, checked against the spec before any trial starts, and a trial's values as `--set` overrides.

Each key of `sweep.space` is a `--set` key (`optimizers.head.learning_rate`, `layers[head/fc].units`): it must
name a key of the resolved spec (else one line at the key with a did-you-mean over every key `specgen explain`
knows), or one the spec leaves unset that takes the values; and every value a trial could get at the edges
(each choice, both ends of a range) is applied as a `--set` and must validate and resolve like the spec itself.
A wrong type (`units: {uniform: [16, 64]}` gives 16.0 to an integer) or a value the spec refuses is one line at
the key, naming the value. Two keys that name one value (`layers.1.units` and `layers[hidden].units`, found as
`--set` finds them) are one line at the second, and so is a sweep's own `--set` of a searched value; keys that are
not hyperparameters (RESERVED) cannot be searched. The metric must be a scalar the run logs (`eval/<metric>` needs
`data.eval`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specgen.diagnostics import Diagnostic, SpecError, did_you_mean, quoted
from specgen.errors import SpecgenError
from specgen.ir.resolve import build_ir
from specgen.spec.compose import load_composed
from specgen.spec.load import LoadedSpec, validate_data
from specgen.spec.overrides import apply, key_parts, named_item
from specgen.spec.provenance import find, keys, load_resolved
from specgen.spec.yaml_source import parse_value
from specgen.sweep.spec import ChoiceOf, IntRange, LogIntRange, LogUniformRange, Sweep, UniformRange, grid_point, steps

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

    from specgen.ir.model import ModelIR

# Keys that are not hyperparameters, with why a trial must not take them from the search (docs/sweeps.md, "What
# is checked"): each names where a trial's results go or what they are called, which the sweep decides for all its
# trials. A searched `name` would give the trials experiments other than the one the sweep prepared and a study name
# that no longer matches; a searched `train.tracking` would log trials to stores the sweep never prepared (or
# nowhere). Keys that are merely useless to search (`doc`, `export.*`) stay allowed: they harm no bookkeeping.
RESERVED = {
    ("checkpoint", "dir"): "the sweep gives every trial its own run folder (SWEEP/trial-NNNN)",
    ("sweep",): "the sweep section steers the sweep itself, not a trial",
    ("name",): "the spec's name names the study and every trial's MLflow experiment, one for the whole sweep",
    ("train", "tracking"): "it says where a trial is logged, and every trial is logged where the sweep says "
                           "(--track or the spec)",
    # docs/sweeps.md "What is checked": trials are compared on one data set, and the sweep process reads no data
    ("data",): "it says what a trial trains and is judged on: trials on other data are not compared on one "
               "metric, and a data file is read only when its trial starts",
}


# Values of one integer or stepped range checked against the spec before any trial (Param.edges): all of them up
# to CHECKED, as for a choice (MAX_CHOICES); past it the HALF at each end and the rest spread between. Each is one
# validation and resolution of the spec (about a millisecond for a small spec).
CHECKED = 256
HALF = 64


@dataclass(frozen=True)
class Param:
    """One searched key: its `--set` key and the spec model of its values (UniformRange, LogUniformRange, ...)."""

    key: str
    item: Any

    @property
    def log(self) -> bool:
        return isinstance(self.item, (LogUniformRange, LogIntRange))

    @property
    def categorical(self) -> bool:
        return isinstance(self.item, ChoiceOf)

    def bounds(self) -> tuple[float, float]:
        """Low and high ends of a range (a choice has none)."""
        for name in ("uniform", "log_uniform", "int", "log_int"):
            if hasattr(self.item, name):
                low, high = getattr(self.item, name)
                return low, high
        raise TypeError(f"{self.key} is a choice")

    def edges(self) -> list[Any]:
        """The values checked against the spec before any trial, in order. A spec refuses some values by relation
        to other keys (pruning's end_step must be begin_step + k * frequency, a batch must split among replicas), so
        a finite set is tried whole: every choice, and every value of an integer or stepped range of at most
        CHECKED values. A longer one: its first and last HALF values, which hold every remainder of a division
        by up to HALF, and CHECKED - 2 * HALF values spread between. A float range without a step: both ends and a
        value with a fraction, as draws have (`units: {uniform: [16, 64]}` gives an integer key 31.28)."""
        if isinstance(self.item, ChoiceOf):
            return list(self.item.choice)
        low, high = self.bounds()
        if isinstance(self.item, (UniformRange, LogUniformRange)) and not self.step:
            inside = math.exp(math.log(low) + (math.log(high) - math.log(low)) / math.pi) if self.log \
                else low + (high - low) / math.pi
            return [low, inside, high]
        count = self.count()
        if count <= CHECKED:
            return [self.value(k) for k in range(count)]
        spread = CHECKED - 2 * HALF
        between = {HALF + round(i * (count - 2 * HALF - 1) / (spread - 1)) for i in range(spread)}
        return [self.value(k) for k in sorted({*range(HALF), *between, *range(count - HALF, count)})]

    def count(self) -> int:
        """How many values an integer or stepped range holds."""
        low, high = self.bounds()
        if isinstance(self.item, UniformRange):
            return steps(low, high, self.step or 1) + 1
        return int(high - low) // int(self.step or 1) + 1

    def value(self, k: int) -> Any:
        """The k-th value of an integer or stepped range, as a trial gets it (a stepped float as its grid point)."""
        low = self.bounds()[0]
        if isinstance(self.item, UniformRange):
            return grid_point(low, self.step or 1, k)
        return int(low) + k * int(self.step or 1)

    @property
    def step(self) -> float | int | None:
        """A range's step, None when it has none (a choice and the log ranges never do)."""
        step: float | int | None = getattr(self.item, "step", None)
        return step

    def top(self) -> Any:
        """The largest value a trial can get from a range: its high end, or the last point of its grid of steps
        (`{int: [8, 64], step: 10}` -> 58), exactly as written (0.3, never 0.30000000000000004)."""
        low, high = self.bounds()
        if not self.step:
            return high
        last = steps(low, high, self.step)
        return low + last * self.step if isinstance(self.item, IntRange) else grid_point(low, self.step, last)

    def on_grid(self, value: Any) -> Any:
        """A drawn value of a stepped float range as its grid point: Optuna computes low + k * step in binary
        floats (0.1 + 2 * 0.1 = 0.30000000000000004, 0.05 + 0.1 = 0.15000000000000002), which the trial, the study
        and the summary would show; the grid point is the value the spec's numbers write. Others are unchanged."""
        if not isinstance(self.item, UniformRange) or not self.step or not isinstance(value, float):
            return value
        low = self.bounds()[0]
        k = min(max(round((value - low) / self.step), 0), steps(low, self.top(), self.step))
        return grid_point(low, self.step, k)

    def distribution(self) -> BaseDistribution:
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        item = self.item
        if isinstance(item, ChoiceOf):
            return CategoricalDistribution(item.choice)
        # The high end given as the last grid point: Optuna would move it there itself, with a UserWarning printed
        # in the middle of the sweep's output (optuna/distributions.py _adjust_int_uniform_high and
        # _adjust_discrete_uniform_high, which count in Decimal(str(x)) as sweep.spec.steps does).
        low, high = self.bounds()[0], self.top()
        if isinstance(item, (IntRange, LogIntRange)):
            return IntDistribution(int(low), int(high), log=self.log, step=int(self.step or 1))
        return FloatDistribution(low, high, log=self.log, step=self.step)

    def override(self, value: Any) -> str:
        return f"{self.key}={value_text(value)}"


def value_text(value: Any) -> str:
    """`value` as the YAML text `--set` reads back to exactly that value and type.

    Python's repr of a float is the shortest text that reads back to it; YAML 1.1 wants a dot in the mantissa
    (`1e-05` reads as a string there), so one is added (`1.0e-05`). Strings are quoted where YAML would read
    them as something else (`'32'`, `'true'`).
    """
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int):
        text = str(value)
    elif isinstance(value, float):
        text = repr(value)
        mantissa, e, exponent = text.partition("e")
        if e and "." not in mantissa:
            text = f"{mantissa}.0e{exponent}"
    else:
        import yaml

        text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30).removesuffix("\n").removesuffix(
            "\n...").removesuffix("\n")
    back = parse_value(text, "sweep value")
    if back != value or type(back) is not type(value):  # never expected: the test pins each kind
        raise ValueError(f"{value!r} does not read back from {text!r}")
    return text


def parameters(loaded: LoadedSpec, base: list[str]) -> list[Param]:
    """The searched keys of `loaded` (with the sweep's own `--set` overrides `base`), each checked against the
    spec; every problem is one line at its key, all of them reported together."""
    sweep = loaded.spec.sweep
    assert sweep is not None
    data, source = load_composed(loaded.path, loaded.display)
    _, tree = load_resolved(loaded.path, base)
    known = [k for k in keys(tree) if not k.startswith("sweep.")]  # suggestions: never a key of the sweep itself
    fixed = apply(data, base)  # what a trial's own --set's walk: the sweep's --set's come first
    problems: list[Diagnostic] = []
    params: list[Param] = []
    targets: dict[str, tuple[str | int, ...]] = {}
    ends = interface(build_ir(loaded))
    for key, item in sweep.space.items():
        param = Param(key, item)
        at = target(fixed, key_parts(key))
        found = _problem(loaded, data, source, base, param, tree, known, ends) or _same_value(loaded, key, at, targets)
        problems += [found] if found is not None else []
        targets[key] = at
        params.append(param)
    problems += _fixed_and_searched(base, fixed, targets)
    if problems:
        raise SpecError(problems)
    return params


def target(data: Any, parts: list[str | int]) -> tuple[str | int, ...]:
    """The value a key names, found as `--set` finds it (spec/overrides.py apply): a `[NAME]` and a list index both
    become the item's index, so `layers[hidden].units` and `layers.1.units` give one target."""
    node, found = data, list[str | int]()
    for part in parts:
        item = named_item(node, part)
        if item is not None:
            found.append(next(i for i, each in enumerate(node) if each is item))
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            item = node[part]
            found.append(part)
        else:  # a key the spec leaves unset: named as written
            item = node.get(part) if isinstance(node, dict) else None
            found.append(part)
        node = item
    return tuple(found)


def _within(one: tuple[str | int, ...], other: tuple[str | int, ...]) -> bool:
    """Whether one target is the other or lies inside it (a later --set of either undoes the other)."""
    return one[: len(other)] == other or other[: len(one)] == one


def _same_value(loaded: LoadedSpec, key: str, at: tuple[str | int, ...],
                targets: dict[str, tuple[str | int, ...]]) -> Diagnostic | None:
    """Two keys of `space` that name one value: a trial would get both `--set`s and train with the last, while
    Optuna and the summary record the other's value too. One line at the second key, naming the first."""
    for other, there in targets.items():
        if not _within(at, there):
            continue
        how = "the same value as" if at == there else "a value inside" if len(at) > len(there) else "a value holding"
        position = loaded.diagnostic(("sweep", "space", other), "", key=True).position
        line = "" if position is None else f" ({position.file + ':' if position.file else 'line '}{position.line})"
        return loaded.diagnostic(("sweep", "space", key), f"{quoted(key)} names {how} {quoted(other)}{line}: a "
                                 "trial would train with one of them and record both; expected each value searched "
                                 "by one key", key=True)
    return None


def _fixed_and_searched(base: list[str], fixed: Any, targets: dict[str, tuple[str | int, ...]]) -> list[Diagnostic]:
    """A sweep's own `--set` of a value that `space` searches, or of one inside it: every trial's search value would
    replace it (a `--set` holding a searched value, `optimizers.all={...}`, keeps its other values: allowed)."""
    found = []
    for text in base:
        at = target(fixed, key_parts(text.partition("=")[0].strip()))
        searched = next((key for key, there in targets.items() if at[: len(there)] == there), None)
        if searched is not None:
            found.append(Diagnostic(f"--set {text}", None, f"the sweep searches this value ({quoted(searched)} of "
                                    "sweep.space), so every trial would replace it; expected a --set of a key the "
                                    "sweep does not search"))
    return found


def _problem(loaded: LoadedSpec, data: Any, source: Any, base: list[str], param: Param, tree: Any,
             known: list[str], ends: dict[str, str]) -> Diagnostic | None:
    key = param.key
    parts = key_parts(key)
    where = ("sweep", "space", key)
    reserved = next((why for r, why in RESERVED.items() if _within(tuple(parts), r)), None) if parts else None
    if not parts or reserved is not None:
        return loaded.diagnostic(where, f"{quoted(key)} cannot be searched: {reserved or 'the key is empty'}; "
                                 "expected a key that changes how a trial trains", key=True)
    exists = find(tree, parts) is not None
    for value in param.edges():
        problem = _refusal(data, source, loaded.path, [*base, param.override(value)], ends)
        if problem is None:
            continue
        if not exists:  # not in the resolved spec, and not a key the spec leaves unset: a misspelt key
            return loaded.diagnostic(where, f"no key {quoted(key)} in the resolved spec"
                                     f"{did_you_mean(key, known)}", key=True)
        drawn = " (a value of its range)" if not param.categorical else ""
        return loaded.diagnostic(where, f"{quoted(key)} cannot take {value_text(value)}{drawn}: "
                                 f"{_range_advice(param, problem)}", key=True)
    return None


def _range_advice(param: Param, problem: str) -> str:
    """A float range over an integer key draws floats, which the key refuses with the spec's advice for a written
    float ("a float: write 16"): in a sweep the thing to write is an integer range."""
    if isinstance(param.item, (UniformRange, LogUniformRange)) and "expected an integer" in problem:
        low, high = param.bounds()
        form = "log_int" if param.log else "int"
        ends = f"[{math.ceil(low)}, {math.floor(high)}]" if math.ceil(low) <= math.floor(high) else "[LOW, HIGH]"
        problem = re.sub(r" \(a float: write [^)]*\)", " (a float)", problem)
        return f"{problem}; an integer key is searched with {{{form}: {ends}}}"
    return problem


def _refusal(data: Any, source: Any, path: Path, overrides: list[str], ends: dict[str, str]) -> str | None:
    """Why the spec with `overrides` does not validate or resolve (the first problem), or changes the model's inputs
    or outputs (`ends`: the spec's), or None."""
    try:
        ir = build_ir(validate_data(apply(data, overrides), source, path))
    except SpecError as exc:
        return exc.diagnostics[0].message
    except SpecgenError as exc:
        return str(exc).split("\n")[0]
    changed = next(((end, was) for end, was in ends.items() if interface(ir).get(end) != was), None)
    if changed is None:
        return None
    end, was = changed
    now = interface(ir).get(end, "none")
    return (f"it changes {end} from {was} to {now}; a sweep searches how the model trains, not the inputs and "
            "outputs its data must fit (the data are read only when a trial starts)")


def interface(ir: ModelIR) -> dict[str, str]:
    """The model's inputs and outputs as the data meet them: `input 'image'` -> `[N, 8, 8, 1] float32`."""
    from specgen.text import shape

    ends = {f"input '{i.name}'": f"{shape(i.shape, unknown='N')} {i.dtype}" for i in ir.inputs}
    for name, layer in ir.outputs.items():
        node = ir.node(layer)
        ends[f"output '{name}'"] = f"{shape(node.shape, unknown='N')} {node.dtype}"
    return ends


def logged_scalars(ir: ModelIR) -> list[str]:
    """`<stage>/<tag>` of every scalar a run of `ir` logs to TensorBoard (runtime/commands/train.py, session.py):
    the loss, each term's, each optimizer's learning rate and the metrics in train; the metrics in eval."""
    training = ir.training
    if training is None or training.train is None:
        return []
    metrics = [m.name for m in training.train.metrics]
    found = ["train/loss", *(f"train/loss/{t.name}" for t in training.terms),
             *(f"train/learning_rate/{o.name}" for o in training.optimizers if o.learning_rate_key),
             *(f"train/{m}" for m in metrics)]
    if "eval" in training.data:
        found += [f"eval/{m}" for m in metrics]
    return found


def check_metric(loaded: LoadedSpec, sweep: Sweep, ir: ModelIR) -> None:
    """The metric must be a scalar the run logs: one line at `sweep.metric` otherwise."""
    logged = logged_scalars(ir)
    if sweep.metric in logged:
        return
    stage, _, tag = sweep.metric.partition("/")
    why = ""
    if stage == "eval" and "eval" not in (ir.training.data if ir.training else {}):
        why = " (the spec has no data.eval, so nothing is logged in eval)"
    elif tag and tag not in {m.split("/", 1)[1] for m in logged}:
        why = " (eval logs the metrics of train.metrics)" if stage == "eval" else ""
    raise SpecError([loaded.diagnostic(("sweep", "metric"), f"the run never logs {quoted(sweep.metric)}{why}"
                                       f"{did_you_mean(sweep.metric, logged)} (it logs {_listed(logged)})")])


def _listed(names: list[str]) -> str:
    return ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")


def grid_space(params: list[Param]) -> dict[str, list[Any]]:
    """Optuna's GridSampler search space: every value of each key (sweep.spec checked they are finite)."""
    from specgen.sweep.spec import grid_values

    return {p.key: grid_values(p.item) for p in params}


def grid_size(params: list[Param]) -> int:
    """The grid's points: the product of every key's count of values (sweep.spec checked they are finite)."""
    from specgen.sweep.spec import grid_values

    return math.prod(len(grid_values(p.item)) for p in params)


def overrides_of(params: list[Param], values: dict[str, Any]) -> Iterator[str]:
    """A trial's values as `--set` texts, in the order of `space`."""
    for param in params:
        if param.key in values:
            yield param.override(values[param.key])
