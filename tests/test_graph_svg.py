"""`specgen graph`'s SVG, parsed: every layer and IR edge drawn once, colours by collection, clusters, --depth."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

from specgen.ir.model import ModelIR
from specgen.ir.resolve import ir_from_file
from specgen.pictures.graph import render_svg

ROOT = Path(__file__).resolve().parents[1]
NS = "{http://www.w3.org/2000/svg}"
SHARED = """specgen: 1
name: siamese
inputs:
  a: {shape: [4]}
  b: {shape: [4]}
outputs:
  score: out
layers:
  - {name: enc/fc, op: dense, units: 3, input: a}
  - {name: enc_b, op: dense, units: 3, share: enc/fc, input: b}
  - {name: both, op: add, inputs: [enc/fc, enc_b, enc_b]}
  - {name: out, op: dense, units: 1}
"""


@pytest.fixture(scope="module")
def irs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ModelIR]:
    shared = tmp_path_factory.mktemp("graph") / "siamese.yaml"
    shared.write_text(SHARED)
    found = {name: ir_from_file(ROOT / "examples" / "specs" / f"{name}.yaml")
             for name in ("digits_cnn", "digits_resnet", "chain_dqn")}
    return {**found, "siamese": ir_from_file(shared)}


def boxes(svg: str) -> dict[str, ET.Element]:
    root = ET.fromstring(svg)
    return {g.get("data-name", ""): g for g in root.iter(f"{NS}g") if "box" in g.get("class", "").split()}


def edges(svg: str, kind: str = "data") -> Counter[tuple[str, str]]:
    root = ET.fromstring(svg)
    return Counter((p.get("data-from", ""), p.get("data-to", "")) for p in root.iter(f"{NS}path")
                   if p.get("class") == f"edge {kind}")


def fill(box: ET.Element) -> str:
    rect = box.find(f"{NS}rect")
    assert rect is not None
    return rect.get("fill", "")


@pytest.mark.parametrize("name", ["digits_cnn", "digits_resnet", "chain_dqn", "siamese"])
def test_every_layer_and_every_ir_edge_is_drawn_once(irs: dict[str, ModelIR], name: str) -> None:
    ir = irs[name]
    svg = render_svg(ir)
    drawn = boxes(svg)
    expected = {i.name for i in ir.inputs} | {n.name for n in ir.nodes} | {f"output:{o}" for o in ir.outputs}
    assert set(drawn) == expected
    # one edge per tensor a layer reads (a layer reading one tensor twice draws it once), one per output
    want = Counter({(s, n.name) for n in ir.nodes for s in n.inputs}) + Counter(
        {(layer, f"output:{o}") for o, layer in ir.outputs.items()})
    assert edges(svg) == want
    assert render_svg(ir) == svg  # byte-identical on a second run


def test_colours_follow_the_collections(irs: dict[str, ModelIR]) -> None:
    drawn = boxes(render_svg(irs["digits_resnet"]))
    assert {n: fill(drawn[n]) for n in ("stem/conv", "stem/bn", "block/conv1", "head", "pool", "image")} == {
        "stem/conv": "#d0d0d0", "stem/bn": "#d0d0d0",  # frozen: collection `stem` is in `frozen`
        "block/conv1": "#cfe2ff", "head": "#cfe2ff",  # trainable
        "pool": "#ffffff", "image": "#d4f4dd"}
    # the frozen stem's batch norm runs in inference mode: no `update` tag; the trained one has it
    assert (drawn["stem/bn"].get("data-tags"), drawn["block/bn"].get("data-tags")) == ("", "update")
    cnn = boxes(render_svg(irs["digits_cnn"]))
    assert cnn["bn1"].get("data-tags") == "update ema" and cnn["conv1"].get("data-tags") == "ema"


def test_labels_show_op_shape_params_optimizer_and_restore(irs: dict[str, ModelIR]) -> None:
    drawn = boxes(render_svg(irs["digits_resnet"]))

    def lines(name: str) -> list[str]:
        return [t.text or "" for t in drawn[name].findall(f"{NS}text")]

    assert lines("stem/conv") == ["stem/conv", "conv2d [batch, 8, 8, 16]", "144 params, restore digits_cnn"]
    # no map entry matches block/conv1's keys, so they keep their names (restore-plan's rule): marked; head/* is excluded
    assert lines("block/conv1") == ["block/conv1", "conv2d+relu [batch, 8, 8, 16]",
                                    "2,320 params, opt block, restore digits_cnn"]
    assert lines("head") == ["head", "dense [batch, 10]", "170 params, opt head"]


def test_target_network_and_shared_layer(irs: dict[str, ModelIR]) -> None:
    drawn = boxes(render_svg(irs["chain_dqn"]))
    assert fill(drawn["target_qnet/hidden"]) == "#e5d4f7" and fill(drawn["qnet/hidden"]) == "#cfe2ff"
    # 32 hidden units x 2 actions + 2 biases
    assert drawn["target_qnet/out"].findall(f"{NS}text")[2].text == "66 params, follows qnet/out"
    svg = render_svg(irs["siamese"])
    assert edges(svg, "share") == Counter({("enc/fc", "enc_b"): 1})
    shared = boxes(svg)["enc_b"]
    assert shared.findall(f"{NS}text")[2].text == "0 params, shares enc/fc"
    assert fill(shared) == fill(boxes(svg)["enc/fc"])  # the owner's weights, the owner's colour


def _rect(g: ET.Element) -> tuple[float, float, float, float]:
    r = g.find(f"{NS}rect")
    assert r is not None
    x, y = float(r.get("x", "")), float(r.get("y", ""))
    return x, y, x + float(r.get("width", "")), y + float(r.get("height", ""))


def _inside(point: tuple[float, float], polygon: list[tuple[float, float]]) -> bool:
    """Even-odd ray casting (the outlines are rectilinear; no point of a box lies on one)."""
    x, y = point
    hits = 0
    for (x0, y0), (x1, y1) in zip(polygon, polygon[1:] + polygon[:1], strict=True):
        if (y0 > y) != (y1 > y) and x < x0 + (y - y0) * (x1 - x0) / (y1 - y0):
            hits += 1
    return hits % 2 == 1


def _corners(box: ET.Element) -> list[tuple[float, float]]:
    x0, y0, x1, y1 = _rect(box)
    return [(x0, y0), (x1, y0), (x0, y1), (x1, y1), ((x0 + x1) / 2, (y0 + y1) / 2)]


@pytest.mark.parametrize(("spec", "expected"), [("digits_resnet", {"stem", "block"}), ("chain_dqn", {"qnet", "target_qnet"})])
def test_blocks_are_outlined_around_their_layers_only(irs: dict[str, ModelIR], spec: str, expected: set[str]) -> None:
    svg = render_svg(irs[spec])
    outlines = {}
    for g in ET.fromstring(svg).iter(f"{NS}g"):
        if g.get("class") == "cluster":
            path = g.find(f"{NS}path")
            assert path is not None
            numbers = [float(n) for n in re.findall(r"-?\d+\.\d", path.get("d", ""))]
            outlines[g.get("data-path")] = list(zip(numbers[::2], numbers[1::2], strict=True))
    assert set(outlines) == expected
    for name, box in boxes(svg).items():
        inside = sorted(c for c, polygon in outlines.items() if any(_inside(p, polygon) for p in _corners(box)))
        assert inside == ([name.split("/")[0]] if "/" in name else []), name  # members wholly, others not at all
        for c in inside:
            assert all(_inside(p, outlines[c]) for p in _corners(box)), (name, c)


def test_depth_collapses_blocks(irs: dict[str, ModelIR]) -> None:
    svg = render_svg(irs["digits_resnet"], depth=0)
    drawn = boxes(svg)
    assert set(drawn) == {"image", "stem", "block", "pool", "head", "probs", "output:logits", "output:probabilities"}
    assert [t.text for t in drawn["stem"].findall(f"{NS}text")] == ["stem", "block [batch, 8, 8, 16]",
                                                                     "3 layers, 208 params"]
    assert fill(drawn["stem"]) == "#d0d0d0" and fill(drawn["block"]) == "#cfe2ff"
    # stem/relu feeds block/conv1 and block/sum: one edge between the two blocks
    assert edges(svg) == Counter({("image", "stem"): 1, ("stem/relu", "block"): 1, ("block/relu", "pool"): 1,
                                  ("pool", "head"): 1, ("head", "probs"): 1, ("head", "output:logits"): 1,
                                  ("probs", "output:probabilities"): 1})
    assert not [g for g in ET.fromstring(svg).iter(f"{NS}g") if g.get("class") == "cluster"]


def test_no_two_boxes_overlap(irs: dict[str, ModelIR]) -> None:
    rects = [_rect(b) for b in boxes(render_svg(irs["chain_dqn"])).values()]
    overlaps = [(a, b) for i, a in enumerate(rects) for b in rects[i + 1:]
                if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]]
    assert overlaps == []


def test_hostile_names_stay_text(tmp_path: Path) -> None:
    """A restore file name with markup is escaped in each format (the spec refuses control characters);
    a block that shares its name with a layer ('enc' and 'enc/fc') gets a box of its own under --depth 0."""
    from specgen.pictures.graph import render

    name = "pre<t>&\"x'.ckpt"
    spec = tmp_path / "weird.yaml"
    spec.write_text(SHARED.replace("name: siamese", "name: weird").replace("score: out", "score: enc/out") +
                    "  - {name: enc, op: dense, units: 1, input: out}\n  - {name: enc/out, op: dense, units: 1}\n"
                    f"checkpoint:\n  dir: runs/x\n  restore:\n    - {{from: {json.dumps(name)}}}\n")
    ir = ir_from_file(spec)
    label = boxes(render_svg(ir))["out"].findall(f"{NS}text")[2].text
    assert label == f"4 params, restore {name}"
    assert '"out" [label="out\\ndense [batch, 1]\\n4 params, restore pre<t>&amp;\\"x\'.ckpt"' in render(ir, "dot")
    assert "4 params, restore pre#lt;t#gt;#amp;#quot;x'.ckpt\"]:::frozen" in render(ir, "mermaid")
    collapsed = boxes(render_svg(ir, depth=0))
    assert [t.text for t in collapsed["enc/"].findall(f"{NS}text")] == ["enc/", "block [batch, 1]", "2 layers, 17 params"]
    assert [t.text for t in collapsed["enc"].findall(f"{NS}text")] == ["enc", "dense [batch, 1]", f"2 params, restore {name}"]
