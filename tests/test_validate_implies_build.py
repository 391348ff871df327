"""The class "validate says ok, build fails" (issue 17, section 4): once `specgen validate` accepts a
spec, `build` and `report` finish without any exception, SpecError included.

Specs are drawn from the JSON Schema (tests/spec_values.py) with values at their edges: float32's
largest and smallest numbers, int32 sizes, bounds themselves, one-element shapes. Each goes through
what `validate` runs (load, resolve, the init-scale lint), and, when that accepts it, through what
`build` runs (render every file in memory, parse and fully check the ONNX graph) and `report`.
The hand-written cases below are the ones that escaped before: each failed one of the two steps.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from spec_values import DEFS, SCHEMA, from_schema

from specgen.cli import main
from specgen.diagnostics import SpecError
from specgen.fields.base import FLOAT32_BOUND
from specgen.ir.lints import init_scale_warnings
from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.report import report
from specgen.spec.load import load_spec_text

SHOWN = "fuzz.yaml"
OP_UNION = SCHEMA["properties"]["layers"]["items"]["oneOf"][0]["discriminator"]["mapping"]
OPS = sorted(OP_UNION)
# Most ops take images (rank 4 with the batch), so most inputs are images; one-element extents are the edges.
INPUTS = [([6, 6, 2], "float32")] * 4 + [([4, 4, 1], "float32"), ([1, 1, 1], "float32"), ([5, 5, 3], "float32"),
                                          ([4], "float32"), ([1], "float32"), ([2, 3], "float32"), ([3], "int32")]
LOSS_TERM = SCHEMA["$defs"]["ClassificationLoss"], SCHEMA["$defs"]["RegressionLoss"], SCHEMA["$defs"]["HuberLoss"]
OPTIMIZER = SCHEMA["properties"]["optimizers"]["patternProperties"]
OTHER = ["export", "lints", "collections", "frozen", "prune", "targets", "checkpoint"]
DATA = {"train": {"npz": "d.npz", "features": {"x": "x"}, "labels": {"label": "t"}}}


@st.composite
def layer(draw: st.DrawFn, index: int, previous: str) -> dict[str, Any]:
    op = draw(st.sampled_from(OPS))
    drawn = draw(from_schema(DEFS[OP_UNION[op].rsplit("/", 1)[1]]))
    drawn.update(name=f"l{index}", op=op)
    for key in ("share", "input"):  # wiring is chosen here: each layer reads the one before
        drawn.pop(key, None)
    if "inputs" in drawn:
        drawn["inputs"] = [previous, draw(st.sampled_from([previous, "x"]))]
    return drawn


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    shape, dtype = draw(st.sampled_from(INPUTS))
    layers: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 3))):
        layers.append(draw(layer(i, layers[-1]["name"] if layers else "x")))
    spec: dict[str, Any] = {"specgen": 1, "name": "fuzz", "inputs": {"x": {"shape": shape, "dtype": dtype}},
                            "outputs": {"y": layers[-1]["name"]}, "layers": layers}
    if draw(st.booleans()):  # a training setup whose names resolve: train.py is rendered too
        term = draw(st.one_of([from_schema(t) for t in LOSS_TERM]))
        term.update({"logits" if "entropy" in term["kind"] else "predictions": "y", "labels": "label"})
        optimizer = draw(from_schema(next(iter(OPTIMIZER.values()))))
        optimizer.pop("variables", None)  # every variable
        spec |= {"loss": term, "optimizers": {"all": optimizer}, "data": DATA,
                 "train": draw(from_schema(SCHEMA["$defs"]["Train"]))}
    for section in OTHER:
        if draw(st.integers(0, 15)) == 0:  # each in one spec of 16, so that most specs stay valid
            spec[section] = draw(from_schema(SCHEMA["properties"][section]))
    return spec


def outcome(spec: dict[str, Any]) -> str:
    """'refused' when validate refuses the spec; else build and report must succeed: 'built'."""
    text = yaml.safe_dump(spec, sort_keys=False)
    try:
        loaded = load_spec_text(text, SHOWN)
        ir = build_ir(loaded)
        init_scale_warnings(loaded, ir)
    except SpecError:
        return "refused"
    try:
        files = render_files(ir)
        report(ir, SHOWN, loaded.spec.optimizers)
    except Exception as exc:  # any exception at all is the bug this test is about
        raise AssertionError(f"validate accepted this spec, then build or report raised {exc!r}:\n{text}") from exc
    assert files["model.onnx"], text
    return "built"


# No shrinking: the failure message holds the whole spec (a few lines), and shrinking one took minutes.
FUZZ = settings(deadline=None, derandomize=not os.environ.get("SPECGEN_FUZZ_RANDOM"), database=None,
                phases=[Phase.explicit, Phase.generate],
                max_examples=int(os.environ.get("SPECGEN_FUZZ_EXAMPLES", 600)),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


def test_whatever_validate_accepts_builds_and_reports() -> None:
    seen: Counter[str] = Counter()

    @FUZZ
    @given(specs())
    def run(spec: dict[str, Any]) -> None:
        seen[outcome(spec)] += 1

    run()
    # The generator must reach build often enough to test something. Measured: 90 of 600 (15.0%) run alone; 88
    # when other modules ran first in the same xdist worker (hypothesis' draws also read process state), so the
    # floor sits at 10%: it fails when most drawn specs stop validating, not on a draw's noise.
    assert seen["built"] >= 0.10 * sum(seen.values()), seen


# --- the cases that escaped: each ended in a traceback in build or report, or in validate --------

HEAD = "specgen: 1\nname: edge\ninputs:\n  x: {shape: [4]}\noutputs:\n  y: out\nlayers:\n"


def refused(layers: str) -> list[str]:
    with pytest.raises(SpecError) as caught:
        load_spec_text(HEAD + layers, "edge.yaml")
    return [str(d) for d in caught.value.diagnostics]


def test_floats_beyond_float32_are_refused_where_they_are_written() -> None:
    assert refused("  - {name: bn, op: batch_norm, epsilon: 1e39}\n  - {name: out, op: rescale, scale: [1, 2, -1e39, 4],"
                   " offset: 3.5e+38}\n") == [
        "edge.yaml:8:41: error: epsilon: received 1e39, expected a float32 value (magnitude at most 3.4028235e+38) "
        "(in layer 'bn')",
        "edge.yaml:9:44: error: scale[2]: received -1e39, expected a float32 value (magnitude at most "
        "3.4028235e+38) (in layer 'out')",
        "edge.yaml:9:63: error: offset: received 3.5e+38, expected a float32 value (magnitude at most 3.4028235e+38) "
        "(in layer 'out')"]


def test_a_bound_must_hold_once_rounded_to_float32() -> None:
    assert refused("  - {name: out, op: batch_norm, epsilon: 1e-50, momentum: 0.9999999999}\n") == [
        "edge.yaml:8:42: error: epsilon: received 1e-50, which is 0.0 in float32 (the precision specgen runs in), "
        "expected a value > 0 (in layer 'out')",
        "edge.yaml:8:59: error: momentum: received 0.9999999999, which is 1.0 in float32 (the precision specgen runs "
        "in), expected a value < 1 (in layer 'out')"]


def test_float32_extremes_validate_build_and_report() -> None:
    """The largest and smallest float32 values are accepted, and then build: the ONNX parser reads them back."""
    assert outcome(yaml.safe_load(HEAD + (
        "  - {name: bn, op: batch_norm, epsilon: 1.401298464324817e-45, momentum: 0.99999994}\n"
        "  - {name: r, op: rescale, scale: 3.4028234663852886e+38, offset: -3.4028234663852886e+38}\n"
        "  - {name: out, op: dense, units: 1, kernel_init: {kind: constant, value: 3.4028234663852886e+38}}\n"))) \
        == "built"


def test_a_huge_constant_init_is_a_warning_not_a_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """1e200 squared overflowed the lint (validate and report crashed). Within float32, 3e38 over a fan-in
    of 4 still overflows float32 at initialization: the lint names that layer, report's column says inf
    for it and every layer after it (where float64 arithmetic would overflow a few layers later)."""
    layers = "".join(f"  - {{name: d{i}, op: dense, units: 4, kernel_init: {{kind: constant, value: 3e+38}}}}\n"
                     for i in range(12))
    path = tmp_path / "huge.yaml"
    path.write_text(HEAD.replace("y: out", "y: d11") + layers)
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"{path}:8:50: warning: layer 'd0' (dense): at initialization the activation std grows past float32's "
        "range (over 3.4e+38x the input's) (outside [0.1, 10]; unit-variance inputs assumed, see docs/spec.md#lints); "
        "kernel_init constant (value 3e+38) over fan-in 4 scales the second moment by 3.6e+77; glorot_uniform keeps "
        "it near 1", "1 warning (--strict makes them errors)"]
    assert main(["report", str(path)]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("d")]
    assert {row[-1] for row in rows if row[1] == "dense"} == {"inf"} and len(rows) == 36  # 24 variables, 12 layers


def _numbers(node: Any, where: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every `"type": "number"` node of the schema, with its path."""
    found = [(where, node)] if isinstance(node, dict) and node.get("type") == "number" else []
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, child in children:
        found += _numbers(child, f"{where}/{key}")
    return found


def test_every_float_of_the_schema_is_bounded_to_float32() -> None:
    """The class, in the published schema: a float field added without fields/base.py's `number` (a plain
    `float`) has no bound here, and fails this (the fuzz test above would find it only by chance)."""
    numbers = _numbers(SCHEMA)
    assert len(numbers) > 50  # the float fields of every op and section: the walk found them
    for where, node in numbers:
        low = node.get("minimum", node.get("exclusiveMinimum"))
        high = node.get("maximum", node.get("exclusiveMaximum"))
        assert low is not None and high is not None and -FLOAT32_BOUND <= low < high <= FLOAT32_BOUND, (where, node)
