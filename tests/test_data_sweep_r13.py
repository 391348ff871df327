"""Round 13 of the data and sweep checks: one file under two names is read once, a resumed grid sweep draws what
an uninterrupted one draws, and a TFRecord value of the other list kind is told a remedy the user can follow.

- F1: a TFRecord shard named twice through a symbolic link, a `..` path or a hard link is one file (os.stat's
  st_dev and st_ino): read once, listed once by `specgen data`, and dealt once in a multi_worker split;
- F2: the grid sampler's point is a function of the trial's ordinal and the unvisited points, so a sweep resumed
  after its trial was interrupted takes the same points, in the same order, as one run in one go; two workers on
  one study still take different points;
- F3: the message for a `float_list` read as an `int64_list` (and back) says what an input can declare and what a
  label must be stored as, whole lines.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"


# ---- F1: one file under two names is read once ---------------------------------------------------------------------

def shards_with_aliases(folder: Path, shards: int = 2, count: int = 12) -> None:
    """`shards` shards of `count` digits in `folder`, and three more names of them that `*.tfrecord` matches or
    a list names: a symbolic link, a hard link and a `..` path."""
    from tfrecord_helpers import digits, write_shards

    write_shards(folder, *digits(count), shards=shards)
    (folder / "x-latest.tfrecord").symlink_to("train-00001.tfrecord")
    os.link(folder / "train-00000.tfrecord", folder / "z-hard.tfrecord")
    (folder / "sub").mkdir()


def test_a_file_named_twice_by_any_name_is_read_once(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker's case: a glob that matches a link and a hard link to shards it also matches, and a `..` path
    to one of them. Each file is read once, under the name listed first, and the other names are said in one
    line (the old check compared spellings: 5 files, 3x the examples)."""
    from test_data_paths import SOURCES, run_data

    monkeypatch.chdir(tmp_path)
    shards_with_aliases(tmp_path)
    code, out, err = run_data(tmp_path, SOURCES["tfrecord"].replace(
        "PATH", "['*.tfrecord', sub/../train-00000.tfrecord, ./train-00001.tfrecord]"), capsys)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == ("data.train: read once: x-latest.tfrecord is train-00001.tfrecord, z-hard.tfrecord is "
                        "train-00000.tfrecord, sub/../train-00000.tfrecord is train-00000.tfrecord (another name of a "
                        "file listed already: a link, a '..' path or a hard link)")
    assert "files     2: train-00000.tfrecord, train-00001.tfrecord" in lines
    assert "examples  12" in lines


def test_the_same_spelling_twice_is_read_once_unsaid(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from test_data_paths import SOURCES, run_data
    from tfrecord_helpers import digits, write_shards

    monkeypatch.chdir(tmp_path)
    write_shards(tmp_path, *digits(12), shards=2)
    code, out, err = run_data(tmp_path, SOURCES["tfrecord"].replace(
        "PATH", "[train-00000.tfrecord, './train-*.tfrecord']"), capsys)
    assert (code, err) == (0, "")
    assert not out.startswith("data.train: read once"), out
    assert "files     2: train-00000.tfrecord, train-00001.tfrecord" in out.splitlines()


def test_workers_and_records_see_one_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """With other names of the same four shards listed, multi_worker deals each shard once (to one worker), under
    the name listed first, and the checkpoint's `data_shares` and the provenance record (`train_files_sha256`'s
    digest, the file count) are those of the same shards listed plainly."""
    from test_data_paths import SOURCES, SPEC

    from specgen.ir.resolve import build_ir
    from specgen.runtime import data, provenance
    from specgen.runtime.placement.positions import share_digests
    from specgen.spec.load import load_spec

    monkeypatch.chdir(tmp_path)
    seen = {}
    for name, entries in (("plain", "'train-*.tfrecord'"),
                          ("aliased", "['*.tfrecord', sub/../train-00002.tfrecord, 'train-0000[13].tfrecord']")):
        folder = tmp_path / name
        shards_with_aliases(folder, shards=4, count=32)
        if name == "plain":
            for extra in ("x-latest.tfrecord", "z-hard.tfrecord"):
                (folder / extra).unlink()
        (folder / "spec.yaml").write_text(SPEC.replace("SOURCE", SOURCES["tfrecord"].replace("PATH", entries)))
        loaded = load_spec(folder / "spec.yaml")
        source = data.read_stage(loaded, build_ir(loaded), "train")
        assert source is not None
        shares = [data.for_worker(source, "train", w, 2, 4, 8) for w in range(2)]
        assert all(s.share is not None for s in shares), [s.note for s in shares]
        record = provenance.data_fingerprint(loaded)["train"]
        seen[name] = ([f.name for f in source.files], source.examples, [s.note for s in shares],
                      [share_digests(s.share) for s in shares if s.share is not None],
                      record["files"], record["content_sha256"])
    capsys.readouterr()
    assert seen["aliased"] == seen["plain"]
    names, examples = seen["plain"][0], seen["plain"][1]
    assert (names, examples) == ([f"train-0000{i}.tfrecord" for i in range(4)], 32)
    assert seen["plain"][4] == 4


SHARED = "; each image is in one class, and these would be read twice, under two class ids (remove the link, or " \
         "copy in the images it should hold)"


@pytest.mark.parametrize(("link", "target", "why"), [
    ("c", "a", "class folders 'a' and 'c' share images (class folder 'c' is a link to a)"),
    ("0", "b", "class folders '0' and 'b' share images (class folder '0' is a link to b)"),  # the link listed first
    ("c", "a/sub", "class folders 'a' and 'c' share images (class folder 'c' is a link to a/sub)"),
])
def test_a_class_folder_that_is_another_class_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                link: str, target: str, why: str) -> None:
    """An images source's classes: `classes: [a, a]` is refused by validate; the same folder under another name
    (a link to a class folder, or into one) fed its images twice, under two class ids. One line, no run."""
    from test_images_trust import GOOD, folder, refused

    files = {k: v for k, v in GOOD.items() if not k.startswith("c/")} | {"a/sub/2.png": GOOD["a/0.png"]}
    spec = folder(tmp_path, files)
    (tmp_path / "photos" / link).symlink_to(target, target_is_directory=True)
    assert refused(spec, capsys, "train") == why + SHARED
    assert sorted(p.name for p in tmp_path.iterdir()) == ["photos", "spec.yaml"]  # no run folder


# ---- F2: a resumed grid sweep draws what an uninterrupted one draws -------------------------------------------------

GRID = f"""\
specgen: 1
name: tiny_grid
inputs: {{image: {{shape: [8, 8, 1]}}}}
outputs: {{logits: out}}
layers:
  - {{name: flat, op: flatten}}
  - {{name: hidden, op: dense, units: 16, activation: relu}}
  - {{name: out, op: dense, units: 10}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers:
  all: {{variables: ["*"], kind: adam, learning_rate: 0.01}}
train: {{batch_size: 256, epochs: 1, metrics: [accuracy], seed: 1}}
data:
  train: {{npz: {DIGITS}, features: {{image: x_train}}, labels: {{label: y_train}}}}
  eval: {{npz: {DIGITS}, features: {{image: x_test}}, labels: {{label: y_test}}}}
sweep:
  metric: eval/accuracy
  direction: maximize
  trials: @TRIALS@
  sampler: grid
  space:
    optimizers.all.learning_rate: {{choice: [0.003, 0.01, 0.03]}}
    layers[hidden].units: {{int: [8, 16], step: 8}}
"""


def grid_spec(folder: Path, trials: int) -> Path:
    path = folder / "grid.yaml"
    path.write_text(GRID.replace("@TRIALS@", str(trials)))
    return path


def open_grid(spec: Path, folder: Path) -> tuple[Any, dict[str, Any]]:
    """(the study, the distributions a worker asks with) as one sweep process opens them: each call is a new
    process's sampler, which starts with nothing drawn."""
    optuna = pytest.importorskip("optuna")
    from specgen.spec.overrides import load_with_overrides
    from specgen.sweep import storage as stores
    from specgen.sweep.plan import Plan
    from specgen.sweep.space import parameters
    from specgen.sweep.study import open_study, quiet_optuna, retry

    assert optuna is not None
    quiet_optuna()
    folder.mkdir(exist_ok=True)
    url = stores.default_url(folder)
    loaded = load_with_overrides(spec, [])
    assert loaded.spec.sweep is not None
    plan = Plan(loaded, loaded.spec.sweep, parameters(loaded, []), folder.resolve(), url, 6, 1, [])
    return open_study(plan, stores.open_storage(url, retry)), {p.key: p.distribution() for p in plan.params}


def take(study: Any, distributions: dict[str, Any]) -> Any:
    """A running trial, as a sweep worker takes one (claim.py)."""
    from specgen.sweep import storage as stores
    from specgen.sweep.claim import claim

    return claim(study, stores.owner(), distributions)


def finish(study: Any, trial: Any) -> tuple[Any, ...]:
    study.tell(trial, 0.5)
    return tuple(sorted(trial.params.items()))


def interrupt(study: Any, trial: Any) -> None:
    """What a sweep does with a trial whose process is gone (driver.Runner.reap): marked, failed, queued again."""
    from optuna.trial import TrialState

    from specgen.sweep.study import retry

    study._storage.set_trial_user_attr(trial._trial_id, "interrupted", "its sweep process is gone")
    assert study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
    retry(study, study._storage.get_trial(trial._trial_id))


def in_one_go(tmp_path: Path, trials: int) -> list[tuple[Any, ...]]:
    study, distributions = open_grid(grid_spec(tmp_path, trials), tmp_path / "onego")
    return [finish(study, take(study, distributions)) for _ in range(trials)]


@pytest.mark.parametrize("trials", [3, 6])
@pytest.mark.parametrize("killed_at", [0, 1, 2])
def test_a_resumed_grid_sweep_takes_the_points_of_one_run_in_one_go(tmp_path: Path, trials: int,
                                                                    killed_at: int) -> None:
    """Trials 0..killed_at-1 finish, trial killed_at is interrupted with its process, and a new process (a new
    sampler) runs the rest: the retry first, then new points. The points of the trials that count are the
    uninterrupted sweep's, in its order (the old sampler took id = trial number, which counts the interrupted trial,
    so with 3 of 6 points the resumed sweep evaluated another subset)."""
    expected = in_one_go(tmp_path, trials)
    spec, folder = grid_spec(tmp_path, trials), tmp_path / "resumed"
    study, distributions = open_grid(spec, folder)
    got = [finish(study, take(study, distributions)) for _ in range(killed_at)]
    cut = take(study, distributions)
    study, distributions = open_grid(spec, folder)  # the next `specgen sweep` process
    interrupt(study, cut)
    got += [finish(study, take(study, distributions)) for _ in range(trials - killed_at)]
    assert got == expected
    assert len(set(expected)) == trials


def test_two_workers_on_one_grid_study_take_different_points(tmp_path: Path) -> None:
    """Two processes (two Study objects, two samplers) on one study, each taking a trial while the other's runs,
    also after an interrupted trial: the six trials that count take the six points, none twice."""
    spec, folder = grid_spec(tmp_path, 6), tmp_path / "shared"
    first, distributions = open_grid(spec, folder)
    second, _ = open_grid(spec, folder)
    a, b = take(first, distributions), take(second, distributions)
    assert a.params != b.params
    interrupt(second, b)  # queued again: one of the next takes runs its point
    points = [finish(first, a)]
    for _ in range(2):
        c, d = take(first, distributions), take(second, distributions)  # both running at once
        points += [finish(first, c), finish(second, d)]
    points.append(finish(second, take(second, distributions)))
    assert len(set(points)) == 6, points


# ---- F2 end to end: kill -9 a real grid sweep and resume it (slow) ------------------------------------------------


def started_points(out: str) -> list[str]:
    return re.findall(r"^trial \d+ started(?: \(trial \d+ again\))?: (.*)$", out, re.M)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sweep's kill -9 handling is Linux's")
def test_a_grid_sweep_killed_and_resumed_runs_the_points_of_one_go(tmp_path: Path) -> None:
    pytest.importorskip("optuna")
    grid_spec(tmp_path, 3)
    command = [sys.executable, "-m", "specgen", "sweep", "grid.yaml", "-o"]
    one_go = subprocess.run([*command, "onego"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert one_go.returncode == 0, one_go.stdout + one_go.stderr
    expected = started_points(one_go.stdout)
    assert len(expected) == 3, one_go.stdout
    process = subprocess.Popen([*command, "killed"], cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    before = []
    for line in process.stdout:  # trial 0 finished, trial 1 started: kill the sweep while trial 1 trains
        before.append(line)
        if line.startswith("trial 1 started"):
            break
    time.sleep(1)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    time.sleep(3)  # the trial dies with its sweep (PR_SET_PDEATHSIG)
    resumed = subprocess.run([*command, "killed"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "trial 1 was interrupted (its sweep process is gone): queued again" in resumed.stdout.splitlines()
    assert started_points("".join(before))[:1] + started_points(resumed.stdout) == expected, resumed.stdout


# ---- F3: a TFRecord key of the other list kind: a remedy the user can follow -----------------------------------------

RECORD_SPEC = """\
specgen: 1
name: kinds
inputs: {x: {shape: [3]INPUT}}
outputs: {logits: out}
layers: LAYERS
loss: LOSS
optimizers: {all: {variables: ["*"], kind: sgd, learning_rate: 0.1}}
train: {batch_size: 4}
data: {train: {tfrecord: t.tfrecord, features: {x: x}, labels: {label: y}}}
"""
DENSE = "[{name: out, op: dense, units: 4}]"
SPARSE = "{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}"
MSE = "{kind: mean_squared_error, predictions: logits, labels: label}"


def feature(values: list[Any] | bytes) -> Any:
    import tensorflow as tf

    if isinstance(values, bytes):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[values]))
    if isinstance(values[0], int):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    return tf.train.Feature(float_list=tf.train.FloatList(value=values))


@pytest.mark.parametrize(("x", "y", "spec", "why"), [
    # The checker's case: class ids stored as floats. A label has no dtype to declare: only the storing is said.
    ([1.0, 2.0, 3.0], [1.0], (DENSE, SPARSE, ""),
     "key 'y' holds a float_list, and the spec reads it as an int64_list: label 'label' holds class ids for loss "
     "sparse_softmax_cross_entropy, read as integers only: write the key as an int64_list (tf.train.Int64List)"),
    ([1.0, 2.0, 3.0], b"3", (DENSE, SPARSE, ""),  # no "read it as an encoded image" for a label
     "key 'y' holds a bytes_list, and the spec reads it as an int64_list: label 'label' holds class ids for loss "
     "sparse_softmax_cross_entropy, read as integers only: write the key as an int64_list (tf.train.Int64List)"),
    ([1.0, 2.0, 3.0], [1, 2, 3, 4], (DENSE, MSE, ""),  # the opposite: a regression target stored as integers
     "key 'y' holds an int64_list, and the spec reads it as a float_list: label 'label' is read as float32 by loss "
     "mean_squared_error (a label has no dtype to declare): write the key as a float_list (tf.train.FloatList)"),
    # Inputs: a float input's layers refuse an integer dtype, so only the storing is said.
    ([1, 2, 3], [1], (DENSE, SPARSE, ""),
     "key 'x' holds an int64_list, and the spec reads it as a float_list: write the key as a float_list "
     "(tf.train.FloatList)"),
    (b"png", [1], (DENSE, SPARSE, ""),
     "key 'x' holds a bytes_list, and the spec reads it as a float_list: write the key as a float_list "
     "(tf.train.FloatList), or, if it holds an encoded image, read it as one ({key: <key>, decode: image, size: "
     "[<height>, <width>]})"),
    # An integer input a float layer reads through rescale: declaring it float32 is a way too.
    ([1.0, 2.0, 3.0], [1], ("[{name: r, op: rescale, scale: 0.5}, {name: out, op: dense, units: 4}]", SPARSE,
                            ", dtype: uint8"),
     "key 'x' holds a float_list, and the spec reads it as an int64_list: write the key as an int64_list "
     "(tf.train.Int64List), or declare input 'x' float32 if the layers it feeds take floats"),
    # An embedding's ids: integers, whatever the dtype.
    ([1.0, 2.0, 3.0], [1], ("[{name: emb, op: embedding, vocab_size: 5, dim: 2}, {name: f, op: flatten}, "
                            "{name: out, op: dense, units: 4}]", SPARSE, ", dtype: int32"),
     "key 'x' holds a float_list, and the spec reads it as an int64_list: input 'x' holds the ids embedding 'emb' "
     "reads, which are integers: write the key as an int64_list (tf.train.Int64List)"),
])
def test_a_key_of_the_other_list_kind_gets_a_remedy_that_can_be_followed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], x: list[Any] | bytes, y: list[Any] | bytes,
        spec: tuple[str, str, str], why: str) -> None:
    import tensorflow as tf

    layers, loss, dtype = spec
    with tf.io.TFRecordWriter(str(tmp_path / "t.tfrecord")) as writer:
        for _ in range(4):
            writer.write(tf.train.Example(features=tf.train.Features(
                feature={"x": feature(x), "y": feature(y)})).SerializeToString())
    (tmp_path / "s.yaml").write_text(RECORD_SPEC.replace("INPUT", dtype).replace("LAYERS", layers)
                                     .replace("LOSS", loss))
    code, out, err = run_cli(["data", "s.yaml"], capsys, tmp_path)
    assert (code, out, err.splitlines()) == (1, "", [
        f"s.yaml:9:26: error: data.train (t.tfrecord): cannot parse record 0: {why}", "1 error found"])
