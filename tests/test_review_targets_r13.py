"""`specgen diff`'s checkpoint section counts target network variables as the run fills them.

A fine-tuning run copies each target variable from its online variable after `checkpoint.restore`
(docs/targets.md), so one that no key restores starts from the restored online weights, not its initializer.
restore-plan and train's summary line say `copied`; diff said `initialized`, which read as trained weights lost.
"""

from __future__ import annotations

from pathlib import Path

from cli_helpers import run_cli as run

ROOT = Path(__file__).resolve().parents[1]
DQN = ROOT / "examples" / "specs" / "chain_dqn.yaml"


def test_diff_counts_excluded_targets_as_copied_not_initialized(tmp_path: Path, capsys) -> None:
    old = tmp_path / "old.yaml"
    old.write_text(DQN.read_text() + "checkpoint: {dir: run_dqn}\n")
    new = tmp_path / "new.yaml"
    new.write_text(DQN.read_text() + 'checkpoint: {dir: run_ft, restore: [{from: run_dqn, exclude: ["target_qnet/*"]}]}\n')
    code, out, err = run(["diff", str(old), str(new)], capsys, tmp_path)
    assert (code, err) == (0, "")
    section = out.split("checkpoint: ", 1)[1].split("\n\n", 1)[0].splitlines()
    assert section[0] == ("a checkpoint of OLD restored into NEW: restored 4, copied 4, initialized 0, unused weights 4, "
                          "mismatched 0")
    assert not [line for line in section if line.lstrip().startswith("initialized")]
