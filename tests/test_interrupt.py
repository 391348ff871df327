"""Ctrl-C during training (specgen/runtime/interrupt.py): noted when it comes, raised only at the loop's checks.

The end-to-end check (a real `specgen train` process and SIGINT) is
tests/test_levenberg_marquardt.py::test_ctrl_c_during_training_stops_at_once_with_one_line; it failed only
when the signal happened to land inside TensorFlow's Python code. These tests pin the property that rules
that out, deterministically: no KeyboardInterrupt is raised where the signal lands.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from lm_fits import SINE, Trainer, write_fit

from specgen.runtime.interrupt import Interrupts


@pytest.mark.usefixtures("python_default_sigint")
def test_sigint_is_noted_not_raised_until_check_and_the_handler_is_restored() -> None:
    before = signal.getsignal(signal.SIGINT)
    with Interrupts() as interrupts:
        os.kill(os.getpid(), signal.SIGINT)
        # Python runs signal handlers between bytecodes: these iterations give it many chances to raise.
        total = sum(range(100_000))
        assert interrupts.received
        with pytest.raises(KeyboardInterrupt):
            interrupts.check()
    assert total == 4_999_950_000
    assert signal.getsignal(signal.SIGINT) is before
    with pytest.raises(KeyboardInterrupt):  # Python's default again: raised where it lands
        os.kill(os.getpid(), signal.SIGINT)
        sum(range(100_000))


def test_check_without_a_signal_does_nothing() -> None:
    with Interrupts() as interrupts:
        interrupts.check()
    assert not interrupts.received


@pytest.mark.parametrize(("optimizer", "one_graph"), [("{kind: levenberg_marquardt}", False),
                                                      ("{kind: adam, learning_rate: 0.05}", True)])
def test_only_trainers_with_one_graph_per_chunk_run_chunks_in_one_call(tmp_path: Path, optimizer: str,
                                                                       one_graph: bool) -> None:
    """Levenberg-Marquardt drives TensorFlow from Python once an iteration: the loop runs it update by update,
    so Ctrl-C stops it after the current iteration, not after a chunk of up to 20."""
    assert Trainer(write_fit(tmp_path, SINE, optimizer), SINE).session.one_graph is one_graph
