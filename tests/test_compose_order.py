"""`extends` lists apply their files in one order, each once (C3), and `explain` keeps every place: spec/compose.py,
spec/merge.py, spec/provenance.py. Red-team findings 1 and 5-9 of the compose review."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from types import FrameType

from cli_helpers import run_cli as run
from test_compose import BASE, write

from specgen.spec import merge as merge_module
from specgen.spec.compose import load_composed
from specgen.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[1]
FAMILY = ROOT / "examples" / "specs" / "family"


def _dump(path: Path) -> dict:
    spec = load_spec(path).spec.model_dump(mode="json")
    return {k: v for k, v in spec.items() if k not in ("name", "checkpoint")}


def test_a_list_of_variants_sharing_a_base_keeps_each_variants_changes(tmp_path: Path) -> None:
    """`extends: [wide, bf16]`, both `extends: base.yaml`: bf16's copy of the base once wrote 16 / 64 / 0.001 back
    over wide's 32 / 128 / 0.002. The result equals the spec a user writes by hand: bf16's keys over wide."""
    folder = tmp_path / "family"
    write(tmp_path, {})
    shutil.copytree(FAMILY, folder)
    (folder / "wide_bf16.yaml").write_text("extends: [wide.yaml, bf16.yaml]\nname: wb\n")
    (folder / "by_hand.yaml").write_text((folder / "bf16.yaml").read_text().replace("extends: base.yaml",
                                                                                     "extends: wide.yaml"))
    spec = load_spec(folder / "wide_bf16.yaml").spec
    by_name = {layer.name: layer for layer in spec.layers}
    assert (by_name["conv1"].filters, by_name["head/fc"].units) == (32, 128)
    assert spec.optimizers["head"].learning_rate == 0.002 and "bfloat16" in str(spec.train.precision)
    assert list(by_name) == ["conv1", "bn1", "relu1", "pool1", "flat", "head/fc", "head/fc2", "head/out"]
    assert _dump(folder / "wide_bf16.yaml") == _dump(folder / "by_hand.yaml")


DIAMOND = {"d.yaml": BASE.replace("abstract: true\n", ""),
           "c.yaml": "abstract: true\nextends: d.yaml\nlayers: [{name: fc2, units: 5}]\n",
           "b.yaml": "abstract: true\nextends: d.yaml\ntrain: {seed: 9}\n",
           "a2.yaml": "extends: [c.yaml, b.yaml]\nname: a2\n"}


def test_a_diamond_applies_the_shared_base_once_before_both(tmp_path: Path, capsys) -> None:
    write(tmp_path, DIAMOND)
    spec = load_spec(tmp_path / "a2.yaml").spec
    assert (spec.layers[1].units, spec.train.seed) == (5, 9)  # c's units (d's 8 once reverted them) and b's seed
    code, out, _ = run(["explain", "a2.yaml", "layers[fc2].units"], capsys, tmp_path)
    assert (code, out.splitlines()) == (0, ["layers[fc2].units = 5", "  1. d.yaml:8:35  8", "  2. c.yaml:3:29  5  <- wins"])


def test_lists_that_order_two_bases_both_ways_are_one_positioned_line(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"x.yaml": BASE, "y.yaml": "abstract: true\ntrain: {seed: 1}\n",
                     "p.yaml": "abstract: true\nextends: [x.yaml, y.yaml]\n",
                     "q.yaml": "abstract: true\nextends: [y.yaml, x.yaml]\n",
                     "v.yaml": "extends: [p.yaml, q.yaml]\nname: v\n"})
    code, out, err = run(["validate", "v.yaml"], capsys, tmp_path)
    assert (code, out) == (1, "")
    assert err.splitlines() == ["v.yaml:1:10: error: extends: no order of the bases applies each file after its own "
                                "bases and keeps every `extends` list's order: 'x.yaml', 'y.yaml' are listed in "
                                "conflicting orders; list them in one order everywhere", "1 error found"]


def test_explain_lists_every_place_that_set_a_list_with_its_value(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"base.yaml": BASE, "v.yaml": "extends: base.yaml\nname: v\ntrain: {metrics: [accuracy, mean_loss]}\n"})
    code, out, _ = run(["explain", "v.yaml", "train.metrics", "--set", "train.metrics=[mean_loss]"], capsys, tmp_path)
    assert (code, out.splitlines()) == (0, ["train.metrics = [mean_loss]", "  1. base.yaml:14:44  [accuracy]",
                                            "  2. v.yaml:3:18  [accuracy, mean_loss]",
                                            "  3. --set train.metrics  [mean_loss]  <- wins"])


def test_a_base_listed_again_through_a_link_is_refused_as_a_duplicate(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"base.yaml": BASE, "v.yaml": "extends: [base.yaml, link.yaml]\nname: v\n"})
    (tmp_path / "link.yaml").symlink_to("base.yaml")
    code, _, err = run(["validate", "v.yaml"], capsys, tmp_path)
    assert (code, err.splitlines()) == (1, ["v.yaml:1:22: error: extends: 'link.yaml' is the same file as 'base.yaml' "
                                            "(at v.yaml:1:11); each base applies once: list it once", "1 error found"])


def test_a_received_container_is_quoted_as_yaml_flow_not_as_python(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"base.yaml": BASE, "m.yaml": "extends: {a: b}\nname: x\n",
                     "l.yaml": "extends: base.yaml\nname: v\nlayers: {h1: {units: 3, act: null}}\n"})
    assert run(["validate", "m.yaml"], capsys, tmp_path)[2].splitlines()[0] == (
        "m.yaml:1:10: error: extends: expected a spec file (a path relative to this file) or a list of them; "
        "received {a: b} (a mapping)")
    assert run(["validate", "l.yaml"], capsys, tmp_path)[2].splitlines()[0] == (
        "l.yaml:3:9: error: layers: expected a list, received {h1: {units: 3, act: null}} (a mapping)")


def test_explain_of_a_removed_layer_an_unset_activation_and_a_set_null(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"base.yaml": BASE, "rm.yaml": "extends: base.yaml\nname: v\nlayers:\n  - {name: fc2, remove: true}\n"
                     "  - {name: fc1b, op: dense, units: 8, after: fc1}\n",
                     "act.yaml": "extends: base.yaml\nname: v\nlayers: [{name: fc1, activation: null}]\n"})
    code, out, _ = run(["explain", "rm.yaml", "layers[fc2].units"], capsys, tmp_path)
    assert (code, out.splitlines()) == (0, ["layers[fc2].units = (unset: the item was removed at rm.yaml:4:25)",
                                            "  1. base.yaml:9:35  8", "  2. rm.yaml:4:25  remove: true (removes the item)"])
    code, out, _ = run(["explain", "act.yaml", "layers[fc1].activation"], capsys, tmp_path)
    assert (code, out.splitlines()) == (0, ["layers[fc1].activation = linear", "  1. base.yaml:8:60  relu",
                                            "  2. act.yaml:3:34  null (removes the bases' value)",
                                            "  3. default  linear (no activation)  <- wins"])
    code, out, _ = run(["explain", "act.yaml", "train.seed", "--set", "train.seed=null"], capsys, tmp_path)
    assert (code, out.splitlines()) == (0, ["train.seed = 0", "  1. base.yaml:14:62  0",
                                            "  2. --set train.seed  null (removes the bases' value)",
                                            "  3. default  0  <- wins"])
    assert run(["validate", "act.yaml", "--set", "train.seed=null"], capsys, tmp_path)[0] == 0  # once "expected an
    # integer, received null", where `seed: null` in a file removes the value



def test_explain_of_a_key_the_schema_leaves_unset_that_no_file_wrote(tmp_path: Path, capsys) -> None:
    """A dense layer without an activation, the loss's name, a layer's input: keys whose default is null are left out
    of the resolved spec, and explain once answered "no key ... did you mean" for them (pointing at another layer)."""
    write(tmp_path, {"base.yaml": BASE, "v.yaml": "extends: base.yaml\nname: v\n"})
    code, out, _ = run(["explain", "v.yaml", "layers[out].activation"], capsys, tmp_path)
    assert (code, out.splitlines()) == (0, ["layers[out].activation = linear", "  1. default  null: linear  <- wins"])
    code, out, _ = run(["explain", "v.yaml", "layers[fc2].input"], capsys, tmp_path)
    assert (code, out.splitlines()) == (0, [
        "layers[fc2].input = fc1 (the layer before it)", "  1. default  null: fc1 (the layer before it)  <- wins"])
    code, out, _ = run(["explain", "v.yaml", "loss.name"], capsys, tmp_path)
    assert (code, out.splitlines()) == (0, ["loss.name = null (unset)", "  1. default  null  <- wins"])
    code, _, err = run(["explain", "v.yaml", "layers[out].activaton"], capsys, tmp_path)  # a misspelt key still is one
    assert (code, err.splitlines()[0]) == (1, "v.yaml: error: no key 'layers[out].activaton' in the resolved spec; "
                                              "did you mean 'layers[out].activation'?")

def _layers(n: int) -> str:
    return "".join(f"  - {{name: z{i}, op: relu, before: out}}\n" for i in range(n))


def _merge_calls(tmp_path: Path, n: int) -> int:
    """Python function calls inside spec/merge.py while composing a variant that adds `n` layers."""
    write(tmp_path, {"base.yaml": BASE, f"v{n}.yaml": f"extends: base.yaml\nname: v\nlayers:\n{_layers(n)}"})
    calls = 0
    code = merge_module.__file__

    def count(frame: FrameType, event: str, _arg: object) -> None:
        nonlocal calls
        if event == "call" and frame.f_code.co_filename == code:
            calls += 1

    sys.setprofile(count)
    try:
        data, _ = load_composed(tmp_path / f"v{n}.yaml")
    finally:
        sys.setprofile(None)
    assert len(data["layers"]) == n + 3
    return calls


def test_a_named_list_merges_in_linear_work_and_too_many_layers_are_refused(tmp_path: Path, capsys) -> None:
    """Counted, not timed: 4x the items costs about 4x the calls (each item once rebuilt the list of names: the
    calls grew 16x, and 16,000 items took a minute)."""
    small, large = _merge_calls(tmp_path, 500), _merge_calls(tmp_path, 2000)
    assert large < 5 * small, (small, large)
    flat = BASE.replace("  - {name: out,", "".join(f"  - {{name: z{i}, op: relu}}\n" for i in range(16_000))
                        + "  - {name: out,")
    write(tmp_path, {"flat.yaml": flat.replace("abstract: true\n", "name: flat\n"),
                     "big.yaml": f"extends: base.yaml\nname: v\nlayers:\n{_layers(16_000)}"})
    for spec, line in (("flat.yaml", "10008:5"), ("big.yaml", "10002:5")):
        code, out, err = run(["validate", spec], capsys, tmp_path)
        assert (code, out) == (1, "")
        assert err.splitlines()[0].startswith(f"{spec}:{line}: error: layers: 16003 layers; a spec holds at most "
                                              "10000"), err
