"""TensorFlow's C++ start-up chatter stays off the terminal unless the user asks for it (specgen/native_logs.py)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from specgen import native_logs

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "examples" / "specs" / "digits_cnn.yaml"

CHATTER = [
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    b"I0000 00:00:1796522468.657939    4186 port.cc:153] oneDNN custom operations are on. You may see ...",
    b"I0000 00:00:1796522468.658908    4186 cudart_stub.cc:31] Could not find cuda drivers on your machine, "
    b"GPU will not be used.",
    b"I0000 00:00:1796522468.948785    4186 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use available "
    b"CPU instructions in performance-critical operations.",
    b"To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with the appropriate "
    b"compiler flags.",
    b"E0000 00:00:1796522472.353804    4186 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: Failed call "
    b"to cuInit: UNKNOWN ERROR (303)",
    b"E0000 00:00:1796522472.353804    4186 jpeg_mem.cc:331] Premature end of JPEG data. Stopped at line 14/64",
]
KEPT = [
    b"E0000 00:00:1796522472.353804    4186 bfc_allocator.cc:485] Allocator ran out of memory",  # a real error
    b"warning: batch-norm momentum 0.99 ('bn1')",
    b"Error: something a user must read",
    b"",
    b"W0000 00:00:1796522472.353804    4186 jpeg_mem.cc:331] a warning of another level than libjpeg's errors",
]


def _through_quiet(data: bytes, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    capfd.readouterr()
    with native_logs.quiet():
        assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "2"
        for start in range(0, len(data), 7):  # odd-sized writes: lines arrive in pieces, as from C++
            os.write(2, data[start:start + 7])
    return capfd.readouterr().err


def test_only_the_start_up_lines_are_dropped(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    mixed = [line for pair in zip(CHATTER, KEPT + KEPT[:2], strict=True) for line in pair]
    err = _through_quiet(b"\n".join(mixed) + b"\n", capfd, monkeypatch)
    assert err == "".join(line.decode() + "\n" for line in (KEPT + KEPT[:2]))


def test_a_progress_bar_passes_before_its_line_ends(capfd: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    capfd.readouterr()
    with native_logs.quiet():
        os.write(2, b"\rtraining digits_cnn:  50%|#####     |")
        deadline = time.monotonic() + 30
        seen = ""
        while "50%" not in seen and time.monotonic() < deadline:  # copied while the line is still open
            time.sleep(0.05)
            seen += capfd.readouterr().err
        os.write(2, b" 11/22\n")
    assert seen == "\rtraining digits_cnn:  50%|#####     |"
    assert capfd.readouterr().err == " 11/22\n"


def test_the_users_own_level_or_verbose_turn_it_off(capfd: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    capfd.readouterr()
    with native_logs.quiet():
        os.write(2, CHATTER[0] + b"\n")
    assert capfd.readouterr().err == CHATTER[0].decode() + "\n"
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL")
    with native_logs.quiet(verbose=True):
        os.write(2, CHATTER[1] + b"\n")
        assert "TF_CPP_MIN_LOG_LEVEL" not in os.environ
    assert capfd.readouterr().err == CHATTER[1].decode() + "\n"


@pytest.mark.slow
def test_a_command_that_imports_tensorflow_prints_none_of_it(tmp_path: Path) -> None:
    """The real CLI, as a user's terminal sees it: `specgen data` imports TensorFlow and reads the data."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    command = [sys.executable, "-m", "specgen", "data", str(SPEC)]
    quiet = subprocess.run(command, capture_output=True, env=env, cwd=tmp_path, timeout=300)
    loud = subprocess.run([*command[:3], "--verbose", *command[3:]], capture_output=True, env=env, cwd=tmp_path,
                          timeout=300)
    assert quiet.returncode == loud.returncode == 0, quiet.stderr.decode()[-2000:]
    assert quiet.stdout == loud.stdout
    dropped = [line for line in loud.stderr.splitlines() if native_logs.NOISE.match(line)]
    assert dropped, "TensorFlow printed no start-up line with --verbose: the test no longer shows anything"
    assert not [line for line in quiet.stderr.splitlines() if native_logs.NOISE.match(line)]
    # INFO and WARNING lines after absl starts are below the default level (level 0 with --verbose shows them).
    assert not [line for line in quiet.stderr.splitlines() if re.match(rb"[IW]\d{4} ", line)]


class _Writes(io.RawIOBase):
    """A raw stream that records each write it is given (one per system call on a real file)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.writes.append(bytes(data))
        return len(data)


def test_a_line_is_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """Python's stderr (and stdout under PYTHONUNBUFFERED, as a sweep runs its trials) writes through to the file, so
    a print is two writes (its text, then its newline), and stderr is relayed by native_logs' thread: stdout's next
    line landed between the two in a trial's log (`...going on without ittraining ...`), and the sweep could not read
    the tracker's warning. The CLI makes both streams write whole lines."""
    from specgen.cli import _whole_lines

    raw = _Writes()
    stream = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)  # as Python sets up stderr: over FileIO
    print("text", file=stream)
    assert raw.writes == [b"text", b"\n"]  # the trap: two writes
    monkeypatch.setattr(sys, "stderr", stream)
    _whole_lines()
    print("warning: MLflow tracking failed; going on without it", file=sys.stderr)
    assert raw.writes[2:] == [b"warning: MLflow tracking failed; going on without it\n"]
