"""Shared fixtures. TensorFlow is imported lazily, once per session, by the tests that need it.

Also the suite's time guard (`--time-budget`, set by .ci/test; docs/testing.md). Under pytest-xdist
(`-n 2`) TensorFlow keeps its default thread counts: one thread per worker measured no better, within
the noise of a shared machine (4 paired runs of 133 tests).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # bit-stable CPU kernels across runs

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "specs"


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


# --- the quick tier (`pytest -m quick`, docs/testing.md) -------------------------------------------
# Whole files whose tests touch every package cheaply: a smoke of each command (test_smoke.py), each registry's
# round trip and completeness (the test_<axis>_registry.py files, and the golden set's test_compat_table.py, which
# names a new optimizer kind or feature the golden set lacks), the schema's names, the spec loader, composition and
# diff, the golden generated files. A test in them marked `slow` stays out of the tier. docs/testing.md lists the
# completeness checks that stay out (they run TensorFlow: the initializers' draws, the ops' measured moments; or
# they check the docs' outputs), which extending.md's checklists run by name.
QUICK_FILES = frozenset({
    "test_smoke.py", "test_registry_roundtrip.py", "test_golden.py", "test_build.py", "test_yaml_source.py",
    "test_compose.py", "test_diff.py", "test_spec_errors.py", "test_report.py", "test_curves.py",
    "test_augment_registry.py", "test_features_registry.py", "test_loss_registry.py", "test_metric_registry.py",
    "test_op_registry.py", "test_optimizer_registry.py", "test_schedule_registry.py", "test_source_registry.py",
    "test_precision_registry.py", "test_compat_table.py", "test_schema_names.py",
    "test_native_logs.py", "test_text.py", "test_schema.py",
})


# --- the order of the files: longest first --------------------------------------------------------------------------
# pytest collects files alphabetically, and the longest ones sit at the end (test_train*, test_tracking*, test_zoo*):
# under `-n 2 --dist loadfile` the last of them ran alone while the other worker idled (29 s of a 721 s run). Handing
# the longest files out first (longest processing time first, the classic rule for two machines) leaves only
# short files for the end. Summed durations of `pytest -n 2 --junitxml`, 2026-12-07 (AMD EPYC, 2 cores): every
# file over 15 s, longest first. A file missing here only runs in its alphabetical place: never wrong, at most slower.
LONGEST_FIRST = (
    "test_distributed.py",  # 124 s
    "test_tracking_mlflow.py",  # 91 s
    "test_train_cli.py",  # 81 s
    "test_training_faults.py",  # 76 s
    "test_zoo_models.py",  # 67 s
    "test_data_r12b.py",  # 65 s (new, 2026-12-07; a real two-worker run resumed twice)
    "test_review_fixes_r12.py",  # new, 2026-12-07; --workers servers and a probe
    "test_sweep_run.py",  # 59 s
    "test_return_state_bidirectional.py",  # 51 s
    "test_tracking_registry.py",  # 44 s
    "test_serve_r12.py",  # 37 s (new, 2026-12-07; two --workers servers, a killed worker restarted)
    "test_yaml_bounds.py",  # 34 s
    "test_sweep_tracking.py",  # 33 s
    "test_return_state.py",  # 32 s
    "test_levenberg_marquardt.py",  # 32 s
    "test_masks_keras.py",  # 29 s
    "test_serve_r11.py",  # 20-30 s (new, 2026-12-07; servers, a frozen worker, a shutdown)
    "test_diff_graph.py",  # 28 s
    "test_bidirectional_keras.py",  # 27 s
    "test_diff.py",  # 26 s
    "test_optimizers_sparse_r11.py",  # 25 s (new, 2026-12-07; every optimizer kind on an embedding)
    "test_fuzz_specs.py",  # 24 s
    "test_import_keras.py",  # 21 s
    "test_restore_sources_hostile.py",  # 19 s
    "test_sweep_faults2.py",  # 18 s
    "test_sweep_sigterm.py",  # 8-26 s (new, 2026-12-07; a sweep child and its trials)
    "test_checkpoint_r5.py",  # 17 s
    "test_epochs_replicas.py",  # 16 s
    "test_keras_untrusted_files.py",  # 16 s
    "test_serve_limits.py",  # 16 s
    "test_finetune_keras.py",  # 16 s
    "test_serve_live_faults.py",  # 15 s
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in QUICK_FILES and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.quick)
    rank = {name: n for n, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep pytest's order


# --- the time guard ----------------------------------------------------------------------------
# CI's target is 20 minutes for install, ruff and the suite together; .ci/test gives the suite a
# tripwire above it (--time-budget 1500: a failed CI lands nothing), which catches a hang or a suite
# fallen back to one core; --durations shows a slow test creeping in before that.
# Only the controller keeps time: under xdist it receives every worker's reports.
# The budget fails a run only in CI (CI=true, as CI services and .ci/run's caller set it): there a slow suite
# must be seen before it outgrows CI's limit. On a developer's or user's machine, busy with other work, a
# run whose tests all passed passes; the budget only warns.


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--time-budget", type=float, default=None, metavar="SECONDS",
                     help="fail the run when its wall time exceeds SECONDS, and print the tests' summed time "
                          "(CI's tripwire, set by .ci/test)")


class TimeGuard:
    """Sums the reported time of every test phase and fails the session when the wall time exceeds the budget."""

    def __init__(self, budget: float, workers: int, enforce: bool) -> None:
        self.budget, self.workers, self.enforce = budget, workers, enforce
        self.started = time.monotonic()
        self.test_seconds = 0.0
        self.wall = 0.0

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.test_seconds += report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.wall = time.monotonic() - self.started
        if self.enforce and self.wall > self.budget and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl(trylast=True)  # after --durations' list, just above the "N passed" line
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        line = (f"time: {self.wall:.0f} s wall for {self.test_seconds:.0f} s of tests on {self.workers} worker(s); "
                f"budget {self.budget:.0f} s")
        if self.wall > self.budget and self.enforce:
            terminalreporter.write_line(f"error: {line} exceeded, which fails the run in CI (CI=true): find the new slow "
                                        "tests in the durations above and make them cheaper (or raise the budget in "
                                        ".ci/test, saying why)", red=True)
        elif self.wall > self.budget:
            terminalreporter.write_line(f"warning: {line} exceeded; the run is judged on its tests alone, as CI=true is "
                                        "not set (a busy machine is slower; CI fails on the budget)", yellow=True)
        else:
            terminalreporter.write_line(line)


def pytest_configure(config: pytest.Config) -> None:
    budget = config.getoption("time_budget")
    if budget is not None and not hasattr(config, "workerinput"):  # workerinput: this is an xdist worker
        workers = getattr(config.option, "numprocesses", None) or 1
        enforce = os.environ.get("CI", "").lower() in ("true", "1")
        config.pluginmanager.register(TimeGuard(budget, workers, enforce), "specgen-time-guard")


@pytest.fixture
def python_default_sigint() -> Iterator[None]:
    """Python's own SIGINT handler for the test: a pytest-xdist worker ignores SIGINT (its controller stops it), so
    the handler found there is not the one a `specgen` process starts with."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
