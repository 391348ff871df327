"""The pictures say what the commands that compute the same facts say (rt12, data findings 1 and 6).

`specgen graph`'s `restore` marks follow `specgen restore-plan`'s rule (a key no map entry matches keeps its
name), checked against restore-plan's own table on a real checkpoint; restore sources and `specgen curves`
runs that share a folder name are told apart by their paths; a run folder named twice is drawn once.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from specgen.cli import main
from specgen.ir.resolve import ir_from_file
from specgen.pictures.graph import render

SPEC = """\
specgen: 1
name: marks
inputs:
  x: {shape: [2]}
outputs:
  logits: sum
layers:
  - {name: a, op: dense, units: 3, input: x}
  - {name: out, op: dense, units: 3, input: x}
  - {name: c, op: dense, units: 3, input: x}
  - {name: d, op: dense, units: 3, input: x}
  - {name: e, op: dense, units: 3, input: x}
  - {name: sum, op: add, inputs: [a, out, c, d, e]}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers:
  all: {variables: ["*"], kind: sgd, learning_rate: 0.01}
checkpoint:
  dir: runs/marks
  restore:
RESTORE"""
# out/kernel goes to a/kernel, and out/bias (no entry matches it) keeps its name; d/* moves to e/*; c/* is excluded.
MAPPED = """\
    - from: src/run/ckpt
      exclude: ["c/*"]
      map:
        - {from: out/kernel, to: a/kernel}
        - {strip_prefix: d/, add_prefix: e/}
"""
KEYS = ["a/bias", "out/kernel", "out/bias", "c/kernel", "c/bias", "d/kernel", "d/bias"]


def marks(mermaid: str) -> dict[str, list[str]]:
    """Layer -> the restore sources its box names, read from the Mermaid text of `specgen graph`."""
    boxes = re.findall(r'^\s*n\d+\["([^<"]+)<br/>[^<"]*<br/>([^"]*)"\]', mermaid, re.M)
    return {name: [f.removeprefix("restore ") for f in facts.split(", ") if f.startswith("restore ")]
            for name, facts in boxes}


def plan_rows(table: str) -> dict[str, str]:
    """Variable -> status, read from `specgen restore-plan`'s table."""
    lines = table.split("\n\n")[0].splitlines()[2:]
    return {line.split()[0]: line.split()[1] for line in lines}


def test_graph_marks_what_restore_plan_restores(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tensorflow")
    from test_restore import save_tf1

    monkeypatch.chdir(tmp_path)
    save_tf1(tmp_path / "src" / "run" / "ckpt", {k: np.zeros((2, 3) if k.endswith("kernel") else (3,), np.float32)
                                                 for k in KEYS})
    (tmp_path / "spec.yaml").write_text(SPEC.replace("RESTORE", MAPPED))
    assert main(["restore-plan", "spec.yaml"]) == 0
    rows = plan_rows(capsys.readouterr().out)
    assert rows == {"a/kernel": "restored", "a/bias": "restored", "out/kernel": "initialized",
                    "out/bias": "restored", "c/kernel": "initialized", "c/bias": "initialized",
                    "d/kernel": "initialized", "d/bias": "initialized", "e/kernel": "restored", "e/bias": "restored"}
    assert main(["graph", "spec.yaml", "--format", "mermaid"]) == 0
    drawn = marks(capsys.readouterr().out)
    restored = {path.split("/")[0] for path, status in rows.items() if status == "restored"}
    assert {layer for layer, sources in drawn.items() if sources} == restored == {"a", "out", "e"}
    assert drawn["out"] == ["ckpt"]


def test_restore_sources_sharing_a_folder_name_are_told_apart(tmp_path: Path) -> None:
    two = ("    - {from: a/run, map: [{strip_prefix: d/, add_prefix: e/}]}\n"
           "    - {from: b/run, exclude: [\"d/*\"]}\n"
           "    - {from: b/run, map: [{from: x/kernel, to: c/kernel}]}\n")
    (tmp_path / "spec.yaml").write_text(SPEC.replace("RESTORE", two))
    drawn = marks(render(ir_from_file(tmp_path / "spec.yaml"), "mermaid"))
    # b/run is read by two entries: one mark; a/run moves d's keys to e, the first b/run entry excludes d, the
    # second restores it.
    assert drawn == {"a": ["a/run", "b/run"], "out": ["a/run", "b/run"], "c": ["a/run", "b/run"],
                     "d": ["b/run"], "e": ["a/run", "b/run"], "sum": []}


# ---- specgen curves --------------------------------------------------------------------------------------------

def legend(svg: str) -> list[str]:
    """The legend entries and titles matplotlib writes as comments, in the order drawn."""
    return re.findall(r"<!-- (.*?) -->", svg)


@pytest.fixture
def twins(tmp_path: Path) -> Path:
    pytest.importorskip("tensorboard")
    pytest.importorskip("matplotlib")
    from test_curves import write_events

    for parent, shift in (("a", 0.0), ("b", 0.5)):
        write_events(tmp_path / parent / "run", "train", [1, 2], {"loss": [1.0 + shift, 0.5 + shift]})
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "other").symlink_to(tmp_path / "a" / "run")  # a second path to a/run
    return tmp_path


def test_curves_labels_runs_sharing_a_folder_name_by_their_paths(twins: Path, capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(twins)
    assert main(["curves", "a/run", "b/run", "-o", "two.svg"]) == 0
    assert capsys.readouterr().out == "wrote two.svg (svg: 1 scalar of 2 runs)\n"
    first = (twins / "two.svg").read_bytes()
    words = [w for w in legend(first.decode()) if ":" in w]
    assert words == ["a/run: train", "b/run: train"]
    assert main(["curves", "a/run", "b/run", "-o", "again.svg"]) == 0
    assert (twins / "again.svg").read_bytes() == first


def test_curves_draws_a_run_named_twice_once(twins: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(twins)
    assert main(["curves", "a/run", "a/run", "-o", "one.svg"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "a/run: note: named 2 times; read and drawn once\n"
    assert captured.out == "wrote one.svg (svg: 1 scalar of 1 run)\n"
    assert main(["curves", "a/run", "-o", "alone.svg"]) == 0
    assert (twins / "one.svg").read_bytes() == (twins / "alone.svg").read_bytes()
    capsys.readouterr()
    assert main(["curves", "a/run", "b/run", "c/other", "./a/run", "-o", "three.svg"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "a/run: note: named 3 times (also as c/other); read and drawn once\n"
    assert captured.out == "wrote three.svg (svg: 1 scalar of 2 runs)\n"
    assert [w for w in legend((twins / "three.svg").read_text()) if ":" in w] == ["a/run: train", "b/run: train"]
