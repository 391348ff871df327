"""What `specgen report` claims, checked against what it would print for fixed sizes:

- with named dynamic dimensions, each FLOPs cell (a per-position figure times the named sizes of the row's output,
  or an exact formula) and the total equal the report of the same spec with those sizes fixed, at two sizes each
  (old: attention, quadratic in the length, was printed per position and the note said "multiply by the size");
- `--checkpoint` of another spec's run says whose masks it read (old: silently);
- `--html` with `--checkpoint` is a usage error (old: ignored, even a path that does not exist).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from specgen.cli import main

ATTENTION = """\
inputs:
  x: {shape: [SEQ, 8]}
outputs:
  y: head
layers:
  - {name: att, op: multi_head_attention, input: x, num_heads: 2, key_dim: 4}
  - {name: ln, op: layer_norm}
  - {name: head, op: dense, units: 3}
"""
CROSS = """\
inputs:
  text: {shape: [SEQ, 16]}
  memory: {shape: [MEM, 12]}
  allowed: {shape: [SEQ, MEM]}
outputs:
  y: head
layers:
  - {name: self_att, op: multi_head_attention, input: text, num_heads: 4, key_dim: 8, causal: true,
     rotary: {max_wavelength: 10000}}
  - {name: cross_att, op: multi_head_attention, inputs: [self_att, memory], attention_mask: allowed,
     num_heads: 4, key_dim: 8}
  - {name: head, op: dense, units: 3}
"""
RECURRENT = """\
inputs:
  x: {shape: [SEQ, 6]}
outputs:
  y: head
layers:
  - {name: down, op: conv1d, input: x, filters: 8, kernel: 3, strides: 2, padding: same, activation: relu}
  - {name: bi, op: bidirectional, layer: {op: gru, units: 5, return_sequences: true}, merge_mode: ave}
  - {name: last, op: bidirectional, layer: {op: lstm, units: 4}, merge_mode: sum}
  - {name: skip, op: global_avg_pool, input: down}
  - {name: both, op: concat, inputs: [last, skip]}  # 'last' and 'down' frozen: backward 1x, the others 2x
  - {name: head, op: dense, units: 2}
loss: {kind: sparse_softmax_cross_entropy, logits: y, labels: label}
optimizers: {a: {kind: sgd, learning_rate: 0.1, variables: ["bi/*", "head/*"]}}
frozen: ["down/*", "last/*"]
"""
IMAGE = """\
inputs:
  x: {shape: [HEIGHT, WIDTH, 3]}
outputs:
  y: head
layers:
  - {name: c1, op: conv2d, input: x, filters: 4, kernel: 3, strides: 2, padding: same, activation: relu}
  - {name: c2, op: conv2d, filters: 6, kernel: 3, padding: valid}
  - {name: pool, op: global_avg_pool}
  - {name: head, op: dense, units: 2}
"""
# (template, {placeholder: name}, two fixed sizes for each name)
CASES = {
    "self_attention": (ATTENTION, {"SEQ": "seq"}, [{"seq": 20}, {"seq": 7}]),
    "cross_attention": (CROSS, {"SEQ": "seq", "MEM": "mem"}, [{"seq": 6, "mem": 11}, {"seq": 13, "mem": 4}]),
    "recurrent_and_pool": (RECURRENT, {"SEQ": "seq"}, [{"seq": 9}, {"seq": 16}]),
    "image": (IMAGE, {"HEIGHT": "height", "WIDTH": "width"}, [{"height": 9, "width": 12}, {"height": 16, "width": 7}]),
}


def _spec(tmp_path: Path, template: str, names: dict[str, str], sizes: dict[str, int] | None) -> Path:
    text = template
    for placeholder, name in names.items():
        text = text.replace(placeholder, str(sizes[name]) if sizes else name)
    tag = "_".join(f"{n}{v}" for n, v in sizes.items()) if sizes else "named"
    path = tmp_path / f"{tag}.yaml"
    path.write_text(f"specgen: 1\nname: s_{tag}\n{text}")
    return path


def _flops_rows(capsys: pytest.CaptureFixture[str], spec: Path) -> tuple[dict[str, list[str]], str]:
    """layer -> [output, forward, backward] of the FLOPs table (the total row too), and the note under it."""
    assert main(["report", str(spec)]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("layer ") and "forward FLOPs" in line)
    rows: dict[str, list[str]] = {}
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("total "))
    for line in lines[start + 2:end + 1]:
        cells = re.split(r"\s{2,}", line.strip())
        rows[cells[0]] = ["", cells[2], cells[3]] if cells[0] == "total" else [cells[2], cells[4], cells[5]]
    end += 1
    while not lines[end].startswith("FLOPs are per example"):  # long formulas: 'name: forward FLOPs F; backward (est.) B'
        found = re.fullmatch(r"(\S+): forward FLOPs (.+); backward \(est\.\) (.+)", lines[end])
        assert found and rows[found[1]][1:] == ["below", "below"], lines[end]
        rows[found[1]][1:] = [found[2], found[3]]
        end += 1
    return rows, lines[end]


def _value(cell: str, output: str, sizes: dict[str, int]) -> int:
    """A cell's count at `sizes`: a formula evaluated; a plain figure is per position of the output's named
    dimensions (the note's claim), so times their sizes."""
    scope = {"ceil": math.ceil, **sizes}
    if re.search(r"[a-z]", cell):
        return int(eval(cell.replace(",", "").replace("^", "**"), {"__builtins__": {}}, scope))
    named = [d for d in output.strip("[]").split(", ")[1:] if re.search(r"[a-z]", d)]
    return int(cell.replace(",", "")) * math.prod(int(eval(d, {"__builtins__": {}}, scope)) for d in named)


@pytest.mark.parametrize("case", sorted(CASES))
def test_flops_cells_equal_the_fixed_size_report(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    template, names, settings = CASES[case]
    named, note = _flops_rows(capsys, _spec(tmp_path, template, names, None))
    assert "multiply by the run-time size." not in note
    claim, _, served = note.partition(" Served sizes: ")  # valid windows' smallest sizes follow (test_review_r12)
    assert claim.endswith("is a formula in them (a long one under the table), as is the total.")
    assert all(int(sizes[name]) >= int(low) for sizes in settings
               for name, low in re.findall(r"(\w+) >= (\d+)", served)), served  # the sizes below are served
    for sizes in settings:
        fixed, _ = _flops_rows(capsys, _spec(tmp_path, template, names, sizes))
        assert named.keys() == fixed.keys()
        for layer, (output, forward, backward) in named.items():
            shown = [_value(cell, output, sizes) for cell in (forward, backward)]
            assert shown == [int(fixed[layer][1].replace(",", "")), int(fixed[layer][2].replace(",", ""))], (
                layer, forward, sizes)


def test_attention_prints_its_quadratic_formula(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Closed form (docs/spec.md, multi_head_attention): h=2, k=v=4, d=8, T=S=seq: projections 2*2*(3*8*4)+2*2*4*8
    = 512 per step, scores 2*(8+5+8) = 42 per pair, scale 8, biases 2*12+8 = 32: 552*seq + 42*seq^2."""
    named, _ = _flops_rows(capsys, _spec(tmp_path, ATTENTION, {"SEQ": "seq"}, None))
    assert named["att"][1:] == ["552*seq + 42*seq^2"] * 2
    assert named["ln"][1:] == ["64"] * 2  # per position of [seq, 8]: a plain figure
    assert named["head"][1:] == ["51"] * 2  # 3 * (2 * 8 + 1) per position
    assert named["total"][1:] == ["667*seq + 42*seq^2"] * 2  # 552 + 64 + 51 per step


def _pruned(path: Path, sparsity: float) -> None:
    name = path.stem
    path.write_text(f"""\
specgen: 1
name: {name}
inputs: {{x: {{shape: [6], dtype: float32}}}}
outputs: {{logits: out}}
layers:
  - {{name: out, op: dense, input: x, units: 3}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers: {{a: {{kind: sgd, learning_rate: 0.1}}}}
train: {{batch_size: 16, epochs: 1, seed: 0}}
prune:
  variables: ["out/kernel"]
  schedule: {{kind: polynomial_decay, initial_sparsity: 0.0, final_sparsity: {sparsity}, begin_step: 0, end_step: 1,
              frequency: 1}}
data: {{train: {{npz: d.npz, features: {{x: x}}, labels: {{label: y}}}}}}
checkpoint: {{dir: run_{name}}}
""")


@pytest.mark.slow
def test_checkpoint_of_another_spec_gets_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    np.savez("d.npz", x=rng.normal(size=(64, 6)).astype("float32"), y=rng.integers(0, 3, 64))
    _pruned(tmp_path / "spec_a.yaml", 0.5)
    _pruned(tmp_path / "spec_b.yaml", 0.9)
    assert main(["train", "spec_b.yaml", "--steps", "2", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["report", "spec_a.yaml", "--checkpoint", "run_spec_b"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    table = next(i for i, line in enumerate(lines) if line.startswith("pruned weight "))
    row = lines[table + 2].split()
    assert row[0] == "out/kernel"
    assert (row[3], row[-1]) == ("0.5000", "0.8889")  # spec_a's plan, spec_b's masks (16 of 18 pruned)
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert notes == ["note: run_spec_b/ckpt-00000002/meta.json: this checkpoint was saved by spec 'spec_b', not "
                     "'spec_a'; the checkpoint sparsity column is that run's masks"]
    assert main(["report", "spec_b.yaml", "--checkpoint", "run_spec_b"]) == 0
    assert "note:" not in capsys.readouterr().err  # its own spec's run: nothing to say


@pytest.mark.parametrize("checkpoint", ["does/not/exist", "."])
def test_html_with_checkpoint_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch, checkpoint: str) -> None:
    monkeypatch.chdir(tmp_path)
    spec = Path(__file__).resolve().parents[1] / "examples" / "specs" / "digits_cnn_pruned.yaml"
    code = main(["report", "--html", "-o", "page.html", str(spec), "--checkpoint", checkpoint])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.splitlines() == ["specgen report: error: --html: got --checkpoint; the page does not show a "
                                "checkpoint's mask sparsity (specgen report SPEC --checkpoint CKPT prints it)"]
    assert not (tmp_path / "page.html").exists()


def test_the_report_says_the_smallest_size_valid_windows_serve(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """conv1d kernel 3 valid (seq-2), then a max_pool1d of 3 stride 3 valid (ceil((seq-4)/3)): seq >= 5, which
    specgen export records and infer/serve enforce (runtime/lengths.py); seq 4 gives TF an empty axis."""
    spec = tmp_path / "spec.yaml"
    spec.write_text("specgen: 1\nname: p\ninputs:\n  x: {shape: [seq, 4]}\noutputs:\n  y: l1\nlayers:\n"
                    "  - {name: l0, op: conv1d, input: x, filters: 2, kernel: 3, padding: valid}\n"
                    "  - {name: l1, op: max_pool1d, size: 3, strides: 3, padding: valid}\n")
    _, note = _flops_rows(capsys, spec)
    assert note.endswith(" Served sizes: seq >= 5 (layer 'l1', max_pool1d); a shorter input is refused.")
    spec.write_text(spec.read_text().replace("padding: valid}\n  - {name: l1", "padding: same}\n  - {name: l1"))
    _, note = _flops_rows(capsys, spec)
    assert note.endswith(" Served sizes: seq >= 3 (layer 'l1', max_pool1d); a shorter input is refused.")
