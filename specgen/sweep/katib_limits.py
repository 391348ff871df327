"""What a Katib Experiment can say of a sweep exactly, and the refusals for what it cannot (docs/sweeps.md, Katib).

Each rule follows Katib's own code (kubeflow/katib, v1beta1), cited where it is used:
- the TensorFlowEvent metrics collector takes no early-stopping rules, so a pruner is refused;
- it reports every tag that starts with a metric's last part, in every folder that ends with the metric's dirname,
  under the metric's name: a metric it cannot isolate (`train/loss` beside `train/loss/logits`, or three parts) is
  refused;
- its tpe and random (hyperopt) draw a stepped range as multiples of the step from 0, and its grid (Optuna's
  service) a stepped float range with numpy's binary arange: such a range is listed value by value (`discrete`);
- it fills a trial's values into the template as text inside JSON strings: a value is written so that the JSON
  stays valid and the trial receives the exact `--set` text.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from specgen.diagnostics import Diagnostic, quoted
from specgen.spec.load import LoadedSpec
from specgen.sweep.space import Param, value_text
from specgen.sweep.spec import MAX_CHOICES, IntRange, Sweep, UniformRange, grid_point, steps

TENSORBOARD = "/specgen/run/tensorboard"  # katib.RUN_FOLDER's tensorboard folder, where the collector reads
# Katib's placeholder for a trial's value, consts.TrialTemplateParamReplaceFormat "${trialParameters.%s}": its opening,
# and consts.TrialTemplateParamReplaceFormatRegex, which finds every placeholder of a trialSpec by name
OPENING = "${trialParameters."
PLACEHOLDER = re.compile(re.escape(OPENING) + r"(.+?)\}")


def placeholder(name: str) -> str:
    """The text Katib replaces with the value of the trial parameter `name`."""
    return f"{OPENING}{name}}}"


def refusals(loaded: LoadedSpec, sweep: Sweep, params: list[Param], logged: list[str]) -> list[Diagnostic]:
    """Every part of the sweep a Katib Experiment cannot run as `specgen sweep` runs it, one line each."""
    found = [_pruner(loaded, sweep), _metric(loaded, sweep.metric, logged)]
    found += [_long_list(loaded, p) for p in params]
    return [d for d in found if d is not None]


def _pruner(loaded: LoadedSpec, sweep: Sweep) -> Diagnostic | None:
    """Katib's TensorFlowEvent collector has no early stopping (cmd/metricscollector/v1beta1/tfevent-metricscollector/
    main.py: `TODO: Add early stopping flags`; it parses the events once the training process ends), yet Katib hands
    it medianstop's `-stop-rule` flags (pkg/webhook/v1beta1/pod/inject_webhook.go getMetricsCollectorArgs), which
    its argparse refuses: a medianstop Experiment would never stop a trial and would break the collector of later
    ones. Katib's docs: early stopping works only with the StdOut and File collectors."""
    if sweep.pruner == "none":
        return None
    return loaded.diagnostic(("sweep", "pruner"), "pruner median cannot run in Katib: Katib's early stopping works "
                             "only with its StdOut and File metrics collectors, and it reads the trials' metric from "
                             "their TensorBoard events (the TensorFlowEvent collector, which takes no early-stopping "
                             "rules); expected pruner: none with --emit katib (--set sweep.pruner=none), or a local "
                             "specgen sweep")


def collected(metric: str, logged: list[str]) -> list[str]:
    """The logged scalars (`<stage>/<tag>`, written to TENSORBOARD/<stage>) that Katib's TensorFlowEvent collector
    reports as `metric`: its rule, pkg/metricscollector/v1beta1/tfevent-metricscollector/tfevent_loader.py
    `_should_consider` (a tag starting with the metric's last part, in a folder ending with the metric's dirname)."""
    parent, prefix = os.path.dirname(metric), metric.split("/")[-1]
    found = []
    for name in logged:
        stage, _, tag = name.partition("/")
        if tag.startswith(prefix) and f"{TENSORBOARD}/{stage}".endswith(parent):
            found.append(name)
    return found


def _metric(loaded: LoadedSpec, metric: str, logged: list[str]) -> Diagnostic | None:
    """The objective must be the one series Katib collects under its name: no other, and not none."""
    found = collected(metric, logged)
    if found == [metric]:
        return None
    stage, _, tag = metric.partition("/")
    parent, prefix = os.path.dirname(metric), metric.split("/")[-1]
    if found:
        why = (f"its TensorFlowEvent collector reports every tag of folder {quoted(parent)} that starts with "
               f"{quoted(prefix)} as {quoted(metric)} (here {', '.join(found)}), so the objective could be another "
               "series")
    else:
        why = (f"its TensorFlowEvent collector looks for a tag starting with {quoted(prefix)} in a folder ending "
               f"with {quoted(parent)}, and the run writes tag {quoted(tag)} in folder {quoted(stage)}, so every "
               "trial would report it unavailable")
    alone = [m for m in logged if collected(m, logged) == [m]]
    return loaded.diagnostic(("sweep", "metric"), f"{quoted(metric)} cannot be Katib's objective: {why}; expected a "
                             f"metric it collects alone ({', '.join(alone) or 'none here'}), or a local specgen sweep")


def listed(param: Param) -> bool:
    """Whether Katib gets a stepped range as its list of values (`discrete`) rather than min, max and step.

    Katib's tpe and random are hyperopt's (pkg/suggestion/v1beta1/hyperopt/base_service.py): a step becomes
    `hp.quniform(min, max, step)`, round(uniform(min, max) / step) * step, multiples of the step from 0 (not from
    the low end: `{int: [3, 43], step: 10}` would give 0, 10, ..., 40), and for floats binary products
    (0.30000000000000004). Its grid is Optuna's service (pkg/suggestion/v1beta1/internal/search_space.py
    convert_to_combinations): range(min, max + 1, step) for ints, numpy's arange for floats. So an int range whose
    low end is a multiple of its step keeps min, max (its last grid point) and step, exact in all three; every
    other stepped range is listed.
    """
    step = param.step
    if not step:
        return False
    low = param.bounds()[0]
    return isinstance(param.item, UniformRange) or (isinstance(param.item, IntRange) and low % step != 0)


def grid(param: Param) -> list[Any]:
    """Every value of a stepped range, as the local sweep draws them (space.Param.on_grid, spec.grid_values)."""
    low = param.bounds()[0]
    step = param.step
    assert step
    count = steps(low, param.top(), step) + 1
    if isinstance(param.item, IntRange):
        return [int(low) + k * int(step) for k in range(count)]
    return [grid_point(low, step, k) for k in range(count)]


def _long_list(loaded: LoadedSpec, param: Param) -> Diagnostic | None:
    """A listed range of more values than a choice may list (spec.MAX_CHOICES): refused, not silently cut."""
    if not listed(param):
        return None
    low, step = param.bounds()[0], param.step
    assert step
    count = steps(low, param.top(), step) + 1
    if count <= MAX_CHOICES:
        return None
    return loaded.diagnostic(("sweep", "space", param.key), f"{quoted(param.key)}: Katib draws a stepped range as "
                             "multiples of its step from 0 (its tpe and random) or in binary floats (its grid), so "
                             f"--emit katib lists its values, and this one has {count:,}; expected a step that leaves "
                             f"at most {MAX_CHOICES} values, or a local specgen sweep", key=True)


def substituted(value: Any) -> str:
    """A value as Katib's list holds it: its `--set` text, written for Katib's text substitution.

    Katib fills a trial in as text (pkg/controller.v1beta1/experiment/manifest/generator.go applyParameters): the
    trialSpec marshalled to JSON, every `${trialParameters.NAME}` replaced by the value's text, the result parsed
    as JSON. The placeholders sit inside JSON strings (the command's `--set KEY=...` items), so the value is
    written JSON-escaped (`a"b` as `a\\"b`, a backslash doubled): the string parses and the trial gets the exact text.
    A `${trialParameters.` inside a value is escaped too (`\\u0024`): Katib replaces placeholders in map order, so a
    later one could be replaced inside this value.
    """
    text = json.dumps(value_text(value), ensure_ascii=False)[1:-1]
    return text.replace(OPENING, "\\u0024" + OPENING[1:])


def fill(trial_spec: Any, values: dict[str, str]) -> Any:
    """The trialSpec with `values` (parameter name -> list text) filled in as Katib fills it (see substituted):
    JSON text, plain replacement, JSON parse. Raises ValueError where the result is no JSON."""
    body = json.dumps(trial_spec)
    for name, text in values.items():
        body = body.replace(placeholder(name), text)
    return json.loads(body)
