"""`specgen sweep -o DIR` prints its folder as other commands print theirs (docs/cli.md, specgen/paths.py): relative
to the working directory when it lies under it, and as -o gave it when it does not (`../out/sw/trial-0000`, as
`export -o ../x` prints its file), never as the working directory joined to it (`/cwd/../out/sw/...`). What a trial
records (`--set checkpoint.dir=`, the study's folder and log) is the resolved absolute path, without `..`: a relative
checkpoint.dir would count from the spec's folder.

The printing is checked without TensorFlow (the plan's paths, and a sweep whose study already holds its one trial, so
it only prints and summarizes); one real 1-trial sweep of a small MLP (slow, ~9 s) checks what a trial records.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import run_cli
from test_sweep_checks import BASE, SWEEP

optuna = pytest.importorskip("optuna")

LR = "    optimizers.all.learning_rate: {log_uniform: [1.0e-3, 1.0e-1]}"


def spec_in(work: Path) -> Path:
    """The MLP of test_sweep_checks searching one learning rate, 1 trial, in `work`."""
    work.mkdir()
    spec = work / "spec.yaml"
    spec.write_text(BASE + SWEEP.format(metric="eval/accuracy", space=LR).replace("trials: 2", "trials: 1"))
    return spec


def plan_for(spec: Path, given: Path | None) -> Any:
    """The sweep's Plan as command.py makes it for `-o given` (or for the folder itself when `given` is None)."""
    from specgen.spec.overrides import load_with_overrides
    from specgen.sweep import storage as stores
    from specgen.sweep.plan import Plan
    from specgen.sweep.space import parameters
    from specgen.sweep.study import sweep_folder

    loaded = load_with_overrides(spec, [])
    assert loaded.spec.sweep is not None
    folder = sweep_folder(given if given is not None else Path("sw"))
    return Plan(loaded, loaded.spec.sweep, parameters(loaded, []), folder, stores.default_url(folder), 1, 1,
                given=given)


def test_the_sweep_folder_is_resolved_and_printed_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specgen.sweep.study import sweep_folder

    root = tmp_path.resolve()
    spec = spec_in(root / "work")
    monkeypatch.chdir(root / "work")
    plan = plan_for(spec, Path("../out/sw"))
    assert plan.folder == root / "out" / "sw"  # recorded: absolute, no `..`
    assert plan.shown(plan.folder) == "../out/sw"
    assert plan.shown(plan.folder / "trial-0003") == "../out/sw/trial-0003"
    assert plan.shown(str(plan.folder / "trial-0003.log")) == "../out/sw/trial-0003.log"  # a study attribute is text
    assert plan.shown(root / "work" / "runs" / "x") == "runs/x"  # under the working directory: relative, as before
    assert plan.shown(root / "elsewhere" / "x") == str(root / "elsewhere" / "x")  # not the sweep's: as it is
    inside = plan_for(spec, Path("./sw/../sw2"))
    assert inside.folder == root / "work" / "sw2"
    assert inside.shown(inside.folder / "trial-0000") == "sw2/trial-0000"  # under it: relative to it, normalized
    absolute = plan_for(spec, root / "work" / ".." / "abs")
    assert absolute.folder == root / "abs"
    assert absolute.shown(absolute.folder / "summary.txt") == f"{root}/work/../abs/summary.txt"  # as given
    assert plan_for(spec, None).shown(root / "work" / "sw" / "trial-0000") == "sw/trial-0000"
    # `..` after a link is the link target's parent, as the file system reads it; joining text would name another
    (root / "real" / "deep").mkdir(parents=True)
    (root / "work" / "link").symlink_to(root / "real" / "deep")
    assert sweep_folder(Path("link/../sw")) == root / "real" / "sw"
    assert os.path.normpath(Path.cwd() / "link/../sw") == str(root / "work" / "sw")  # what a plain join would say


def test_a_sweep_outside_the_working_directory_prints_its_paths_as_given(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The study already holds its one finished trial (as a sweep that ran it leaves it): the sweep prints its
    header, runs nothing, and summarizes, all without TensorFlow."""
    from specgen.sweep import storage as stores
    from specgen.sweep.study import open_study, quiet_optuna, retry

    root = tmp_path.resolve()
    spec = spec_in(root / "work")
    folder = root / "out" / "sw"
    folder.mkdir(parents=True)
    old = Path.cwd()
    os.chdir(root / "work")
    try:
        quiet_optuna()
        plan = plan_for(spec, Path("../out/sw"))
        study = open_study(plan, stores.open_storage(plan.url, retry))
        trial = study.ask()
        trial.suggest_float("optimizers.all.learning_rate", 1e-3, 1e-1, log=True)
        for key, value in (("folder", str(folder / "trial-0000")), ("log", str(folder / "trial-0000.log")),
                           ("overrides", []), ("seconds", 1.5)):
            trial.set_user_attr(key, value)
        study.tell(trial, 0.5)
    finally:
        os.chdir(old)
    code, out, err = run_cli(["sweep", "spec.yaml", "-o", "../out/sw"], capsys, root / "work")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == ("sweep sweep_mlp: 1 trials of eval/accuracy (maximize), tpe sampler, pruner none, 1 at a "
                        f"time, into ../out/sw; study 'sweep_mlp' in sqlite:///{folder}/study.db (1 trial(s) there "
                        "already)")
    assert "best: trial 0, eval/accuracy 0.5000, run folder ../out/sw/trial-0000" in lines
    assert lines[-1] == "wrote ../out/sw/summary.txt and ../out/sw/sweep.svg"
    assert "best: trial 0, eval/accuracy 0.5000, run folder ../out/sw/trial-0000\n" in (folder / "summary.txt").read_text()
    assert "/.." not in out


@pytest.mark.slow
def test_a_trial_records_the_resolved_folder(tmp_path: Path) -> None:
    """One real trial (a 1-epoch MLP): what it prints is as given, what it records is absolute without `..`."""
    root = tmp_path.resolve()
    spec_in(root / "work")
    done = subprocess.run([sys.executable, "-m", "specgen", "sweep", "spec.yaml", "-o", "../out/sw"],
                          cwd=root / "work", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert ", into ../out/sw; study 'sweep_mlp' in " in lines[0]
    assert [line.split(", run folder ")[1] for line in lines if line.startswith("best: ")] == ["../out/sw/trial-0000"]
    assert lines[-1] == "wrote ../out/sw/summary.txt and ../out/sw/sweep.svg"
    trial = root / "out" / "sw" / "trial-0000"
    overrides = json.loads((trial / "provenance.json").read_text())["overrides"]
    assert overrides[0] == f"checkpoint.dir={trial}"
    stored = optuna.load_study(study_name="sweep_mlp", storage=f"sqlite:///{root}/out/sw/study.db").trials[0]
    assert (stored.user_attrs["folder"], stored.user_attrs["log"]) == (str(trial), f"{trial}.log")
