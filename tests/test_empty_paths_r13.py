"""An empty word where a command reads a path is a command-line mistake, as where it writes one (OutputFile).

Path("") is Path("."): `specgen serve "$REPO"` with REPO unset served the folder it ran in, and `export
--checkpoint ''` or `restore-plan --from ''` failed with errors about a folder the user never named. Each is one
line and exit 2 now, before anything is read or started (commands/common.py InputPath).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import run_cli as run

EMPTY = "received an empty path (an unset variable in a script?); expected a file or folder to read"
CASES = [
    (["serve", ""], "serve", "repo"),
    (["infer", "", "--input", "x.npz"], "infer", "model"),
    (["infer", "m.onnx", "--input", ""], "infer", "--input"),
    (["validate", "s.yaml", ""], "validate", "paths"),
    (["restore-plan", "s.yaml", "--from", ""], "restore-plan", "--from"),
    (["export", "s.yaml", "--checkpoint", "", "-o", "out"], "export", "--checkpoint"),
    (["train", "s.yaml", "--resume-from", ""], "train", "--resume-from"),
    (["report", ""], "report", "paths"),
    (["curves", ""], "curves", "RUN"),
]


@pytest.mark.parametrize(("args", "command", "name"), CASES, ids=[" ".join(c[0]) or "-" for c in CASES])
def test_an_empty_path_to_read_is_one_usage_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                                 command: str, name: str) -> None:
    assert run(args, capsys, tmp_path) == (2, "", f"specgen {command}: error: {name}: {EMPTY}\n")
    assert list(tmp_path.iterdir()) == []  # nothing read, nothing written


@pytest.mark.parametrize("namespace", ["Bad_NS", "a b: {x", "", "a-", "a" * 64])
def test_a_katib_namespace_kubernetes_refuses_is_one_usage_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                namespace: str) -> None:
    """--namespace was written into the Experiment unchecked (and '' dropped): kubectl refused it at apply."""
    spec = Path(__file__).resolve().parents[1] / "examples" / "sweep" / "digits_cnn.yaml"
    args = ["sweep", str(spec), "--emit", "katib", "--image", "r/x:1", "--set", "sweep.pruner=none",
            "--namespace", namespace, "-o", "k.yaml"]
    assert run(args, capsys, tmp_path) == (2, "", f"specgen sweep: error: --namespace {namespace!r}: expected a "
                                              "Kubernetes namespace: 1 to 63 lower-case letters, digits and '-', "
                                              "starting and ending with a letter or digit (RFC 1123); leave the flag "
                                              "out for kubectl's own\n")
    assert list(tmp_path.iterdir()) == []
