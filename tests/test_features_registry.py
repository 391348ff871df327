"""Completeness of the training-feature registry (specgen/kinds/features): each failure names the feature
and the piece it misses, as tests/test_op_registry.py does for ops."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import itertools
import pkgutil
import re
from pathlib import Path

import pytest
from precision_train_cases import spec_text

from specgen.ir.model import ModelIR
from specgen.ir.resolve import build_ir
from specgen.kinds import compat, features
from specgen.kinds.features import HOOKS, INTERACTIONS, REGISTRY, REPLACING
from specgen.render.environment import environment, templates_dir
from specgen.render.features_plan import placement
from specgen.spec.load import load_spec, load_spec_text

ROOT = Path(__file__).resolve().parents[1]
SKELETON = ("tf/train.py.j2", "tf/steps/gradient.py.j2", "tf/steps/accumulate.py.j2", "tf/steps/apply.py.j2",
            "tf/train_levenberg_marquardt.py.j2")


def _macros(partial: str) -> set[str]:
    module = environment().get_template(partial).module
    return {name for name in dir(module) if not name.startswith("_")}


def _resolves(dotted: str) -> bool:
    """A dotted name: a module, or an attribute path inside one."""
    parts = dotted.split(" ")[0].split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(target, name):
                return False
            target = getattr(target, name)
        return True
    return False


def test_every_module_is_registered_in_order() -> None:
    modules = {m.name for m in pkgutil.iter_modules(features.__path__)} - set(features.NOT_FEATURES)
    assert sorted(modules) == sorted(features.PIPELINE)
    assert sorted(features.ORDER) == sorted(REGISTRY) == sorted(modules - set(features.SETTINGS))


def test_the_pipeline_is_derived_from_each_feature_s_after() -> None:
    """The order the golden train.py files were rendered in (byte-identical since the hand-written lists)."""
    assert features.PIPELINE == ("levenberg_marquardt", "accumulate", "precision", "clip", "weight_decay", "ema",
                                 "targets", "pruning", "loss_terms", "distribute", "probe")
    place = {name: i for i, name in enumerate(features.PIPELINE)}
    assert all(place[a] < place[f.name] for f in features.PIPELINE_DEFS for a in f.after)


@pytest.mark.parametrize("name", list(features.PIPELINE))
def test_runtime_hooks_name_known_points_and_functions(name: str) -> None:
    from specgen.runtime.hooks import RUNTIME_POINTS

    for point, dotted in features.PIPELINE_DEFS[features.PIPELINE.index(name)].runtime_hooks:
        assert point in RUNTIME_POINTS, f"feature '{name}': unknown runtime point '{point}'"
        assert _resolves(dotted), f"feature '{name}': '{dotted}' names nothing"


@pytest.mark.parametrize("name", list(REGISTRY))
def test_feature_is_complete(name: str) -> None:
    feature = REGISTRY[name]
    assert feature.doc and feature.spec_keys, f"feature '{name}': no doc line or spec keys"
    assert set(feature.hooks) <= set(HOOKS), f"feature '{name}': unknown hooks {set(feature.hooks) - set(HOOKS)}"
    if feature.hooks:
        assert feature.partial, f"feature '{name}': hooks but no partial"
        missing = set(feature.hooks) - _macros(feature.partial)
        assert not missing, f"feature '{name}': {feature.partial} has no macro for hook(s) {sorted(missing)}"
        extra = _macros(feature.partial) - set(feature.hooks)
        assert not extra, f"feature '{name}': {feature.partial} defines macros {sorted(extra)} not in its hooks"
    if feature.step:
        assert (templates_dir() / feature.step).is_file(), f"feature '{name}': no step template {feature.step}"
    for pointer in (feature.render_plan, feature.report, *feature.runtime, *feature.state):
        assert pointer is None or _resolves(pointer), f"feature '{name}': '{pointer}' names nothing"
    assert name in compat.FEATURE_OF.values(), f"feature '{name}': not in compat.py's table"


def test_features_that_replace_the_same_code_never_combine() -> None:
    """Two step kinds, or two features replacing one hook's default, would render one method twice."""
    def owns(f: features.FeatureDef) -> set[str]:
        return {h for h in f.hooks if h in REPLACING} | ({"step"} if f.step else set())

    names = {f: [u for u, g in compat.FEATURE_OF.items() if g == f] for f in REGISTRY}
    for a, b in itertools.combinations(REGISTRY.values(), 2):
        if owns(a) & owns(b):
            assert all(not compat.allowed(x, y) for x in names[a.name] for y in names[b.name]), (
                f"features '{a.name}' and '{b.name}' both replace {sorted(owns(a) & owns(b))}: compat.py must refuse them")


@pytest.mark.parametrize("interaction", INTERACTIONS, ids=lambda i: "+".join(i.features))
def test_interaction_is_complete(interaction: features.Interaction) -> None:
    assert set(interaction.features) <= set(REGISTRY), f"interaction {interaction.features}: unknown feature"
    assert compat.allowed(*(next(u for u, g in compat.FEATURE_OF.items() if g == f) for f in interaction.features))
    if interaction.hooks:
        assert interaction.partial and set(interaction.hooks) <= _macros(interaction.partial), interaction.features
        for hook in interaction.hooks:
            placement(interaction, hook)  # raises when neither feature renders there
    for feature, key, _ in interaction.context:
        assert feature in interaction.features, f"interaction {interaction.features} sets '{key}' on '{feature}'"


def test_every_hook_is_a_point_of_the_skeleton() -> None:
    text = "".join((templates_dir() / t).read_text(encoding="utf-8") for t in SKELETON)
    absent = [h for h in HOOKS if f"hooks.{h} " not in text]
    assert absent == [], f"hooks no skeleton template loops over: {absent}"


def test_the_skeleton_branches_on_no_feature() -> None:
    text = (templates_dir() / "tf/train.py.j2").read_text(encoding="utf-8")
    branches = re.findall(r"{%-? *(?:if|elif) (.*?)-?%}", text)
    named = [(n, b) for b in branches for n in (*REGISTRY, "prune", "ema_decay", "terms") if n in b]
    assert named == [], f"train.py.j2 branches on features: {named}"
    # 35 before the skeleton; these test settings (batch size, rates, schedules, whether a loss term reads data
    # labels: metrics get None where none does)
    assert len(branches) == 8


@pytest.mark.parametrize(("spec", "expected"), [
    ("kitchen_sink_full_batch", ["accumulate", "clip", "weight_decay", "ema", "targets", "pruning", "loss_terms",
                                 "probe"]),
    ("kitchen_sink_distributed", ["accumulate", "clip", "weight_decay", "ema", "targets", "pruning", "loss_terms",
                                  "distribute", "probe"]),
    ("lm_with_allowed", ["levenberg_marquardt", "ema", "probe"]),
    ("sgd_plain", ["probe"]),
])
def test_active_features_of_golden_specs(spec: str, expected: list[str]) -> None:
    ir = build_ir(load_spec(ROOT / "tests" / "golden" / "specs" / f"{spec}.yaml"))
    assert [f.name for f in features.active(ir)] == expected


def _specs() -> list[ModelIR]:
    """Specs that turn every feature with a partial on: the kitchen sink, a mixed_float16 CNN, an LM fit."""
    golden = ROOT / "tests" / "golden" / "specs"
    return [build_ir(load_spec(golden / "kitchen_sink_full_batch.yaml")),
            build_ir(load_spec_text(spec_text("mixed_float16"), "digits_cnn.yaml")),
            build_ir(load_spec(golden / "lm_with_allowed.yaml"))]


SPECS = _specs()


def _builder(feature: features.FeatureDef) -> object:
    if feature.render_plan is None:
        return feature.plan
    module, _, name = feature.render_plan.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("name", [f.name for f in features.PIPELINE_DEFS if f.partial])
def test_each_partial_reads_only_the_fields_of_its_typed_plan(name: str) -> None:
    """No dict contexts: what a partial reads of `f` is a field of the frozen dataclass its FeatureDef builds."""
    feature = features.PIPELINE_DEFS[features.PIPELINE.index(name)]
    assert feature.partial is not None and not (feature.plan and feature.render_plan), name
    read = set(re.findall(r"\bf\.(\w+)", (templates_dir() / feature.partial).read_text(encoding="utf-8")))
    build = _builder(feature)
    if build is None:
        assert read == set(), f"feature '{name}': its partial reads {sorted(read)} but it has no plan"
        return
    ir = next(ir for ir in SPECS if feature.enabled(ir))
    plan = build(ir)  # type: ignore[operator]
    assert dataclasses.is_dataclass(plan) and plan.__dataclass_params__.frozen, f"feature '{name}': {plan!r}"
    fields = {f.name for f in dataclasses.fields(plan)}
    assert read <= fields, f"feature '{name}': its partial reads {sorted(read - fields)}, not fields of its plan"
    for interaction in INTERACTIONS:  # what an interaction sets on the feature's context is a field too
        assert {key for f, key, _ in interaction.context if f == name} <= fields, interaction.features


def test_the_plans_hold_the_spec_s_values() -> None:
    """kitchen_sink_full_batch: accumulate 2, clip {value: 2.0}, ema {decay: 0.9}; the CNN under mixed_float16."""
    sink, cnn = SPECS[0], SPECS[1]
    plans = {f.name: f.plan(sink) for f in features.PIPELINE_DEFS if f.plan and f.enabled(sink)}
    assert (plans["accumulate"].key, plans["accumulate"].micro_batches) == ("accumulators", "accumulators/micro_batches")
    assert (plans["clip"].kind, plans["clip"].value) == ("value", 2.0)
    assert (plans["ema"].key, plans["ema"].decay) == ("ema", 0.9)
    assert plans["pruning"].when == ""  # set by the accumulate + pruning interaction at render time
    precision = features.PIPELINE_DEFS[features.PIPELINE.index("precision")].plan(cnn)  # type: ignore[misc]
    assert (precision.compute, precision.scaling) == ("float16", True)
    assert precision.gradient_options == ", scale=self.loss_scale.read_value()"


def test_feature_state_comes_in_pipeline_order() -> None:
    """The accumulators, then the loss scale, then the EMA shadows: each feature's `variables`, none spelled
    in ir/collections.py."""
    cnn = SPECS[1]
    roots = [v.path.split("/")[0] for v in cnn.variables if v.path.split("/")[0] in ("accumulators", "loss_scale", "ema")]
    assert list(dict.fromkeys(roots)) == ["loss_scale", "ema"]  # accumulate: 1 in the CNN
    sink = SPECS[0]
    roots = [v.path.split("/")[0] for v in sink.variables if v.path.split("/")[0] in ("accumulators", "ema")]
    assert list(dict.fromkeys(roots)) == ["accumulators", "ema"]
    trainable = sink.collections["trainable"]
    assert roots.count("accumulators") == len(trainable) + 1 and roots.count("ema") == len(trainable)


def test_the_shared_files_name_no_feature() -> None:
    """ir/collections.py, render/features_plan.py and ir/resolve.py's cross-section checks loop over the registry:
    no identifier of theirs is a feature's name (resolve.py still builds the pruning, targets and loss-terms IR)."""
    def names(tree: ast.AST) -> set[str]:
        found = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        found |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        found |= {part for n in ast.walk(tree) if isinstance(n, ast.alias) for part in n.name.split(".")}
        return found | {part for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for part in (n.module or "").split(".")}

    package = ROOT / "specgen"
    trees = {path: ast.parse((package / path).read_text(encoding="utf-8")) for path in
             ("ir/collections.py", "render/features_plan.py", "ir/resolve.py")}
    checks = next(n for n in ast.walk(trees.pop("ir/resolve.py")) if isinstance(n, ast.FunctionDef)
                  and n.name == "_check_sections")
    named = {path: sorted(names(tree) & set(features.PIPELINE) - {"probe", "targets"}) for path, tree in trees.items()}
    named["ir/resolve.py _check_sections"] = sorted(names(checks) & set(features.PIPELINE))
    assert named == {"ir/collections.py": [], "render/features_plan.py": [], "ir/resolve.py _check_sections": []}


def test_feature_checks_run_in_pipeline_order() -> None:
    """An LM spec under mixed_float16 with export weights 'ema' and no train.ema: levenberg_marquardt's,
    precision's and ema's checks, each once, in PIPELINE order (SpecError sorts them by position after)."""
    text = (ROOT / "tests" / "golden" / "specs" / "lm_fit.yaml").read_text()
    text = text.replace("train:\n", "train:\n  precision: mixed_float16\n", 1)
    text += "export: {onnx: {weights: ema}}\n" if "\nexport:" not in text else ""
    problems = features.checks(load_spec_text(text, "lm.yaml"))
    assert [p.message.split(" ")[0] for p in problems] == ["levenberg_marquardt", "export"]


def test_every_training_state_key_sits_under_a_reserved_root() -> None:
    """A layer may not be named under a root that training state uses (ir/naming.py STATE_ROOTS, built from
    FeatureDef.roots): with every feature on, each state variable's first path part is one of them. A feature
    whose keys start elsewhere (the loss scale's `loss_scale/...` once did) lets a layer named like it pass
    validate and share its checkpoint keys."""
    from specgen.ir.naming import STATE_ROOTS

    for ir in _specs():
        model = {v.path for v in ir.model_variables}
        state = [v.path for v in ir.variables if v.path not in model]
        assert state, ir.name
        assert sorted({p.split("/")[0] for p in state} - set(STATE_ROOTS)) == [], ir.name


def test_each_train_key_is_a_spec_key_and_an_ir_field_that_the_shared_files_do_not_name() -> None:
    """A feature's `train.<key>` comes from its TrainKey alone: spec/training.py and ir/training/ build `Train` and
    `TrainIR` from the registry (tests/test_feature_plugin.py adds a feature to a copy of the tree and runs it)."""
    from specgen.ir.training.model import TrainIR, TrainShared
    from specgen.spec.training import Train
    from specgen.spec.training import TrainShared as SpecShared

    names = [k.name for k in features.TRAIN_KEYS]
    assert names == ["accumulate", "precision", "clip", "ema", "distribute"]  # pipeline order
    assert list(Train.model_fields) == features.place_keys(list(SpecShared.model_fields))
    assert [f.name for f in dataclasses.fields(TrainIR)] == [*(f.name for f in dataclasses.fields(TrainShared)), *names]
    build = (ROOT / "specgen/ir/training/build.py").read_text(encoding="utf-8")
    train = next(n for n in ast.parse(build).body if isinstance(n, ast.FunctionDef) and n.name == "_train")
    # build.py's other functions read export.onnx.precision and an optimizer's own clip: other senses.
    for where, text in (("specgen/spec/training.py", (ROOT / "specgen/spec/training.py").read_text(encoding="utf-8")),
                        ("build.py's _train", ast.get_source_segment(build, train) or "")):
        assert [n for n in names if re.search(rf"\b{n}\b", text)] == [], f"{where} names a feature's train key"


@pytest.mark.parametrize("name", ["optimizer", "ema", "target", "pruning"])
def test_a_built_in_collection_name_is_refused_for_a_user_collection(name: str) -> None:
    """The features' collections (FeatureDef.collections) are reserved like the shared ones."""
    from specgen.diagnostics import SpecError
    from specgen.ir.collections import BUILTIN

    assert BUILTIN == ("trainable", "frozen", "model", "update", "optimizer", "step", "metrics", "ema", "target",
                       "pruning")
    text = spec_text().replace('  head: ["head/*"]\n', f'  head: ["head/*"]\n  {name}: ["conv1/*"]\n', 1)
    with pytest.raises(SpecError) as raised:
        build_ir(load_spec_text(text, "digits_cnn.yaml"))
    assert [d.message for d in raised.value.diagnostics] == [
        f"collection name '{name}' is built in (trainable, frozen, model, update, optimizer, step, metrics, ema, "
        "target, pruning); choose another name"]
