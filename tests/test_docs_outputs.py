"""What README.md and docs/*.md show specgen printing is what it prints.

Every `$ specgen ...` line of a fenced block whose command needs no TensorFlow and no training run (validate,
build, report without --checkpoint/--run/--sweep, graph, explain, diff, schema, and any `--help`) is run, in
process through specgen.cli.main, in a fresh copy of the repository's spec files (tmp_path/repo: pyproject.toml,
examples/, generated/, schemas/), and its output is compared with the lines the doc shows under it. The commands
of one block run in order in one copy (`build` twice, `schema -o` then `--check`). A command that names a file
the copy lacks is either built by SETUPS (the doc says exactly what it holds) or listed in SKIP with its reason;
any other is a failure, so nothing is left out silently.

The comparison is exact, line by line, after these normalizations and no others:
- stdout and stderr go to one stream in the order they are written, as a terminal shows them (stdout is
  line-buffered there), and the docs show them together;
- `[exit N]` (or `$ echo $?` and its number) is the exit status, compared on its own, not an output line;
- a line that is only `...` stands for any number of real lines, the trim marker the docs use (cli.md says so);
- trailing whitespace on each line and blank lines at the end are dropped (a blank line separates one shown
  command from the next; Markdown editors strip trailing spaces);
- COLUMNS=200, so argparse's usage lines are not wrapped at the width of whatever terminal runs the tests.
No path is rewritten: specgen prints paths relative to the working directory, so the tmp folder never shows.
The subcommands that need TensorFlow or a run (train, export, infer, data, restore-plan, import, sweep, serve,
curves, report --checkpoint/--run/--sweep) are out of scope by rule; tests of their own cover them.
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from docs_blocks import ROOT, Block, Shown, blocks, matches, yaml_specs

from specgen.cli import main

RUN = frozenset({"validate", "build", "report", "graph", "explain", "diff", "schema"})
NEEDS_RUN = frozenset({"--checkpoint", "--run", "--sweep"})
COPIED = ("examples", "generated", "schemas")
EXAMPLE = ROOT / "examples" / "specs" / "digits_cnn.yaml"


def _edited(*edits: tuple[str, str]) -> Callable[[], str]:
    """digits_cnn.yaml with the doc's edits, each old text present exactly once (or the doc's diff is stale)."""
    def text() -> str:
        spec = EXAMPLE.read_text(encoding="utf-8")
        for old, new in edits:
            assert spec.count(old) == 1, f"{old!r} is not once in {EXAMPLE.name}: the doc's edit no longer applies"
            spec = spec.replace(old, new)
        return spec
    return text


_BROKEN = _edited(("filters: 16, kernel: 3", "filter: 16, kernel: 3"), ("op: batch_norm", "op: batch_nrm"),
                  ("rate: 0.2", "rate: 1.5"))  # the diff above docs/cli.md's `validate broken.yaml`
_BROKEN2 = (("size: 2}", "size: 2, input: relu}"), ("logits: logits", "logits: logit"),
            ("variables: head\n", "variables: heads\n"))  # the diff above its `validate broken2.yaml`
_TANH = ("extends: wide.yaml\nlayers:\n  - {name: head/fc2, activation: tanh}\n"
         "  - {name: head/drop, op: dropout, rate: 0.1, after: head/fc2}\n")  # as docs/review.md describes it

# (doc, command  # comment) -> (working folder under the copy, {file under it: its text}), written just before.
SETUPS: dict[tuple[str, str], tuple[str, dict[str, Callable[[], str]]]] = {
    ("README.md", "specgen validate broken.yaml"): (".", {"broken.yaml": _edited(
        ("filters: 16, kernel: 3", "filtres: 16, kernel: 3"), ("op: batch_norm", "op: batch_nrm"))}),
    ("README.md", "specgen validate broken2.yaml"): (".", {"broken2.yaml": _edited(
        ("variables: backbone", "variables: bakbone"))}),
    ("docs/cli.md", "specgen validate broken.yaml"): (".", {"broken.yaml": _BROKEN}),
    ("docs/cli.md", "specgen build broken.yaml --check"): (".", {"broken.yaml": _BROKEN}),
    ("docs/cli.md", "specgen validate broken2.yaml"): (".", {"broken2.yaml": _edited(*_BROKEN2)}),
    ("docs/cli.md", "specgen validate broken2.yaml  # after fixing line 15"): (".", {"broken2.yaml": _edited(
        *_BROKEN2[1:])}),
    ("docs/cli.md", "specgen validate  # in a folder without pyproject.toml"): ("../empty", {}),
    ("docs/cli.md", "specgen validate syntax.yaml"): (".", {"syntax.yaml": _edited(
        ("epsilon: 0.001}", "epsilon: 0.001"))}),  # the diff above its `validate syntax.yaml`
    ("docs/review.md", "specgen diff family/wide.yaml family/tanh.yaml --fail-on interface,checkpoint,layers"): (
        "examples/specs", {"family/tanh.yaml": lambda: _TANH}),
    ("docs/spec.md", "specgen explain no_keep.yaml checkpoint.keep"): (
        "examples/specs/family", {"no_keep.yaml": lambda: "extends: wide.yaml\ncheckpoint: {keep: null}\n"}),
    ("docs/spec.md", "specgen validate text_encoder.yaml"): (".", {"text_encoder.yaml": lambda: next(  # shown whole
        text for doc, _, text in yaml_specs() if doc == "docs/spec.md" and "\nname: text_encoder\n" in text)}),
}

_PARTIAL = "a scratch spec the doc shows only in part (a fragment, or an edit it describes in words)"
_HOSTILE = "a deliberately malformed file the doc describes; tests/test_yaml_source.py and test_cli_hostile.py run them"
# (doc, command  # comment) -> why the shown output is not compared. A stale entry (no such command left) fails.
SKIP: dict[tuple[str, str], str] = {
    ("docs/cli.md", "specgen validate big.yaml"): _PARTIAL + ": big.yaml is described, not shown",
    ("docs/cli.md", "specgen validate --strict big.yaml"): _PARTIAL + ": big.yaml is described, not shown",
    ("docs/cli.md", "specgen build examples/specs/digits_cnn.yaml --out build/specgen-out --check"):
        "needs the four hand edits the prose describes (model.py, collections.yaml, model.onnx, notes.txt)",
    ("docs/export.md", "specgen validate digits_cnn.yaml"): _PARTIAL + ": digits_cnn.yaml with an export section",
    ("docs/features.md", "specgen validate lm_clip.yaml"): _PARTIAL,
    ("docs/pruning.md", "specgen validate net.yaml"): _PARTIAL,
    ("docs/review.md", "specgen diff mlp.yaml swapped.yaml --map --fail-on checkpoint,layers"):
        "mlp.yaml and swapped.yaml are described in words; tests/test_diff_graph.py builds and checks them",
    ("docs/review.md", "specgen diff old_wide.yaml family/wide.yaml --map --fail-on interface,checkpoint"):
        _PARTIAL + ": old_wide.yaml is family/wide.yaml before a rename",
    ("docs/security.md", "specgen validate inject.yaml"): _HOSTILE,
    ("docs/security.md", "specgen validate tag.yaml"): _HOSTILE,
    ("docs/security.md", "specgen validate dup.yaml"): _HOSTILE,
    ("docs/security.md", "specgen validate bomb.yaml"): _HOSTILE,
    ("docs/security.md", "specgen validate deep.yaml"): _HOSTILE,
    ("docs/security.md", "specgen validate big.yaml"): _HOSTILE,
    ("docs/spec.md", "specgen validate v.yaml  # v.yaml: extends: base.yaml, layers: [{name: flat, remove: true}]"):
        _PARTIAL + ": its base.yaml is a fragment",
    ("docs/spec.md", "specgen validate variants/bad.yaml"): _PARTIAL,
    ("docs/spec.md", "specgen validate tcn.yaml"): _PARTIAL + ": the layers of a spec, without the rest",
    ("docs/spec.md", "specgen report tcn.yaml"): _PARTIAL + ": the layers of a spec, without the rest",
    ("docs/spec.md", "specgen report seq.yaml"): _PARTIAL + ": the layers of a spec, without the rest",
    ("docs/spec.md", "specgen report states.yaml"): _PARTIAL + ": the layers of a spec, without the rest",
    ("docs/spec.md", "specgen validate bad.yaml  # head reads enc/state"): _PARTIAL,
    ("docs/spec.md", "specgen validate bad.yaml  # dec: units 32, initial_state [enc/state] of a gru with 24 units"):
        _PARTIAL,
    ("docs/spec.md", "specgen report att.yaml"): _PARTIAL + ": the layers of a spec, without the rest",
    ("docs/spec.md", "specgen report cross.yaml"): _PARTIAL + ": the layers of a spec, without the rest",
    ("docs/spec.md", "specgen report pos.yaml"): _PARTIAL + ": the layers of a spec, without the rest",
    ("docs/spec.md", "specgen validate tagger.yaml"): _PARTIAL,
    ("docs/spec.md", "specgen report tagger.yaml"): _PARTIAL,
    ("docs/spec.md", "specgen validate bad.yaml"): _PARTIAL,
    ("docs/spec.md", "specgen validate spec.yaml"): _PARTIAL + ": a spec with one misspelt key",
    ("docs/spec.md", "specgen validate td.yaml"): _PARTIAL,
    ("docs/spec.md", "specgen validate quiet.yaml"): _PARTIAL,
    ("docs/spec.md", "specgen report multitask.yaml"): _PARTIAL,
    ("docs/spec.md", "specgen validate broken.yaml"): _PARTIAL + ": a spec with several mistakes, described",
    ("docs/tracking.md", "specgen validate spec.yaml"): _PARTIAL + ": a spec with a misspelt tracking URI",
    ("docs/training.md", "specgen validate bad.yaml  # sine.yaml with batch_size: 32"): _PARTIAL,
}


def in_scope(shown: Shown) -> bool:
    argv = shown.argv
    if len(argv) < 2 or (not shown.lines and shown.exit is None):  # another tool, or a command shown without output
        return False
    return "--help" in argv or "-h" in argv or (argv[1] in RUN and not NEEDS_RUN & set(argv))


def _files(argv: list[str]) -> list[str]:
    """The spec files a command reads (an `-o`/`--out` target is written, not read)."""
    outputs = {i + 1 for i, word in enumerate(argv) if word in ("-o", "--out", "--output")}
    return [w for i, w in enumerate(argv) if i not in outputs and re.search(r"\.ya?ml$", w)]


def _run(argv: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[str]]:
    monkeypatch.chdir(cwd)
    both = io.StringIO()
    with contextlib.redirect_stdout(both), contextlib.redirect_stderr(both):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's usage errors and --help
            code = int(exc.code or 0)
    lines = [line.rstrip() for line in both.getvalue().split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return code, lines


BLOCKS = [b for b in blocks() if any(in_scope(s) and s.key not in SKIP for s in b.shown)]


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_shown_output_is_real(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    repo = tmp_path / "repo"
    (tmp_path / "empty").mkdir()
    repo.mkdir()
    shutil.copy2(ROOT / "pyproject.toml", repo / "pyproject.toml")
    for name in COPIED:
        shutil.copytree(ROOT / name, repo / name)
    problems: list[str] = []
    for shown in filter(in_scope, block.shown):
        if shown.key in SKIP:
            continue
        folder, files = SETUPS.get(shown.key, (".", {}))
        cwd = (repo / folder).resolve()
        for name, text in files.items():
            (cwd / name).write_text(text(), encoding="utf-8")
        missing = [f for f in _files(shown.argv) if not (cwd / f).exists()]
        assert not missing, (f"{shown.doc}:{shown.line}: `{shown.command}` reads {missing}, which the copy lacks: "
                             f"build it in SETUPS or list {shown.key} in SKIP with the reason")
        code, real = _run(shown.argv[1:], cwd, monkeypatch)
        if not matches(shown.lines, real) or shown.exit not in (None, code):
            problems.append(f"{shown.doc}:{shown.line}: $ {shown.command}\n--- shown (exit {shown.exit})\n"
                            + "\n".join(shown.lines) + f"\n+++ real (exit {code})\n" + "\n".join(real))
    assert not problems, "\n\n".join(problems)


def test_every_skip_and_setup_names_a_shown_command() -> None:
    keys = {s.key for b in blocks() for s in b.shown if in_scope(s)}
    assert not (set(SKIP) | set(SETUPS)) - keys, "stale entries: the docs no longer show these commands"
    assert not set(SKIP) & set(SETUPS)


SPECS = yaml_specs()


@pytest.mark.parametrize(("doc", "line", "text"), SPECS, ids=[f"{d}:{n}" for d, n, _ in SPECS])
def test_a_whole_spec_shown_validates(doc: str, line: int, text: str, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A block that reads as a complete spec (README's "What a spec looks like") is one: it validates."""
    (tmp_path / "shown.yaml").write_text(text, encoding="utf-8")
    code, real = _run(["validate", "shown.yaml"], tmp_path, monkeypatch)
    assert code == 0, f"{doc}:{line}: the spec shown does not validate:\n" + "\n".join(real)


# Figures in the shown output of commands out of scope above (they need TensorFlow or a run) that follow from the
# spec alone, so they are checked here without running the command: cheap (about a second) and deterministic.

_SIZES = re.compile(r"^(?:int8|fp16): wrote \S+\.(int8|fp16)\.onnx \(([\d,]+) bytes, float32 ([\d,]+)\)")


def _export_sizes(spec: Path) -> dict[str, int]:
    """The bytes of `specgen export`'s model.onnx and fp16 variant for `spec`: the graph `build` renders with every
    weight in place (stored whole, so their values do not change the size; zeros here), as the export writes it."""
    import numpy as np
    import onnx

    from specgen.pipeline import build
    from specgen.runtime.onnx_export import with_weights
    from specgen.runtime.precision.base import Calibration
    from specgen.runtime.precision.fp16 import convert
    from specgen.spec.load import load_spec

    built = build(load_spec(spec))
    values = {v.path: np.zeros(v.shape, np.float32) for v in built.ir.model_variables}
    model = with_weights(onnx.load_from_string(built.files["model.onnx"]), built.ir, values)
    float32 = model.SerializeToString(deterministic=True)
    return {"float32": len(float32), "fp16": len(convert(float32, Calibration())[0])}


def test_export_md_file_sizes_are_the_exports() -> None:
    """docs/export.md's `int8: wrote ...` / `fp16: wrote ...` lines of the digits CNN: the float32 size in both, and
    the fp16 variant's own size, are what an export of examples/specs/digits_cnn.yaml writes whatever the weights
    and the CPU. The int8 variant's own size is not checked: it needs a calibrated quantization, and its bytes
    depend on the exporting CPU's kind (VNNI or not)."""
    lines = [(s, line) for b in blocks() for s in b.shown if s.doc == "docs/export.md" and len(s.argv) > 2
             and s.argv[1] == "export" and s.argv[2] == "digits_cnn.yaml" for line in s.lines]
    found = [(s, m) for s, line in lines if (m := _SIZES.match(line))]
    assert {m.group(1) for _, m in found} == {"int8", "fp16"}, "export.md's size lines moved: update this test"
    real = _export_sizes(EXAMPLE)
    problems = [f"{s.doc}:{s.line}: {m.group(0)}" for s, m in found
                if int(m.group(3).replace(",", "")) != real["float32"]
                or (m.group(1) == "fp16" and int(m.group(2).replace(",", "")) != real["fp16"])]
    assert not problems, f"real: float32 {real['float32']:,} bytes, fp16 {real['fp16']:,}:\n" + "\n".join(problems)


_ELIDED = re.compile(r"^\.\.\. \((\d+) more (?:\w+ )?variables")


def test_restore_plan_elisions_count_the_rows_left_out() -> None:
    """A `specgen restore-plan` block trimmed with `... (N more ... variables ...)`: the plan has one row per model
    variable in the spec's order, so N is the number of variables between the rows shown around the marker, and
    the summary's counts add up over the rows shown and left out."""
    from specgen.pipeline import build
    from specgen.spec.load import load_spec

    checked = 0
    for shown in (s for b in blocks() for s in b.shown if len(s.argv) > 2 and s.argv[1] == "restore-plan"):
        marks = [i for i, line in enumerate(shown.lines) if _ELIDED.match(line)]
        if not marks:
            continue
        paths = [v.path for v in build(load_spec(ROOT / shown.argv[2])).ir.model_variables]
        rows = {line.split()[0]: line.split()[1] for line in shown.lines[2:]
                if line.split() and line.split()[0] in paths}
        for i in marks:
            before, after = shown.lines[i - 1].split()[0], shown.lines[i + 1].split()[0]
            left_out = paths.index(after) - paths.index(before) - 1
            n = int(_ELIDED.match(shown.lines[i]).group(1))
            assert n == left_out, f"{shown.doc}:{shown.line}: '{shown.lines[i]}', but {left_out} rows lie between"
            checked += 1
            summary = next(line for line in shown.lines if line.startswith("restored "))
            restored = int(summary.split()[1].rstrip(","))
            if "all restored" in shown.lines[i]:
                shown_restored = sum(status == "restored" for status in rows.values())
                assert restored == shown_restored + n, f"{shown.doc}:{shown.line}: '{summary}' against the rows"
        assert len(rows) + sum(int(_ELIDED.match(shown.lines[i]).group(1)) for i in marks) == len(paths), (
            f"{shown.doc}:{shown.line}: the rows shown and left out are not the spec's {len(paths)} variables")
    assert checked, "no trimmed restore-plan block left: drop this test"
