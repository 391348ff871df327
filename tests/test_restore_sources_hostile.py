"""Restore sources that are not what they seem (restore checker, findings 1-6): a FIFO or device where `latest`,
meta.json or a data shard should be, a shard swapped for a FIFO between plan and apply, a truncated shard, a
symbolic link loop. Each is one line naming the file and what it is, never a hang or an unbounded read.

Cases that hung (or read /dev/zero into memory) before the fix run in a subprocess under a timeout, so the old
code fails them instead of hanging the suite."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from specgen.cli import main  # noqa: E402
from specgen.diagnostics import SpecError  # noqa: E402
from specgen.runtime.bundle_index import extents  # noqa: E402
from specgen.runtime.commands.restore import apply_plan, plan_restore, read_plan  # noqa: E402
from specgen.runtime.commands.restore_sources import read_source  # noqa: E402
from specgen.spec.io import RestoreSource  # noqa: E402
from specgen.spec.load import load_spec_text  # noqa: E402

SPEC = """\
specgen: 1
name: tiny
inputs: {x: {shape: [3], dtype: float32}}
outputs: {y: out}
layers:
  - {name: out, op: dense, units: 2}
checkpoint:
  dir: runs/tiny
  restore:
    - from: SOURCE
"""
KERNEL, BIAS = np.arange(6, dtype=np.float32).reshape(3, 2) / 8, np.array([0.25, -0.5], np.float32)
TARGETS = {"out/kernel": ((3, 2), "float32"), "out/bias": ((2,), "float32")}


def checkpoint(folder: Path) -> Path:
    """A ckpt-* folder as specgen writes it: out/kernel [3,2] and out/bias [2] (32 bytes of data) and meta.json."""
    folder.mkdir(parents=True)
    tf.raw_ops.SaveV2(prefix=str(folder / "variables"), tensor_names=["out/kernel", "out/bias"],
                      shape_and_slices=["", ""], tensors=[KERNEL, BIAS])
    (folder / "meta.json").write_text('{"step": 1, "serial": 1}\n')
    return folder


def run_cli(tmp_path: Path, source: str, *args: str, limit_memory: bool = False) -> subprocess.CompletedProcess[str]:
    """`specgen restore-plan` (or the command in `args`) in a subprocess: the old code hung on these."""
    (tmp_path / "spec.yaml").write_text(SPEC.replace("SOURCE", source))
    code = "import sys; from specgen.cli import main; sys.exit(main(sys.argv[1:]))"

    def cap() -> None:  # old code read /dev/zero until memory ran out: 3 GB ends that quickly
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    return subprocess.run([sys.executable, "-c", code, *(args or ("restore-plan", "spec.yaml"))], cwd=tmp_path,
                          capture_output=True, text=True, timeout=90, preexec_fn=cap if limit_memory else None)


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.splitlines() if ": error: " in line or line == "1 error found"]
    assert (done.returncode, lines[-1:]) == (1, ["1 error found"]), done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.mark.parametrize(("make", "what"), [(os.mkfifo, "a FIFO (named pipe)"),
                                            (lambda p: p.symlink_to("/dev/zero"), "a character device")])
def test_a_run_folder_source_whose_latest_is_no_file_is_one_line(tmp_path: Path, make: object, what: str) -> None:
    """Old: `latest` a FIFO hung restore-plan; `latest -> /dev/zero` read until MemoryError (a traceback)."""
    (tmp_path / "src" / "ckpt-00000001").mkdir(parents=True)
    make(tmp_path / "src" / "latest")  # type: ignore[operator]
    line = error_line(run_cli(tmp_path, "src", limit_memory=True))
    assert line == (f"spec.yaml:10:13: error: checkpoint.restore[0]: src/latest is {what}, not a regular file; "
                    "a run folder's 'latest' names its newest checkpoint")


def test_a_fifo_meta_json_in_a_run_folder_source_is_one_line(tmp_path: Path) -> None:
    """Old: read_meta opened the FIFO and restore-plan hung."""
    folder = checkpoint(tmp_path / "src" / "ckpt-00000001")
    (folder / "meta.json").unlink()
    os.mkfifo(folder / "meta.json")
    (tmp_path / "src" / "latest").write_text("ckpt-00000001\n")
    line = error_line(run_cli(tmp_path, "src"))
    assert line.startswith("spec.yaml:10:13: error: checkpoint.restore[0]: src/ckpt-00000001/meta.json: checkpoint "
                           "ckpt-00000001 is unreadable: the file is a FIFO (named pipe), not a regular file.")


def test_a_shard_swapped_for_a_fifo_after_the_plan_is_refused_when_read(tmp_path: Path) -> None:
    """Old: the apply step handed the FIFO to TensorFlow's reader, which blocked forever (finding 4's race)."""
    checkpoint(tmp_path / "src")
    script = f"""
import os, sys
from pathlib import Path
from specgen.runtime.commands.restore import plan_restore, read_plan
from specgen.spec.io import RestoreSource
from specgen.spec.load import load_spec_text
from specgen.diagnostics import SpecError
loaded = load_spec_text({SPEC.replace("SOURCE", "src")!r}, "spec.yaml")
plan = plan_restore(loaded, {TARGETS!r}, [(Path("src"), RestoreSource.model_construct(from_="src"))])
os.remove("src/variables.data-00000-of-00001"); os.mkfifo("src/variables.data-00000-of-00001")
try:
    read_plan(plan)
except SpecError as exc:
    print(exc.diagnostics[0].message)
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=90)
    assert done.stdout == ("cannot restore: cannot read 'out/kernel' from src: cannot read checkpoint src/variables: "
                           "src/variables.data-00000-of-00001 is a FIFO (named pipe), not a regular file (and 1 more "
                           "key from it). Nothing was restored.\n"), done.stderr[-2000:]


def test_a_truncated_shard_is_refused_by_the_plan_and_train_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Old: restore-plan said 'restored 2 ... ' and exited 0 (it read the index only); train then refused with the
    same 'Read less bytes than requested' once per variable and left runs/tiny/code/ behind."""
    data = checkpoint(tmp_path / "src") / "variables.data-00000-of-00001"
    assert data.stat().st_size == 32  # 6 + 2 float32
    data.write_bytes(data.read_bytes()[:10])
    (tmp_path / "spec.yaml").write_text(SPEC.replace("SOURCE", "src"))
    monkeypatch.chdir(tmp_path)
    assert main(["restore-plan", "spec.yaml"]) == 1
    out, err = capsys.readouterr()
    assert (out, err.splitlines()) == ("", [
        "spec.yaml:10:13: error: checkpoint.restore[0]: cannot restore from checkpoint src/variables: "
        "variables.data-00000-of-00001 is truncated: it holds 10 bytes, but the index places 'out/bias' up to "
        "byte 32 (a copy that stopped early?)", "1 error found"])
    assert not (tmp_path / "runs").exists()


def test_one_reason_per_source_when_its_values_cannot_be_read(tmp_path: Path) -> None:
    """A shard damaged after the plan (zeroed: the sizes still fit): the reason once, with the count of keys.
    Old: 'cannot read ... Read less/Checksum ...' repeated for every variable of the source."""
    checkpoint(tmp_path / "src")
    loaded = load_spec_text(SPEC.replace("SOURCE", "src"), "spec.yaml", tmp_path / "spec.yaml")
    plan = plan_restore(loaded, TARGETS, [(tmp_path / "src", RestoreSource.model_construct(from_="src"))])
    data = tmp_path / "src" / "variables.data-00000-of-00001"
    data.write_bytes(b"\0" * 32)
    variables = {"out/kernel": tf.Variable(tf.zeros([3, 2])), "out/bias": tf.Variable(tf.zeros([2]))}
    with pytest.raises(SpecError) as caught:
        apply_plan(plan, variables)
    message = caught.value.diagnostics[0].message
    assert message.startswith("cannot restore: cannot read 'out/kernel' from src: TensorBundle at ")
    assert message.endswith(" (and 1 more key from it). Nothing was restored.")
    assert message.count("cannot read '") == 1
    assert float(tf.reduce_sum(tf.abs(variables["out/kernel"]))) == 0.0  # nothing assigned


def test_read_plan_reads_the_values_that_apply_then_assigns(tmp_path: Path) -> None:
    """`specgen train` can read every value before its first write (new: read_plan), then assign those bytes."""
    checkpoint(tmp_path / "src")
    loaded = load_spec_text(SPEC.replace("SOURCE", "src"), "spec.yaml", tmp_path / "spec.yaml")
    plan = plan_restore(loaded, TARGETS, [(tmp_path / "src", RestoreSource.model_construct(from_="src"))])
    values = read_plan(plan)
    (tmp_path / "src" / "variables.data-00000-of-00001").unlink()  # gone after the read: the values are held
    variables = {"out/kernel": tf.Variable(tf.zeros([3, 2])), "out/bias": tf.Variable(tf.zeros([2]))}
    apply_plan(plan, variables, values)
    assert variables["out/kernel"].numpy().tobytes() == KERNEL.tobytes()
    assert variables["out/bias"].numpy().tobytes() == BIAS.tobytes()


def test_the_index_byte_ranges_are_read_as_tensorflow_wrote_them(tmp_path: Path) -> None:
    """The ranges end where the shard ends: 24 bytes of kernel then 8 of bias (in the order SaveV2 was given)."""
    checkpoint(tmp_path / "src")
    found = dict(extents(tmp_path / "src" / "variables", {"out/kernel", "out/bias", "absent"}))
    assert {key: (e.shard.name, e.end) for key, e in found.items()} == {
        "out/kernel": ("variables.data-00000-of-00001", 24), "out/bias": ("variables.data-00000-of-00001", 32)}


def test_a_fifo_index_says_fifo_and_a_link_loop_says_loop(tmp_path: Path) -> None:
    """Old: 'variables.index: ... the file is missing' for a FIFO index; 'no such file' for `a.keras -> a.keras`."""
    folder = tmp_path / "ckpt-00000001"
    folder.mkdir()
    os.mkfifo(folder / "variables.index")
    with pytest.raises(ValueError, match=r"is unreadable: the file is a FIFO \(named pipe\), not a regular file\."):
        read_source(folder)
    with pytest.raises(ValueError, match=r"variables.index is a FIFO \(named pipe\), not a regular file$"):
        read_source(folder / "variables")
    (tmp_path / "self.keras").symlink_to("self.keras")
    with pytest.raises(ValueError, match=r"self.keras: the path is a symbolic link loop, not a regular file$"):
        read_source(tmp_path / "self.keras")


TRAINED = SPEC.replace("checkpoint:", """\
loss: {kind: mean_squared_error, predictions: y, labels: t}
optimizers: {all: {variables: ["*"], kind: sgd, learning_rate: 0.1}}
train: {batch_size: 4, epochs: 1}
data:
  train: {npz: data.npz, features: {x: x}, labels: {t: t}}
checkpoint:""")


def test_a_source_that_fails_when_its_values_are_read_leaves_no_run_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Session reads every restored value with the plan, before the run folder's first write (read_plan). Old: the
    values were read after the run folder was opened, so a source that failed only then (its shard gone since the
    plan, as when the run that wrote it pruned it) was refused with runs/tiny/code/ left behind."""
    import specgen.runtime.commands.fine_tuning as fine_tuning

    checkpoint(tmp_path / "src")
    rows = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)
    np.savez(tmp_path / "data.npz", x=rows, t=rows[:, :2])
    (tmp_path / "spec.yaml").write_text(TRAINED.replace("SOURCE", "src"))
    planned = fine_tuning.plan_restore

    def plan_then_lose_the_shard(*args: object, **kwargs: object) -> object:
        plan = planned(*args, **kwargs)
        (tmp_path / "src" / "variables.data-00000-of-00001").unlink()
        return plan

    monkeypatch.setattr(fine_tuning, "plan_restore", plan_then_lose_the_shard)
    monkeypatch.chdir(tmp_path)
    assert main(["train", "spec.yaml", "--steps", "1"]) == 1
    err = capsys.readouterr().err
    assert "cannot restore: cannot read 'out/kernel' from src" in err and err.endswith("1 error found\n")
    assert "(and 1 more key from it). Nothing was restored." in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


def test_a_plan_from_a_set_restore_names_the_override_not_the_file(tmp_path: Path) -> None:
    """A restore plan's problems point at `checkpoint.restore`: where it was written. Written by `--set`, that is the
    override (the old code pointed at the file's `restore:`, which named another checkpoint)."""
    from specgen.spec.overrides import load_with_overrides

    (tmp_path / "bad").mkdir()
    tf.raw_ops.SaveV2(prefix=str(tmp_path / "bad" / "variables"), tensor_names=["out/kernel", "out/bias"],
                      shape_and_slices=["", ""], tensors=[np.zeros((5, 2), np.float32), BIAS])
    (tmp_path / "bad" / "meta.json").write_text('{"step": 1, "serial": 1}\n')
    checkpoint(tmp_path / "good")
    (tmp_path / "spec.yaml").write_text(SPEC.replace("SOURCE", str(tmp_path / "good")))
    override = f"checkpoint.restore=[{{from: {tmp_path / 'bad'}}}]"
    loaded = load_with_overrides(tmp_path / "spec.yaml", [override])
    plan = plan_restore(loaded, TARGETS)
    variables = {"out/kernel": tf.Variable(tf.zeros([3, 2])), "out/bias": tf.Variable(tf.zeros([2]))}
    with pytest.raises(SpecError) as raised:
        apply_plan(plan, variables)
    (diagnostic,) = raised.value.diagnostics
    assert (diagnostic.path, diagnostic.position) == (f"--set {override}", None)
    assert "mismatched 1" in diagnostic.message
    plain = plan_restore(load_with_overrides(tmp_path / "spec.yaml", []), TARGETS)
    assert plain.display.endswith("spec.yaml") and (plain.position.line, plain.position.col) == (10, 5)
