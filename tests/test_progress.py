"""Progress: a live bar on a real terminal (a pty), plain lines in a pipe, nothing with --quiet."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What specgen train's loop does with its progress: two updates, an eval line, the end of the run.
SCRIPT = """
import sys
from specgen.progress import TrainProgress, delayed
p = TrainProgress(0, 40, quiet=sys.argv[1] == "quiet")
p.show(20, "step 20/40  9.0 steps/s  loss 1.5000", "loss 1.5000")
p.show(40, "step 40/40  9.0 steps/s  loss 0.7500", "loss 0.7500", force=True)
p.write("eval at step 40: accuracy 0.5000")
p.close()
print("done")
list(delayed(range(3), "build", delay=0))
"""


# What export and import do: named steps, a bar only on a terminal (delay 0 here; 2 s in the commands).
PHASES = """
from specgen.progress import Phases
with Phases("export", ["weights", "TensorFlow outputs", "write"], delay=0) as phases:
    phases.start("weights")
    phases.start("TensorFlow outputs")
print("done")
"""


def run(mode: str, terminal: bool, script: str = SCRIPT) -> str:
    """stdout and stderr of `script`, both on a pty when `terminal`, else on a pipe."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"}
    command = [sys.executable, "-c", script, mode]
    if not terminal:
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, check=True).stdout
    parent, child = pty.openpty()
    # A new pty is 0 columns wide (a real terminal has its window's size): 100 columns, 30 rows.
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    with subprocess.Popen(command, stdout=child, stderr=child, env=env) as process:
        os.close(child)
        chunks = []
        while True:
            try:
                chunk = os.read(parent, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert process.wait(timeout=60) == 0
    os.close(parent)
    return b"".join(chunks).decode()


def test_a_pipe_gets_the_plain_lines_and_no_bar() -> None:
    # The first line shows at once; the second, inside the 5-second throttle, because it is forced (epoch end).
    assert run("loud", terminal=False) == ("step 20/40  9.0 steps/s  loss 1.5000\nstep 40/40  9.0 steps/s  loss 0.7500\n"
                                           "eval at step 40: accuracy 0.5000\ndone\n")


def test_a_terminal_gets_a_bar_with_rate_and_time_left() -> None:
    out = run("loud", terminal=True)
    final = [part for part in out.split("\r") if "40/40" in part][-1]
    assert final.startswith("train: 100%|") and "40/40 [" in final and "step/s, loss 0.7500]" in final
    assert "<00:00" in final  # time left, tqdm's "elapsed<remaining"
    assert "step 40/40  9.0 steps/s" not in out  # no plain lines on a terminal
    assert "\reval at step 40: accuracy 0.5000\r\n" in out  # the bar cleared, the line printed, the bar redrawn
    build = out.split("done\r\n")[1]  # the delayed bar of a long build (on stderr), then cleared
    assert build.startswith("\rbuild:   0%|") and build.endswith("0/3 [00:00<?, ?it/s]\r" + " " * 99 + "\r")


def test_quiet_draws_nothing() -> None:
    assert run("quiet", terminal=True).split("\r\n")[:2] == ["eval at step 40: accuracy 0.5000", "done"]


def test_export_steps_draw_on_a_terminal_only() -> None:
    out = run("loud", terminal=True, script=PHASES)
    drawn = [part for part in out.split("\r") if part.startswith("export: ")]
    assert drawn[-1].startswith("export: TensorFlow outputs [1/3 done, 00:0")  # the step running, those done
    assert out.endswith("done\r\n")  # cleared before the command's own output
    assert run("loud", terminal=False, script=PHASES) == "done\n"  # a pipe (CI logs) gets nothing
