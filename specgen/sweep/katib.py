"""`specgen sweep SPEC --emit katib`: the sweep as a Kubeflow Katib Experiment (kubeflow.org/v1beta1).

The trial template is the TFJob that `specgen train --emit tfjob` writes (runtime/commands/tfjob.py), its
command given one `--set KEY=${trialParameters.NAME}` per searched key, which Katib fills with each trial's
values. Katib reads the metric from the trial's TensorBoard events with its TensorFlowEvent collector: it mounts
a volume of its own at the collector's path in the primary pod (worker 0, the chief, which writes the run
folder), so every trial's run folder is the fixed RUN_FOLDER in its own pod, and the collector reads
RUN_FOLDER/tensorboard; the metric `eval/accuracy` is Katib's name for tag `accuracy` in the folder `eval`
(its collector's `{{dirname}}/{{metric}}` rule). The objective takes the metric's latest value, as
`specgen sweep` does. The sampler maps to Katib's suggestion services (tpe, random and grid). What Katib cannot run
as the local sweep does (a pruner, a metric its collector cannot isolate, a stepped range too long to list) is
refused before anything is written, one line each (katib_limits.py).

Before anything is written the manifest is checked against Katib's API: the schemas of its Experiment types,
vendored from Katib's OpenAPI document (katib_experiment.openapi.json; Katib's CRD itself preserves unknown
fields and checks nothing), made strict (no field the types do not have, the values Katib's Go constants allow,
the fields Katib's webhook requires), and the webhook's checks across fields (every trial parameter used in the
template and defined in the search space, limits in order, an absolute collector path). A failure is a specgen
bug (exit 3): the manifest is specgen's own.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import re
from pathlib import Path
from typing import Any

import yaml

from specgen import text
from specgen.ir.model import ModelIR
from specgen.paths import shown
from specgen.render.errors import RenderError
from specgen.spec.load import LoadedSpec
from specgen.sweep import katib_limits as limits
from specgen.sweep.space import Param, grid_size, logged_scalars, value_text
from specgen.sweep.spec import ChoiceOf, IntRange, LogIntRange, LogUniformRange, Sweep, UniformRange, steps

SCHEMA = Path(__file__).with_name("katib_experiment.openapi.json")
RUN_FOLDER = "/specgen/run"  # each trial's run folder, in its own pods
SUCCEEDED = 'status.conditions.#(type=="Succeeded")#|#(status=="True")#'  # GJSON, as Katib's TFJob examples
FAILED = 'status.conditions.#(type=="Failed")#|#(status=="True")#'
NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # Katib's webhook: an Experiment's name, at most 40 characters
# Values Katib's Go types allow (pkg/apis/controller/{common,experiments}/v1beta1), by schema and field.
ENUMS: dict[str, dict[str, list[str]]] = {
    "v1beta1.ObjectiveSpec": {"type": ["minimize", "maximize"]},
    "v1beta1.ParameterSpec": {"parameterType": ["double", "int", "discrete", "categorical"]},
    "v1beta1.FeasibleSpace": {"distribution": ["uniform", "logUniform", "normal", "logNormal"]},
    "v1beta1.CollectorSpec": {"kind": ["StdOut", "File", "TensorFlowEvent", "PrometheusMetric", "Custom", "None",
                                       "Push"]},
    "v1beta1.FileSystemPath": {"kind": ["File", "Directory"]},
    "v1beta1.MetricStrategy": {"value": ["min", "max", "latest"]},
}
# Fields Katib's webhook (pkg/webhook/v1beta1/experiment/validator) refuses to go without.
REQUIRED: dict[str, list[str]] = {
    "v1beta1.Experiment": ["apiVersion", "kind", "metadata", "spec"],
    "v1beta1.ExperimentSpec": ["objective", "algorithm", "parameters", "trialTemplate"],
    "v1beta1.ObjectiveSpec": ["type", "objectiveMetricName"],
    "v1beta1.AlgorithmSpec": ["algorithmName"],
    "v1beta1.EarlyStoppingSpec": ["algorithmName"],
    "v1beta1.ParameterSpec": ["name", "parameterType", "feasibleSpace"],
    "v1beta1.TrialTemplate": ["primaryContainerName", "successCondition", "failureCondition", "trialParameters",
                              "trialSpec"],
    "v1beta1.TrialParameterSpec": ["name", "reference"],
}
ALGORITHMS = {"tpe": "tpe", "random": "random", "grid": "grid"}


def emit(args: argparse.Namespace, loaded: LoadedSpec, ir: ModelIR, params: list[Param]) -> int:
    """`ir`: the sweep command's own, built once."""
    from specgen.atomic import write_atomic
    from specgen.diagnostics import SpecError
    from specgen.runtime.commands.tfjob import Job, check
    from specgen.runtime.placement.cluster import check_one_cpu_replica, check_replicas

    assert args.image is not None  # command.py's _check_flags: a usage line before the spec is read
    sweep = loaded.spec.sweep
    assert sweep is not None
    refused = limits.refusals(loaded, sweep, params, logged_scalars(ir))
    if refused:
        raise SpecError(refused)
    workers = args.workers or 1
    names = parameter_names(params)
    sets = [*args.set, f"checkpoint.dir={RUN_FOLDER}",
            *(f"{p.key}={limits.placeholder(names[p.key])}" for p in params)]
    job = Job(args.spec.as_posix(), args.image, workers, args.cpu, args.memory, args.gpus or 0, None, sets)
    check(job, "sweep")
    if not args.gpus:  # one replica per worker on its CPU (cluster.check_one_cpu_replica)
        check_one_cpu_replica(loaded, ir)
    check_replicas(loaded, "multi_worker", workers * (args.gpus or 1), ir)
    trials = args.trials if args.trials is not None else sweep.trials
    if sweep.sampler == "grid":  # as the local sweep (study.Plan.budget); Katib's grid refuses more (see _webhook)
        trials = min(trials, grid_size(params))
    manifest = experiment(loaded.spec.name, sweep, params, job, trials, args.parallel or 1, args.namespace)
    problems = check_manifest(manifest)
    if problems:  # specgen wrote it: a bug, not the user's mistake
        raise RenderError("the Katib Experiment fails Katib's API: " + "; ".join(problems[:5]))
    body = yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False, width=120)
    content = (text.header(job.spec, "specgen sweep --emit katib") + "\n# Apply with `kubectl apply -f`. Each trial "
               f"is a TFJob whose run folder is {RUN_FOLDER} in its pods; Katib reads {sweep.metric} from "
               f"{RUN_FOLDER}/tensorboard.\n" + body)
    if args.output is None:
        print(content, end="")
    else:
        write_atomic(args.output, content)
        print(f"wrote {shown(args.output)}: a Katib Experiment of {trials} trial(s) of {sweep.metric} for "
              f"{loaded.spec.name}, each a TFJob of {workers} worker(s)")
    return 0


def parameter_names(params: list[Param]) -> dict[str, str]:
    """Katib's name of each searched key: lower case letters, digits and '-' (`layers[head/fc].units` ->
    `layers-head-fc-units`), unique."""
    names: dict[str, str] = {}
    for param in params:
        base = re.sub(r"[^a-z0-9]+", "-", param.key.lower()).strip("-")[:60] or "p"
        name, n = base, 2
        while name in names.values():
            name, n = f"{base}-{n}", n + 1
        names[param.key] = name
    return names


def _space(param: Param, name: str) -> dict[str, Any]:
    item = param.item
    if isinstance(item, ChoiceOf) or limits.listed(param):
        values = item.choice if isinstance(item, ChoiceOf) else limits.grid(param)
        kind = "categorical" if isinstance(item, ChoiceOf) else "discrete"
        return {"name": name, "parameterType": kind, "feasibleSpace": {"list": [limits.substituted(v) for v in values]}}
    assert isinstance(item, (UniformRange, LogUniformRange, IntRange, LogIntRange))
    kind = "int" if isinstance(item, (IntRange, LogIntRange)) else "double"
    # max: the last value a trial gets (a stepped int range's last grid point: hyperopt's quniform would round
    # past a high end off the grid)
    space: dict[str, Any] = {"min": value_text(param.bounds()[0]), "max": value_text(param.top())}
    if param.step:
        space["step"] = value_text(param.step)
    space["distribution"] = "logUniform" if param.log else "uniform"
    return {"name": name, "parameterType": kind, "feasibleSpace": space}


def _algorithm(sweep: Sweep) -> dict[str, Any]:
    algorithm: dict[str, Any] = {"algorithmName": ALGORITHMS[sweep.sampler]}
    if sweep.sampler in ("tpe", "random"):
        algorithm["algorithmSettings"] = [{"name": "random_state", "value": str(sweep.seed)}]
    return algorithm


def experiment(spec_name: str, sweep: Sweep, params: list[Param], job: Any, trials: int, parallel: int,
               namespace: str | None) -> dict[str, Any]:
    from specgen.runtime.commands.tfjob import manifest as tfjob

    names = parameter_names(params)
    trial_spec = tfjob(job, spec_name)
    del trial_spec["metadata"]  # Katib names each trial's job; a name or namespace in the template is refused
    metadata: dict[str, Any] = {"name": experiment_name(spec_name)}
    if namespace:
        metadata["namespace"] = namespace
    spec: dict[str, Any] = {
        "objective": {"type": sweep.direction, "objectiveMetricName": sweep.metric,
                      "metricStrategies": [{"name": sweep.metric, "value": "latest"}]},
        "algorithm": _algorithm(sweep),
    }
    spec |= {
        "parallelTrialCount": min(parallel, trials),
        "maxTrialCount": trials,
        "maxFailedTrialCount": trials,
        "parameters": [_space(p, names[p.key]) for p in params],
        "metricsCollectorSpec": {"source": {"fileSystemPath": {"path": f"{RUN_FOLDER}/tensorboard",
                                                               "kind": "Directory"}},
                                 "collector": {"kind": "TensorFlowEvent"}},
        "trialTemplate": {
            "primaryContainerName": "tensorflow",  # the TFJob's container (the training operator's name)
            # worker 0 is the chief, the one pod that writes the run folder and its events
            "primaryPodLabels": {"training.kubeflow.org/replica-type": "worker",
                                 "training.kubeflow.org/replica-index": "0"},
            "successCondition": SUCCEEDED,
            "failureCondition": FAILED,
            "trialParameters": [{"name": names[p.key], "description": f"--set {p.key}", "reference": names[p.key]}
                                for p in params],
            "trialSpec": trial_spec,
        },
    }
    return {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment", "metadata": metadata, "spec": spec}


def experiment_name(spec_name: str) -> str:
    """`<spec name>-sweep` as Katib's webhook takes it: lower case letters, digits and '-', 40 at most."""
    base = re.sub(r"[^a-z0-9]+", "-", spec_name.lower()).strip("-")[: 40 - len("-sweep")].rstrip("-")
    return f"{base or 'specgen'}-sweep"


# --- checking a manifest against Katib's API --------------------------------------------------------------------


@functools.cache
def strict_schema() -> dict[str, Any]:
    """The vendored schemas, strict: every object of declared fields takes no other (Go drops unknown fields
    without a word), Katib's enumerations and required fields added."""
    document = json.loads(SCHEMA.read_text())
    schemas = copy.deepcopy(document["components"]["schemas"])
    for node in _objects(schemas):
        if "properties" in node and "additionalProperties" not in node:
            node["additionalProperties"] = False
    for name, fields in ENUMS.items():
        for field, values in fields.items():
            schemas[name]["properties"][field]["enum"] = values
    for name, required in REQUIRED.items():
        schemas[name]["required"] = required
    experiment = schemas["v1beta1.Experiment"]["properties"]
    experiment["apiVersion"]["const"] = "kubeflow.org/v1beta1"
    experiment["kind"]["const"] = "Experiment"
    return {"$ref": "#/components/schemas/v1beta1.Experiment", "components": {"schemas": schemas}}


def _objects(node: Any) -> list[dict[str, Any]]:
    found = []
    if isinstance(node, dict):
        found.append(node)
        for value in node.values():
            found += _objects(value)
    elif isinstance(node, list):
        for value in node:
            found += _objects(value)
    return found


def check_manifest(manifest: Any) -> list[str]:
    """Every way `manifest` fails Katib's API, one line each (empty: it passes)."""
    import jsonschema

    schema = strict_schema()
    validator = jsonschema.Draft202012Validator(schema)
    problems = [f"{_where(e.absolute_path)}: {e.message}" for e in validator.iter_errors(manifest)]
    if problems or not isinstance(manifest, dict):
        return sorted(problems)
    container = {"$ref": "#/components/schemas/io.k8s.api.core.v1.Container", "components": schema["components"]}
    pods = manifest["spec"]["trialTemplate"]["trialSpec"].get("spec", {}).get("tfReplicaSpecs", {})
    for kind, replica in pods.items() if isinstance(pods, dict) else ():
        for i, c in enumerate(replica.get("template", {}).get("spec", {}).get("containers", [])):
            where = f"spec.trialTemplate.trialSpec.spec.tfReplicaSpecs.{kind}.template.spec.containers[{i}]"
            problems += [f"{where}{_where(e.absolute_path, '.')}: {e.message}"
                         for e in jsonschema.Draft202012Validator(container).iter_errors(c)]
    return problems + _webhook(manifest)


def _where(path: Any, lead: str = "") -> str:
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
    return f"{lead}{text}" if text else ("" if lead else "(the manifest)")


def _webhook(manifest: dict[str, Any]) -> list[str]:
    """The checks across fields of Katib's experiment webhook that a schema cannot say."""
    problems = []
    name, spec = manifest["metadata"].get("name", ""), manifest["spec"]
    if not NAME.match(name) or len(name) > 40:
        problems.append(f"metadata.name: {name!r} is not a Katib Experiment name (lower case letters, digits and "
                        "'-', a letter first, at most 40 characters)")
    counts = {k: spec.get(k) for k in ("maxTrialCount", "parallelTrialCount", "maxFailedTrialCount")}
    if counts["maxTrialCount"] is not None:
        for key in ("parallelTrialCount", "maxFailedTrialCount"):
            if counts[key] is not None and counts[key] > counts["maxTrialCount"]:
                problems.append(f"spec.{key}: {counts[key]} is more than spec.maxTrialCount {counts['maxTrialCount']}")
    defined = {p["name"] for p in spec["parameters"]}
    for i, p in enumerate(spec["parameters"]):
        space, kind = p["feasibleSpace"], p["parameterType"]
        if kind in ("double", "int") and ("min" not in space or "max" not in space or "list" in space):
            problems.append(f"spec.parameters[{i}].feasibleSpace: a {kind} parameter needs min and max, no list")
        if kind in ("categorical", "discrete") and ({"min", "max", "step"} & set(space) or not space.get("list")):
            problems.append(f"spec.parameters[{i}].feasibleSpace: a {kind} parameter needs a list, no min, max or step")
    template = spec["trialTemplate"]
    body = json.dumps(template["trialSpec"])
    named = [t["name"] for t in template["trialParameters"]]
    for i, t in enumerate(template["trialParameters"]):
        if t["reference"] not in defined and not t["reference"].startswith("${trialSpec."):
            problems.append(f"spec.trialTemplate.trialParameters[{i}].reference: {t['reference']!r} is not in "
                            "spec.parameters")
        if limits.placeholder(t["name"]) not in body:
            problems.append(f"spec.trialTemplate.trialParameters[{i}].name: {t['name']!r} is not used in the trialSpec")
    for used in sorted(set(limits.PLACEHOLDER.findall(body)) - set(named)):
        problems.append(f"spec.trialTemplate.trialSpec: {limits.placeholder(used)} is not in trialParameters")
    if len(named) != len(set(named)):
        problems.append("spec.trialTemplate.trialParameters: a name is listed twice")
    job = template["trialSpec"]
    if "name" in job.get("metadata", {}) or "namespace" in job.get("metadata", {}):
        problems.append("spec.trialTemplate.trialSpec.metadata: a name or namespace there is refused (Katib names "
                        "each trial's job)")
    if not job.get("apiVersion") or not job.get("kind"):
        problems.append("spec.trialTemplate.trialSpec: apiVersion and kind are required")
    problems += _grid(spec) + _filled(spec)
    source = spec.get("metricsCollectorSpec", {})
    if source.get("collector", {}).get("kind") == "TensorFlowEvent":
        path = source.get("source", {}).get("fileSystemPath", {})
        if path.get("kind") != "Directory" or not str(path.get("path", "")).startswith("/"):
            problems.append("spec.metricsCollectorSpec.source.fileSystemPath: the TensorFlowEvent collector reads a "
                            "Directory at an absolute path")
    return problems


def _grid(spec: dict[str, Any]) -> list[str]:
    """Katib's grid (its Optuna service, pkg/suggestion/v1beta1/optuna/service.py _validate_grid_setting) refuses an
    Experiment whose maxTrialCount is above its count of combinations (internal/search_space.py
    convert_to_combinations: an int's range(min, max + 1, step), a double's arange, which needs a step, a list)."""
    if spec["algorithm"]["algorithmName"] != "grid":
        return []
    combinations = 1
    for i, p in enumerate(spec["parameters"]):
        space = p["feasibleSpace"]
        if p["parameterType"] == "double" and not space.get("step"):
            return [f"spec.parameters[{i}].feasibleSpace: the grid needs a step for a double parameter"]
        if p["parameterType"] in ("int", "double"):
            low, high = (float(space[k]) if p["parameterType"] == "double" else int(space[k]) for k in ("min", "max"))
            step = float(space["step"]) if p["parameterType"] == "double" else int(space.get("step") or 1)
            combinations *= steps(low, high, step) + 1
        else:
            combinations *= len(space["list"])
    if spec.get("maxTrialCount", 0) > combinations:
        return [f"spec.maxTrialCount: {spec['maxTrialCount']} is more than the grid's {combinations} combinations"]
    return []


def _filled(spec: dict[str, Any]) -> list[str]:
    """Every listed value, filled into the trialSpec as Katib fills a trial in (katib_limits.fill), must leave JSON
    Katib can parse (a `"` or a backslash written raw breaks it: no trial is ever made)."""
    template = spec["trialTemplate"]["trialSpec"]
    lists = {p["name"]: p["feasibleSpace"].get("list") or [] for p in spec["parameters"]}
    problems = []
    for name, values in lists.items():
        for value in values:
            try:
                limits.fill(template, {name: value})
            except ValueError:
                problems.append(f"spec.parameters: {name}'s value {value!r}, filled into the trialSpec as Katib "
                                "fills it, is no JSON")
    return problems
