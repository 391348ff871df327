"""The base install (`pip install specgen`, what CI and pre-commit use): what a command needing an extra says, what
standard output does with a path its encoding cannot spell, and how little `specgen --help` imports.

The extras are blocked in a child process (`sys.modules[name] = None`, as `import` treats a missing package), so
this file needs no second environment; each command stops before reading its inputs, so the files can be absent.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specgen.cli import main, parser
from specgen.commands import COMMANDS, discover
from specgen.extras import from_missing, message

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "examples" / "specs" / "digits_mlp.yaml"
BLOCKED = ("tensorflow", "keras", "h5py", "onnxruntime", "starlette", "uvicorn", "httptools", "prometheus_client",
           "tritonclient", "grpc")
TRAIN = "expected the train extra: pip install 'specgen[train]'"
# argv -> the one line each prints (after `specgen: error: `), exit 1
EXPECTED = {
    ("train", "SPEC", "--steps", "1"): f"specgen train needs tensorflow, which is not installed; {TRAIN}",
    ("train", "SPEC", "--probe"): f"specgen train needs tensorflow, which is not installed; {TRAIN}",
    ("restore-plan", "SPEC"): f"specgen restore-plan needs tensorflow, which is not installed; {TRAIN}",
    ("data", "SPEC"): f"specgen data needs tensorflow, which is not installed; {TRAIN}",
    ("report", "SPEC", "--checkpoint", "ckpt"):
        f"specgen report --checkpoint needs tensorflow, which is not installed; {TRAIN}",
    ("export", "SPEC", "-o", "out"): "specgen export needs tensorflow and onnxruntime, which are not installed; "
                                     "expected the train and runtime extras: pip install 'specgen[train,runtime]'",
    ("infer", "m.onnx", "--input", "x.npz"): "specgen infer needs onnxruntime, which is not installed; expected the "
                                             "runtime extra: pip install 'specgen[runtime]'",
    ("serve", "repo"): "specgen serve needs onnxruntime, starlette, uvicorn, httptools, prometheus_client, tritonclient "
                       "and grpc, which are not installed; expected the serve extra: pip install 'specgen[serve]'",
    ("import", "keras", "MobileNetV2", "-o", "s.yaml"):
        f"specgen import keras needs h5py, which is not installed; {TRAIN}",
}
CHILD = """
import contextlib, io, json, sys
for name in {blocked!r}:
    sys.modules[name] = None  # what `import` finds for a package that is not installed
from specgen import extras
from specgen.cli import main

def run(argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(argv)
    return [code, err.getvalue()]

results = [run(argv) for argv in {argvs!r}]
extras.need = lambda *a: None  # a path no need() covers: the import itself fails, cli.py says the same line
results.append(run(["restore-plan", {spec!r}]))
print(json.dumps(results))
"""


def test_every_command_that_needs_a_missing_extra_says_which_in_one_line(tmp_path: Path) -> None:
    argvs = [[str(SPEC) if word == "SPEC" else word for word in argv] for argv in EXPECTED]
    code = CHILD.format(blocked=BLOCKED, argvs=argvs, spec=str(SPEC))
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.splitlines()[-1])
    for (argv, line), (status, err) in zip(EXPECTED.items(), results, strict=False):
        assert (status, err) == (1, f"specgen: error: {line}\n"), argv
    assert results[-1] == [1, f"specgen: error: {EXPECTED[('restore-plan', 'SPEC')]}\n"]
    assert list(tmp_path.iterdir()) == []  # stopped before writing anything


def test_a_missing_module_that_no_extra_installs_is_not_blamed_on_one() -> None:
    assert from_missing(ModuleNotFoundError("x", name="specgen.nope"), "specgen train") is None  # a specgen bug
    assert from_missing(ModuleNotFoundError("x", name="yaml"), "specgen train") is None  # a base dependency
    assert str(from_missing(ModuleNotFoundError("x", name="optuna"), "specgen sweep")) == (
        "specgen sweep needs optuna, which is not installed; expected the sweep extra: pip install 'specgen[sweep]'")
    # onnxruntime comes with the serve extra: naming the runtime extra beside it would be noise
    assert message("specgen serve", ["onnxruntime", "uvicorn"]).endswith("the serve extra: pip install 'specgen[serve]'")


def test_stdout_that_cannot_encode_a_path_escapes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PYTHONIOENCODING=ascii, a Windows cp1252 console: the line is printed escaped (as stderr does), not a
    UnicodeEncodeError after the command's work was done."""
    folder = tmp_path / "日本"
    folder.mkdir()
    shutil.copy(SPEC, folder / "digits_mlp.yaml")
    monkeypatch.chdir(tmp_path)
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii")
    monkeypatch.setattr(sys, "stdout", stream)
    assert main(["validate", "日本"]) == 0
    stream.flush()
    assert raw.getvalue() == b"ok: \\u65e5\\u672c/digits_mlp.yaml (digits_mlp: 4 layers, 17 variables)\n"


def test_the_command_table_is_the_modules() -> None:
    """COMMANDS lets `specgen --help` list the commands without importing them: each row's module is a command
    (its flags and its run), named by the row alone (the module no longer says its own name)."""
    commands = discover()
    assert [name for name, _ in commands] == [name for name, _, _ in COMMANDS]
    assert all(callable(c.add_arguments) and callable(c.run) and not hasattr(c, "NAME") for _, c in commands)


def _commands(top: argparse.ArgumentParser) -> dict[str, Any]:
    return dict(next(a for a in top._actions if isinstance(a, argparse._SubParsersAction)).choices)


def test_help_is_the_same_when_the_commands_load_lazily() -> None:
    """main's parser imports a command's module only when the command runs; what any --help prints is unchanged."""
    eager, lazy = parser(), parser(lazy=True)
    assert lazy.format_help() == eager.format_help()
    for name, command in _commands(lazy).items():
        assert command.load().format_help() == _commands(eager)[name].format_help(), name


def test_version_and_help_import_no_command_and_no_spec_stack() -> None:
    """`specgen --version`, `--help` (and a pre-commit hook's start) pay for argparse, not for pydantic, jinja2 and
    the spec/IR modules (358 modules and ~0.45 s before; 81 and ~0.13 s after, on the 2-core dev machine)."""
    code = ("import sys\nfrom specgen.cli import main\nfor argv in (['--version'], ['--help']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "print(' '.join(sorted(sys.modules)), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    loaded = done.stderr.split()
    heavy = [m for m in loaded if m.startswith(("specgen.commands.", "specgen.spec", "specgen.ir", "specgen.render",
                                                "specgen.review", "specgen.kinds", "specgen.diagnostics", "pydantic",
                                                "jinja2", "yaml", "onnx", "numpy"))]
    assert heavy == [] and "specgen.cli" in loaded, heavy
