"""Spec -> IR: wire the graph, infer shapes, create variables, resolve collections.

Every problem found is collected; `build_ir` raises one SpecError with all of them.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from specgen.diagnostics import Diagnostic, SpecError, did_you_mean
from specgen.ir import shares
from specgen.ir.collections import KIND_COLLECTIONS, Membership, resolve_collections, training_state
from specgen.ir.decay import resolve_decay
from specgen.ir.exported import check_export_outputs
from specgen.ir.extra_outputs import extra_nodes, unknown_output
from specgen.ir.flatten_order import reorder_flattened_kernels
from specgen.ir.graph import producer, topological_order, wire
from specgen.ir.loss_terms import data_terms, primary_kind, resolve_terms
from specgen.ir.masks import resolve_masks
from specgen.ir.model import Input, ModelIR, Node, Shape, Variable, value_dtype
from specgen.ir.naming import (
    MODULE_ATTRIBUTES,
    Namer,
    class_name,
    class_name_problem,
    layer_name_problem,
    onnx_name,
    py_name,
)
from specgen.ir.pad_folding import fold_pads
from specgen.ir.pruning import resolve_pruning
from specgen.ir.reach import reach_problems
from specgen.ir.shares import share_owners
from specgen.ir.targets import resolve_targets
from specgen.ir.training import jit_compile
from specgen.ir.training.build import build_training
from specgen.kinds import augment, features, ops, sources
from specgen.kinds.losses import REGISTRY as LOSSES
from specgen.kinds.metrics import REGISTRY as METRICS
from specgen.kinds.metrics import Args, args_of, name_of, relisted
from specgen.spec.load import LoadedSpec, load_spec
from specgen.spec.shipped import features_problem


def ir_from_file(path: Path) -> ModelIR:
    """Load, validate and resolve one spec file (what `specgen build` renders from)."""
    return build_ir(load_spec(path))


def build_ir(loaded: LoadedSpec) -> ModelIR:
    """Resolve a validated spec, or raise SpecError with every problem found."""
    spec = loaded.spec
    edges, problems = wire(loaded)
    owners, share_problems = share_owners(loaded)
    problems += share_problems
    order, cycle = topological_order(loaded, edges) if not problems else ([], [])
    problems += cycle
    layers = _infer_layers(loaded, edges, order, owners, problems) if not problems else []
    problems += _check_outputs(loaded, {x.layer.name: x.result for x in layers})
    masks, mask_problems = resolve_masks(loaded, layers) if not problems else ({}, [])
    problems += mask_problems
    if problems:
        raise SpecError(problems)
    members = Membership.of([(p, d.kind) for x in layers for p, d in x.variables], _layer_weights(layers))
    targets, problems = resolve_targets(loaded, members.model, {p: d.shape for x in layers for p, d in x.variables})
    if problems:  # without the pairs, the copies would read as weights nobody trains: report only the cause
        raise SpecError(problems)
    members.targets = [p for t in targets for p in t.target_paths]
    resolve_collections(loaded, members)
    pruning, prune_problems = resolve_pruning(loaded, members, {p: d.shape for x in layers for p, d in x.variables},
                                              {p: x.layer.name for x in layers for p, _ in x.variables})
    terms, term_problems = resolve_terms(loaded, members)
    excluded, decay_problems = resolve_decay(loaded, members)
    problems = members.problems + prune_problems + term_problems + decay_problems + _check_sections(loaded)
    problems += check_export_outputs(loaded)
    problems += _check_names(loaded, layers)
    if problems:
        raise SpecError(problems)
    index: dict[str, set[str]] = {}
    for name, paths in members.collections.items():
        for path in paths:
            index.setdefault(path, set()).add(name)
    # Variables are created once, with their final collections; a sharing layer's node holds its owner's.
    made = {path: _variable(path, d, index.get(path, ()), path in members.held) for x in layers
            for path, d in x.variables}
    # A target network's layers run as a hand-written DQN runs its target model, `target(x, training=False)`: its
    # batch norms already do (their weights are held copies), and so do its dropouts and attention dropouts,
    # which have no weights to say so. The TD target the step holds constant is then not redrawn by a seed.
    copies = tuple(t.target.removesuffix("*") for t in (spec.targets or {}).values())
    nodes = [n for x in layers
             for node in [replace(_node(x, made, members.held, copies), input_masks=masks.get(x.layer.name, ()))]
             for n in (node, *extra_nodes(node, x.result))]
    nodes, model_vars, nchw_flattens = reorder_flattened_kernels(nodes, list(made.values()), set(spec.outputs.values()))
    training = replace(build_training(loaded, {k: tuple(v) for k, v in members.optimizers.items()}, terms, excluded),
                       targets=tuple(targets))
    trainable = members.collections.get("trainable", [])
    state = training_state(training, trainable, {v.path: v.shape for v in model_vars})
    state += pruning.mask_variables() if pruning else []
    collections = _collection_table(model_vars + state, members, pruning is not None)
    export = training.export
    ir = ModelIR(
        name=spec.name, class_name=class_name(spec.name), doc=spec.doc, source=loaded.path.name,
        inputs=tuple(Input(n, (None, *i.shape), i.dtype, py_name(n), onnx_name(n)) for n, i in spec.inputs.items()),
        nodes=tuple(nodes), outputs=dict(spec.outputs), variables=tuple(model_vars + state),
        collections=collections, opset=export.opset, ir_version=export.ir_version,
        dynamic_batch=export.dynamic_batch,
        optimizers={k: tuple(v) for k, v in members.optimizers.items()}, training=training, pruning=pruning,
        skip_lints=tuple(dict.fromkeys(spec.lints.skip)),
        nchw_flattens=nchw_flattens, folded_pads=fold_pads(nodes, set(spec.outputs.values())),
    )
    if problems := reach_problems(loaded, ir):  # claimed weights no gradient from the loss reaches
        raise SpecError(problems)
    return ir


@dataclass(frozen=True)
class _Inferred:
    """A layer whose shape is inferred; it becomes a Node once collections are resolved."""

    layer: Any  # the spec's layer; for a sharing layer, its owner's configuration under its own name and inputs
    index: int  # position in the spec's `layers` list
    sources: list[str]
    shapes: list[Shape]
    result: ops.OpResult
    variables: list[tuple[str, ops.VarDecl]]  # (spec path, declaration) of each variable the layer owns
    shares: str | None = None  # the layer whose variables this one uses (it owns none)


def _infer_layers(loaded: LoadedSpec, edges: dict[str, list[str]], order: list[int], owners: dict[str, str],
                  problems: list[Diagnostic]) -> list[_Inferred]:
    spec, layers = loaded.spec, loaded.layers
    by_name = {layer.name: layer for layer in layers} if owners else {}
    known: dict[str, tuple[Shape, str]] = {n: ((None, *i.shape), value_dtype(i.dtype)) for n, i in spec.inputs.items()}
    inferred: list[_Inferred] = []
    for i in order:
        layer = layers[i]
        sources = edges[layer.name]
        if unknown := [s for s in sources if s not in known and producer(s, known) is not None]:
            problems.append(unknown_output(loaded, i, unknown[0], known))
            continue
        if any(s not in known for s in sources):
            continue  # an input already failed; do not pile errors on top of it
        shapes = [known[s][0] for s in sources]
        if (wrong := features_problem(loaded.origins, i, shapes)) is not None:  # a shipped block's hidden_dim
            problems.append(wrong)
            continue
        owner = owners.get(layer.name)
        try:
            config = shares.effective(layer, by_name[owner]) if owner else layer
            result = ops.infer(config, shapes, [known[s][1] for s in sources])
        except ops.OpError as exc:
            key = exc.key if exc.key in layer.model_fields_set or exc.key in ("input", "inputs") else None
            problems.append(loaded.diagnostic(("layers", i, key) if key else ("layers", i),
                                              f"layer '{layer.name}' ({layer.op}): {exc}"))
            continue
        known[layer.name] = (result.shape, result.dtype)
        known.update({f"{layer.name}/{out}": value for out, value in result.extra_outputs.items()})
        paths = [] if owner else [(f"{layer.name}/{d.role}", d) for d in result.variables]
        inferred.append(_Inferred(config, i, sources, shapes, result, paths, owner))
    if owners:
        problems += shares.check_shapes(loaded, inferred)
    return inferred


def _layer_weights(layers: list[_Inferred]) -> dict[str, tuple[str, ...]]:
    """Each statistic ("update" variable) -> the weights of the layer that owns it."""
    table: dict[str, tuple[str, ...]] = {}
    for x in layers:
        weights = tuple(p for p, d in x.variables if d.kind == "weight")
        table.update({p: weights for p, d in x.variables if d.kind == "update"})
    return table


def _node(x: _Inferred, made: dict[str, Variable], held: set[str], copies: tuple[str, ...]) -> Node:
    layer, result = x.layer, x.result
    act = ops.activation_of(layer)
    variables = {d.role: made[f"{x.shares or layer.name}/{d.role}"] for d in result.variables}
    return Node(
        name=layer.name, op=layer.op, inputs=tuple(x.sources), input_shapes=tuple(x.shapes), shape=result.shape,
        dtype=result.dtype, params=result.params,
        variables=variables, activation=None if act == "linear" else act, py_name=py_name(layer.name),
        onnx_name=onnx_name(layer.name), flops=result.flops, index=x.index, shares=x.shares,
        # By variable path, so a sharing layer follows its owner.
        inference_mode=any(v.path in held for v in variables.values()) or layer.name.startswith(copies),
    )


def _variable(path: str, decl: ops.VarDecl, named_in: set[str] | tuple[()], held: bool) -> Variable:
    # A held statistic (its batch norm's weights are all frozen) is changed by nothing in training: model only.
    builtin = {"model"} if held else set(KIND_COLLECTIONS[decl.kind])
    # The op's rule declared how the TensorFlow-layout value becomes the ONNX operator's input.
    onnx_shape = decl.shape if decl.onnx_shape is None else decl.onnx_shape
    return Variable(path=path, shape=decl.shape, dtype="float32", collections=tuple(sorted(builtin.union(named_in))),
                    init=decl.init, seed=zlib.crc32(path.encode()) & 0x7FFFFFFF, py_name=py_name(path),
                    onnx_name=onnx_name(path), onnx_perm=decl.onnx_perm, onnx_shape=onnx_shape,
                    onnx_split=decl.onnx_split, onnx_order=decl.onnx_order)


def _collection_table(variables: list[Variable], members: Membership, pruned: bool = False
                      ) -> dict[str, tuple[str, ...]]:
    builtin = ("trainable", "frozen", "model", "update", "optimizer", "ema", "step", "metrics")
    # `pruning` only for a spec that prunes: every other spec's collections.yaml stays as it was.
    table: dict[str, list[str]] = {name: [] for name in (*builtin, *(("pruning",) if pruned else ()),
                                                          *members.collections)}
    for var in variables:
        for name in var.collections:
            table.setdefault(name, []).append(var.path)
    return {name: tuple(paths) for name, paths in table.items()}


def _check_outputs(loaded: LoadedSpec, inferred: dict[str, ops.OpResult]) -> list[Diagnostic]:
    layers, inputs = [layer.name for layer in loaded.spec.layers], set(loaded.spec.inputs)
    problems = []
    for out, layer in loaded.spec.outputs.items():
        owner = producer(layer, set(layers))
        if owner is not None and owner != layer:  # `<layer>/<output>`: checked once the layer's outputs are known
            if owner in inferred and (name := layer.rpartition("/")[2]) not in inferred[owner].extra_outputs:
                extra = [f"{owner}/{k}" for k in inferred[owner].extra_outputs]
                has = f"its outputs are {owner}, {', '.join(extra)}" if extra else f"its one output is {owner}"
                problems.append(loaded.diagnostic(("outputs", out), f"output '{out}' names '{layer}'; layer "
                                                  f"'{owner}' has no output '{name}' ({has})"))
        elif layer in inputs:
            problems.append(loaded.diagnostic(("outputs", out), f"output '{out}' names input '{layer}'; outputs name "
                                              "layers (add a layer, e.g. {op: relu}, if you mean a transformed input)"))
        elif layer not in layers:
            problems.append(loaded.diagnostic(("outputs", out), f"output '{out}' names layer '{layer}', which does not "
                                              f"exist{did_you_mean(layer, layers)}"))
    return problems


def _check_names(loaded: LoadedSpec, layers: list[_Inferred]) -> list[Diagnostic]:
    """Spec names whose generated Python or ONNX names are invalid or would collide (naming.py)."""
    spec, problems = loaded.spec, []
    if clash := class_name_problem(spec.name):
        problems.append(loaded.diagnostic(("name",), clash))
    problems += [loaded.diagnostic(("layers", x.index, "name"), why) for x in layers
                 if (why := layer_name_problem(x.layer.name))]
    for loc, owner, namer, generated in _generated_names(loaded, layers):
        if clash := namer.claim(generated, owner):
            problems.append(loaded.diagnostic(loc, clash))
    return problems


def _generated_names(loaded: LoadedSpec, layers: list[_Inferred]) -> list[tuple[tuple[str | int, ...], str, Namer, str]]:
    """(where, owner as shown, namespace, generated name) for every name a spec name becomes."""
    spec = loaded.spec
    locals_, onnx = Namer("generated Python code"), Namer("generated ONNX graph")
    attributes = Namer("generated Python code", {a: f"tf.Module's own attribute '{a}'" for a in MODULE_ATTRIBUTES})
    entries: list[tuple[tuple[str | int, ...], str, Namer, str]] = [(("inputs", n), f"input '{n}'", namer, mangle(n))
               for n in spec.inputs for namer, mangle in ((locals_, py_name), (onnx, onnx_name))]
    # Variables come before layers, so that a layer named like another layer's variable path
    # ('conv1/kernel') is the one reported.
    entries += [(("layers", x.index, "name"), f"variable '{p}'", namer, mangle(p)) for x in layers
                for p, _ in x.variables for namer, mangle in ((attributes, py_name), (onnx, onnx_name))]
    # Extra outputs (OpResult.extra_outputs) are tensors too: a layer named 'enc/state_h' beside an lstm 'enc'
    # with return_state would be read where the state was meant.
    entries += [(("layers", x.index, "name"), f"output '{x.layer.name}/{out}' of layer '{x.layer.name}'", namer,
                 mangle(f"{x.layer.name}/{out}")) for x in layers for out in x.result.extra_outputs
                for namer, mangle in ((locals_, py_name), (onnx, onnx_name))]
    entries += [(("layers", x.index, "name"), f"layer '{x.layer.name}'", namer, mangle(x.layer.name))
                for x in layers for namer, mangle in ((locals_, py_name), (onnx, onnx_name))]
    # An output is a graph output tensor only; one named like the layer it reads is that layer's tensor.
    entries += [(("outputs", n), f"output '{n}'", onnx, n) for n, layer in spec.outputs.items() if n != layer]
    return entries


def _check_sections(loaded: LoadedSpec) -> list[Diagnostic]:
    """Checks across sections: loss, data and export refer to things that exist."""
    spec, problems = loaded.spec, []
    if spec.optimizers and spec.loss is None:
        problems.append(loaded.diagnostic(("optimizers",), "optimizers need a 'loss' section to minimize", key=True))
    if spec.data is not None:
        for stage in ("train", "eval"):
            problems += _check_source(loaded, stage)
        problems += [loaded.diagnostic(loc, message) for loc, message in sources.clashes(spec.data)]
    problems += _check_metrics(loaded)
    problems += features.checks(loaded)  # each feature's refusals across sections (FeatureDef.check)
    problems += jit_compile.check(loaded)
    return problems


def _check_metrics(loaded: LoadedSpec) -> list[Diagnostic]:
    """Metrics must fit the loss: binary ones need sigmoid outputs, accuracy needs classes."""
    spec = loaded.spec
    if spec.train is None:
        return []
    kind = primary_kind(spec)  # metrics read the primary term: the first with data labels
    target = LOSSES[kind].target if kind else None
    problems = []
    unlabelled = kind is None and spec.loss is not None  # every term reads its labels from an output
    seen: dict[str, Args] = {}
    for i, item in enumerate(spec.train.metrics):
        name, args = name_of(item), args_of(item)
        if unlabelled and METRICS[name].labels:  # mean_loss needs none (MetricDef.labels)
            problems.append(loaded.diagnostic(("train", "metrics", i), (
                f"metric '{name}' reads the first loss term with labels from the data section, and no term has "
                f"them (each reads its labels from an output); metrics without labels: {_label_free()}")))
        elif (why := METRICS[name].refuse(kind, target)) is not None:  # specgen/kinds/metrics/<name>.py
            problems.append(loaded.diagnostic(("train", "metrics", i), why))
        elif seen.setdefault(name, args) != args:  # one set of variables metrics/<name>/* per metric
            problems.append(loaded.diagnostic(("train", "metrics", i), relisted(name, args, seen[name])))
    return problems


def _label_free() -> str:
    return ", ".join(name for name, metric in METRICS.items() if not metric.labels)


def _check_source(loaded: LoadedSpec, stage: str) -> list[Diagnostic]:
    spec, problems = loaded.spec, []
    data = spec.data
    source = getattr(data, stage) if data else None
    if data is None or source is None:
        return []
    for name in source.features:
        if name not in spec.inputs:
            problems.append(loaded.diagnostic(("data", stage, "features", name), (
                f"feature '{name}' is not a spec input{did_you_mean(name, spec.inputs)}"), key=True))
    for name in spec.inputs:
        if name not in source.features:
            problems.append(loaded.diagnostic(("data", stage, "features"), f"input '{name}' has no feature in data.{stage}"))
    # What the kind itself refuses (none of today's kinds refuses more than its model does).
    fed = augment.as_fed(source, stage, data.train)  # eval images reach the model at train's crop size
    problems += [loaded.diagnostic(("data", stage, *loc), message)
                 for loc, message in sources.kind_of(source).refuse(fed, spec.inputs)]
    problems += [loaded.diagnostic(("data", stage, *loc), message)  # specgen/kinds/augment
                 for loc, message in augment.refusals(source, spec.inputs, stage)]
    stages = [s for s in (spec.data.train, spec.data.eval) if s is not None] if spec.data else []
    for loc, term in data_terms(spec):
        # A label no stage has is reported at the term (ir/loss_terms.py); here, a stage that lacks one.
        if term.labels not in source.labels and any(term.labels in s.labels for s in stages):
            problems.append(loaded.diagnostic(("data", stage), _missing_label(loaded, stage, loc, term.labels)))
    return problems


def _missing_label(loaded: LoadedSpec, stage: str, loc: tuple[str | int, ...], label: str) -> str:
    """What a stage without the loss's label has, and the two places that can change: the stage's labels or the
    loss's `labels` (with where it is written, which the error's position does not show)."""
    source = getattr(loaded.spec.data, stage)
    where = "the loss" if len(loc) == 1 else f"loss[{loc[1]}]"
    place = _written_at(loaded, (*loc, "labels"))
    has = ", ".join(f"'{name}'" for name in source.labels) or "none"
    return (f"data.{stage} has no label '{label}', which {where} reads (data.{stage} labels: {has}); name the label "
            f"'{label}' in data.{stage}.labels, or change {where}'s 'labels'{place} to a label every data stage has")


def _written_at(loaded: LoadedSpec, loc: tuple[str | int, ...]) -> str:
    """` at FILE:L:C` where `loc` is written: with `extends`, the file that wrote it, which need not be the one the
    error names (as Origins._shown); ` (set by --set KEY)` when an override set it (the file's value is gone)."""
    shown = loaded.diagnostic(loc, "")
    if shown.path.startswith("--set "):
        return f" (set by {shown.path.partition('=')[0]})"
    at = shown.position
    return "" if at is None else f" at {at.file or shown.path}:{at.line}:{at.col}"
