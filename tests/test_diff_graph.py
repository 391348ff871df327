"""`specgen diff`: the `layers` section (settings and wiring), layers that move by place, REV:PATH with odd names."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_cli as run
from cli_helpers import run_cli_completed

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"

MLP = """\
specgen: 1
name: mlp
inputs: {x: {shape: [16], dtype: float32}}
outputs: {y: out}
layers:
  - {name: a, op: dense, input: x, units: 16}
  - {name: b, op: dense, units: 16}
  - {name: out, op: dense, units: 4}
"""
# a and b trade names: the graph is the same, the names are not.
SWAPPED = MLP.replace("name: a,", "name: TMP,").replace("name: b,", "name: a,").replace("name: TMP,", "name: b,")


def write(folder: Path, **files: str) -> None:
    for name, text in files.items():
        (folder / name).write_text(text)


def section(out: str, name: str) -> list[str]:
    """The lines of one section of the text output, up to the blank line that ends it."""
    return out.split(f"\n{name}: ", 1)[1].split("\n\n", 1)[0].splitlines()


def test_activations_and_wiring_are_listed_and_break_under_fail_on_layers(tmp_path: Path, capsys) -> None:
    new = MLP.replace("units: 16}", "units: 16, activation: tanh}").replace("{name: out, op: dense,",
                                                                              "{name: out, op: dense, input: a,")
    write(tmp_path, **{"a.yaml": MLP, "b.yaml": new})
    code, out, err = run(["diff", "a.yaml", "b.yaml", "--fail-on", "interface,checkpoint"], capsys, tmp_path)
    assert (code, err) == (0, "")  # clients and checkpoints are fine: those gates keep their meaning
    assert section(out, "layers") == [
        "3 change(s)",
        "  change   what          old     new",
        "  -------  ------------  ------  ----",
        "  changed  a.activation  linear  tanh",
        "  changed  b.activation  linear  tanh",
        "  rewired  out.inputs    b       a",
    ]
    code, _, err = run(["diff", "a.yaml", "b.yaml", "--fail-on", "layers"], capsys, tmp_path)
    assert code == 1
    assert err.splitlines() == [
        "specgen diff: breaks layers: layer 'a': activation changed from linear to tanh",
        "specgen diff: breaks layers: layer 'b': activation changed from linear to tanh",
        "specgen diff: breaks layers: layer 'out' reads a, was b",
    ]
    code, out, _ = run(["diff", "a.yaml", "b.yaml", "--format", "json"], capsys, tmp_path)
    layers = json.loads(out)["sections"]["layers"]
    assert (code, layers["changed"], layers["changes"][2]) == (0, True, {"change": "rewired", "what": "out.inputs",
                                                                         "old": "b", "new": "a"})


def test_a_weightless_layer_added_and_one_removed_and_a_setting_and_an_output(tmp_path: Path, capsys) -> None:
    old = MLP.replace("  - {name: out,", "  - {name: act, op: relu}\n  - {name: out,").replace(
        "outputs: {y: out}", "outputs: {y: out, h: b}")
    new = MLP.replace("  - {name: out,", "  - {name: drop, op: dropout, rate: 0.5}\n  - {name: out,").replace(
        "outputs: {y: out}", "outputs: {y: out, h: a}").replace("units: 4}", "units: 4, use_bias: false}")
    write(tmp_path, **{"a.yaml": old, "b.yaml": new})
    code, out, err = run(["diff", "a.yaml", "b.yaml", "--fail-on", "layers"], capsys, tmp_path)
    assert code == 1 and len(err.splitlines()) == 5
    assert section(out, "layers") == [
        "5 change(s)",
        "  change   what          old   new",
        "  -------  ------------  ----  -------",
        "  added    drop                dropout",
        "  changed  out.use_bias  true  false",
        "  rewired  out.inputs    act   drop",
        "  removed  act           relu",
        "  rewired  output h      b     a",
    ]


def test_an_unchanged_or_only_renamed_model_passes_fail_on_layers(tmp_path: Path, capsys) -> None:
    write(tmp_path, **{"a.yaml": MLP, "b.yaml": MLP.replace("name: a,", "name: first,")})
    code, out, err = run(["diff", "a.yaml", "b.yaml", "--fail-on", "layers"], capsys, tmp_path)
    assert (code, err) == (0, "")
    assert section(out, "layers") == ["1 change(s)", "  change   what   old  new", "  -------  -----  ---  -----",
                                      "  renamed  first  a    first"]


def test_layers_that_swap_names_are_renamed_by_place_and_the_map_restores_each_its_own(tmp_path: Path, capsys) -> None:
    write(tmp_path, **{"a.yaml": MLP, "b.yaml": SWAPPED})
    code, out, err = run(["diff", "a.yaml", "b.yaml", "--map", "--fail-on", "interface,checkpoint,layers"], capsys,
                         tmp_path)
    assert code == 1
    assert "renamed layers: a -> b, b -> a" in out
    assert section(out, "layers")[3:] == ["  renamed  b     a    b", "  renamed  a     b    a"]  # no setting, no wiring
    assert section(out, "checkpoint")[0] == ("a checkpoint of OLD restored into NEW: restored 6 (4 of them from another "
                                             "layer), initialized 0, unused weights 0, mismatched 0")
    assert "  crossed  a/kernel       OLD's 'a/kernel' is 'b/kernel' here: needs a map entry" in out
    assert "  with the map of `specgen diff --map`: restored 6, initialized 0, unused weights 0, mismatched 0" in out
    assert out.split("# checkpoint map:")[1].splitlines()[1:] == [
        "checkpoint:", "  restore:", "  - from: OLD_CHECKPOINT", "    map:",
        "    - {from: a/kernel, to: b/kernel}", "    - {from: a/bias, to: b/bias}",
        "    - {from: b/kernel, to: a/kernel}", "    - {from: b/bias, to: a/bias}",
    ]
    assert err.splitlines()[0] == ("specgen diff: breaks checkpoint: 'a/bias' would be restored from OLD's 'a/bias', "
                                   "which is 'b/bias' here (layers moved); `specgen diff --map` prints the checkpoint "
                                   "map that restores each layer's own weights")
    assert len(err.splitlines()) == 4  # the checkpoint's four; a swap computes what OLD did: layers does not break
    restore = out.split("# checkpoint map:")[1].split("\n", 1)[1].replace("OLD_CHECKPOINT", "runs/old")
    write(tmp_path, **{"c.yaml": SWAPPED + restore.replace("checkpoint:\n", "checkpoint:\n  dir: runs/new\n")})
    code, out, err = run(["diff", "a.yaml", "c.yaml", "--map", "--fail-on", "checkpoint"], capsys, tmp_path)
    assert (code, err) == (0, "")  # the declared map sends each layer's weights to its place: nothing crosses
    assert "checkpoint: a checkpoint of OLD restored into NEW: restored 6, initialized 0, unused weights 0, mismatched 0" in out


def test_a_chain_shifted_by_one_is_renamed_by_place_and_an_inserted_layer_is_not(tmp_path: Path, capsys) -> None:
    shifted = MLP.replace("name: b,", "name: c,").replace("name: a,", "name: b,")  # a, b -> b, c: b keeps its name
    inserted = MLP.replace("  - {name: b,", "  - {name: n, op: dense, units: 16}\n  - {name: b,")
    write(tmp_path, **{"a.yaml": MLP, "b.yaml": shifted, "c.yaml": inserted})
    code, out, err = run(["diff", "a.yaml", "b.yaml", "--fail-on", "checkpoint"], capsys, tmp_path)
    assert code == 1 and "renamed layers: a -> b, b -> c" in out
    assert "  crossed      b/kernel            OLD's 'b/kernel' is 'c/kernel' here: needs a map entry" in out
    assert len(err.splitlines()) == 4  # c's two initialized, b's two crossed
    code, out, _ = run(["diff", "a.yaml", "c.yaml", "--fail-on", "checkpoint"], capsys, tmp_path)
    assert code == 0 and "renamed layers" not in out  # n is new; b keeps its own weights and now reads n
    assert section(out, "layers")[3:] == ["  added    n              dense", "  rewired  b.inputs  a    n"]


PARALLEL = """\
specgen: 1
name: par
inputs: {x1: {shape: [16], dtype: float32}, x2: {shape: [16], dtype: float32}}
outputs: {y: cat}
layers:
  - {name: a, op: dense, input: x1, units: 16}
  - {name: b, op: dense, input: x2, units: 16}
  - {name: cat, op: concat, inputs: [a, b]}
"""


def test_parallel_layers_that_swap_inputs_are_rewired_not_renamed(tmp_path: Path, capsys) -> None:
    """Only `input:` changed: their reader still reads [a, b], so the names stand (the place in the graph matched
    the swapped names, one misfit against two, and a reader that moved nothing outvoted two edits)."""
    inputs_swapped = PARALLEL.replace("input: x1,", "input: TMP,").replace("input: x2,", "input: x1,") \
        .replace("input: TMP,", "input: x2,")
    names_swapped = PARALLEL.replace("name: a,", "name: TMP,").replace("name: b,", "name: a,") \
        .replace("name: TMP,", "name: b,").replace("inputs: [a, b]", "inputs: [b, a]")
    write(tmp_path, **{"a.yaml": PARALLEL, "b.yaml": inputs_swapped, "c.yaml": names_swapped})
    code, out, err = run(["diff", "a.yaml", "b.yaml", "--fail-on", "checkpoint,layers"], capsys, tmp_path)
    assert code == 1 and "renamed layers" not in out
    assert section(out, "layers")[3:] == ["  rewired  a.inputs  x1   x2", "  rewired  b.inputs  x2   x1"]
    assert err.splitlines() == ["specgen diff: breaks layers: layer 'a' reads x2, was x1",
                                "specgen diff: breaks layers: layer 'b' reads x1, was x2"]
    code, out, _ = run(["diff", "a.yaml", "c.yaml", "--fail-on", "layers"], capsys, tmp_path)
    assert code == 0 and "renamed layers: a -> b, b -> a" in out  # the reader moved with the names: a rename


def test_rev_path_reads_each_file_whatever_the_names_of_the_others(tmp_path: Path, capsys) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True,
                       env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                            "GIT_COMMITTER_EMAIL": "t@t"})

    git("init", "-q")
    other = MLP.replace("name: mlp", "name: other").replace("units: 4", "units: 7")
    # A name with a newline sorts first in the tree: each later request would have been shifted by one.
    write(tmp_path, **{"a\nb.yaml": MLP.replace("name: mlp", "name: newline"), "m.yaml": MLP, "other.yaml": other})
    (tmp_path / "link.yaml").symlink_to("m.yaml")
    git("add", ".")
    git("commit", "-qm", "one")
    for name, spec in (("m.yaml", "mlp"), ("other.yaml", "other"), ("a\nb.yaml", "newline")):
        code, out, err = run(["diff", f"HEAD:{name}", name, "--fail-on", "interface,checkpoint,layers"], capsys, tmp_path)
        assert (code, err) == (0, "")
        assert out.startswith(f"specgen diff: OLD HEAD:{name} ({spec}) -> NEW {name} ({spec})\n")
        assert [line for line in out.splitlines() if line.endswith("unchanged")] == [
            "interface: unchanged", "layers: unchanged", "variables: unchanged", "training: unchanged",
            "export: unchanged", "other: unchanged"]
    code, _, err = run(["diff", "HEAD:link.yaml", "m.yaml"], capsys, tmp_path)  # a link is not a spec file
    assert code == 1 and err.startswith("HEAD:link.yaml: error: 'link.yaml' is a symbolic link in HEAD (")
    assert err.splitlines()[0].endswith(", to m.yaml); REV:PATH reads a regular spec file of the revision: name the "
                                        "file it links to, HEAD:m.yaml")


def test_rev_path_refuses_specs_above_the_byte_bound_before_reading_them(tmp_path: Path, capsys,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound on a revision's spec bytes is checked on the tree's sizes, before `git cat-file` reads any blob
    (it was checked on what cat-file had already read into memory). The bound lowered to fit a small test."""
    from specgen.review import sides

    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    write(tmp_path, **{"m.yaml": MLP, "big.yaml": MLP + "# " + "x" * 4000 + "\n"})
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "add", "."], cwd=tmp_path, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "one"], cwd=tmp_path, check=True, env=env)
    monkeypatch.setattr(sides, "MAX_GIT_BYTES", 4000)
    read: list[list[str]] = []
    real_git = sides._git
    monkeypatch.setattr(sides, "_git", lambda args, *rest: (read.append(args), real_git(args, *rest))[1])
    code, out, err = run(["diff", "HEAD:m.yaml", "m.yaml"], capsys, tmp_path)
    assert (code, out) == (1, "")
    [line, count] = err.splitlines()
    assert line.startswith("HEAD:m.yaml: error: the spec files of ") and line.endswith(" hold more than 4000 bytes")
    assert count == "1 error found"
    assert [args[0] for args in read] == ["rev-parse", "rev-parse", "ls-tree"]  # no cat-file


@pytest.mark.slow
def test_swapped_layers_restore_bitwise_only_through_the_printed_map(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Train a model with two same-shaped layers, swap their names: restored by name, the export computes something
    else; restored through `--map`'s entries, its outputs equal the trained model's bit for bit. The commands run in
    this process (the CLI's main): seven children's start-ups were most of the test's time."""
    pytest.importorskip("onnxruntime")
    import onnxruntime as ort

    head = "  - {name: flat, op: flatten, input: image}\n  - {name: pre, op: dense, units: 16}\n  - {name: a, op: dense,"
    old = (MLP.replace("{x: {shape: [16]", "{image: {shape: [8, 8, 1]").replace("  - {name: a, op: dense, input: x,", head)
           .replace("units: 4}", "units: 10}") + "loss: {kind: sparse_softmax_cross_entropy, logits: y, labels: label}\n"
           "optimizers: {all: {variables: trainable, kind: adam, learning_rate: 0.01}}\n"
           "train: {batch_size: 32, epochs: 1, seed: 0}\n"
           f"data: {{train: {{npz: {DIGITS}, features: {{image: x_train}}, labels: {{label: y_train}}}}}}\n")
    swapped = old.replace("name: a,", "name: TMP,").replace("name: b,", "name: a,").replace("name: TMP,", "name: b,")
    write(tmp_path, **{"old.yaml": old + "checkpoint: {dir: run_old}\n", "new.yaml": swapped})

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        result = run_cli_completed(list(args), capsys, tmp_path)
        assert result.returncode in (0, 1), result.stderr[-3000:]
        return result

    assert cli("train", "old.yaml", "--steps", "3").returncode == 0
    printed = cli("diff", "old.yaml", "new.yaml", "--map").stdout.split("# checkpoint map:")[1].split("\n", 1)[1]
    write(tmp_path, **{
        "by_name.yaml": swapped + "checkpoint:\n  dir: run_a\n  restore:\n  - from: run_old\n",
        "mapped.yaml": swapped + printed.replace("OLD_CHECKPOINT", "run_old").replace("checkpoint:\n",
                                                                                     "checkpoint:\n  dir: run_b\n")})
    assert cli("diff", "old.yaml", "mapped.yaml", "--fail-on", "checkpoint").returncode == 0
    assert cli("diff", "old.yaml", "by_name.yaml", "--fail-on", "checkpoint").returncode == 1
    for spec, folder in (("old.yaml --checkpoint run_old", "exp_old"), ("by_name.yaml", "exp_name"),
                         ("mapped.yaml", "exp_map")):
        assert cli("export", *spec.split(), "-o", folder).returncode == 0
    x = np.load(DIGITS)["x_test"][:16].astype(np.float32)
    outs = {f: ort.InferenceSession(str(tmp_path / f / "model.onnx"), providers=["CPUExecutionProvider"])
            .run(None, {"image": x})[0].tobytes() for f in ("exp_old", "exp_name", "exp_map")}
    assert outs["exp_map"] == outs["exp_old"] and outs["exp_name"] != outs["exp_old"]
