"""The golden set: what `specgen build` renders for specs that use every training feature and every allowed pair.

Issue 18 restructures the training code and must change no behaviour: the rendered files of
tests/golden/specs stay byte-identical (tests/golden/README.md says how to regenerate, and when a byte
may change). The pair tests keep the set complete: every pair of features specgen allows is used by a
golden spec, no refused pair is, and `specgen validate` still allows and refuses exactly what
tests/golden/compat.py says (the seed of the issue's compatibility table).
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from golden import compat, pairs, probe

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
NEW_SPEC = ("add a golden spec that uses them, a new tests/golden/specs/<name>.yaml (no existing golden byte changes), "
            "then `specgen build tests/golden/specs --out tests/golden/generated` (`PYTHONPATH=tests python -m "
            "golden.pairs` lists what is not covered)")
ALL_PAIRS = {compat.pair(a, b) for a, b in itertools.combinations(compat.FEATURE_NAMES, 2)}
ALLOWED = {compat.pair(a, b) for a, partners in compat.ALLOWED.items() for b in partners}


@pytest.fixture(scope="module")
def specs() -> dict[str, Any]:
    """Each golden spec's YAML, read once."""
    return pairs.golden_specs()


def _committed_files() -> int:
    """The files under tests/golden/generated/<spec>/ (what the last regeneration wrote)."""
    return sum(1 for folder in (GOLDEN / "generated").iterdir() if folder.is_dir()
               for path in folder.iterdir() if path.is_file())


def test_the_golden_files_are_what_build_renders_today() -> None:
    done = subprocess.run([sys.executable, "-m", "specgen", "build", "tests/golden/specs", "--out",
                           "tests/golden/generated", "--check"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)
    # build counts the files it renders; the committed ones are counted on disk: a file build no longer renders (left
    # behind) or one it renders anew changes the count even where --check would not see it.
    files = _committed_files()
    assert (done.returncode, done.stdout) == (0, f"ok: {files} generated files in tests/golden/generated are up to date\n"), (
        f"{done.stdout}{done.stderr}\nthe golden files changed ({files} committed); if that is intended, say why in the "
        "commit and run `specgen build tests/golden/specs --out tests/golden/generated` (tests/golden/README.md), "
        "removing files it no longer writes")


def test_every_golden_spec_has_its_folder_and_no_other_folder_is_left(specs: dict[str, Any]) -> None:
    assert specs, "no golden spec in tests/golden/specs"
    assert sorted(p.name for p in (GOLDEN / "generated").iterdir()) == sorted(specs), (
        "tests/golden/generated holds one folder per spec of tests/golden/specs: run `specgen build tests/golden/specs "
        "--out tests/golden/generated` and remove the folders of specs that are gone")
    assert [spec["name"] for spec in specs.values()] == list(specs)  # the file stem is the spec's name


def test_every_feature_name_has_its_detector() -> None:
    assert pairs.detector_mismatch() is None, pairs.detector_mismatch()


def test_the_table_sorts_every_pair_into_exactly_one_row() -> None:
    refused, runtime = set(compat.REFUSED), set(compat.RUNTIME_REFUSED)
    names = len(compat.FEATURE_NAMES)
    assert len(ALL_PAIRS) == names * (names - 1) // 2
    unknown = sorted(p for p in refused | runtime if p not in ALL_PAIRS)
    assert not unknown, f"refused pairs of tests/golden/compat.py not in table order or not of its names: {unknown}"
    assert ALLOWED | refused | runtime == ALL_PAIRS
    assert not (ALLOWED & refused or ALLOWED & runtime or refused & runtime)


def test_every_allowed_pair_is_used_by_a_golden_spec(specs: dict[str, Any]) -> None:
    covered = pairs.coverage(specs)
    missing = sorted(ALLOWED - covered.keys())
    assert not missing, f"allowed pairs that no golden spec uses: {missing}; {NEW_SPEC}"


def test_no_golden_spec_uses_a_refused_pair(specs: dict[str, Any]) -> None:
    covered = pairs.coverage(specs)
    used = {p: covered[p] for p in (set(compat.REFUSED) | set(compat.RUNTIME_REFUSED)) & covered.keys()}
    assert not used, f"refused pairs in golden specs: {used}"


def test_every_kind_of_every_axis_is_used(specs: dict[str, Any]) -> None:
    used = set().union(*(pairs.kinds(spec) for spec in specs.values()))
    missing = [(axis, kind) for axis, tests in pairs.AXES.items() for kind in tests if (axis, kind) not in used]
    assert not missing, f"kinds no golden spec uses: {missing}; {NEW_SPEC}"


def test_features_are_read_from_the_yaml_as_written(specs: dict[str, Any]) -> None:
    """The detectors themselves: specs whose features are known by reading them."""
    assert pairs.features(specs["lm_with_allowed"]) == {
        "ema", "levenberg_marquardt", "metrics", "full_batch", "frozen", "restore", "sync_batch_norm", "export_ema"}
    assert pairs.features(specs["adamw_default_decay"]) == {"weight_decay", "probe", "schedule", "opt_adamw"}
    assert pairs.features(specs["model_only"]) == set()


def test_validate_allows_and_refuses_exactly_what_the_table_says(tmp_path: Path) -> None:
    found = probe.validate_all(tmp_path)
    assert {p for p, messages in found.items() if messages} == set(compat.REFUSED)
    assert {p: found[p] for p in compat.REFUSED} == compat.REFUSED
    # Refused only when `specgen train` starts (no TensorFlow here): validate accepts them today.
    assert all(found[p] == () for p in compat.RUNTIME_REFUSED)


def test_the_readme_holds_the_refusal_table() -> None:
    assert compat.markdown() in (GOLDEN / "README.md").read_text(encoding="utf-8"), (
        "tests/golden/README.md's \"Today's refusal table\" is not compat.markdown(): replace it with the output of "
        "`PYTHONPATH=tests python -m golden.compat`")


def test_the_readme_lists_each_spec_and_its_features(specs: dict[str, Any]) -> None:
    table = pairs.markdown(specs)
    assert table in (GOLDEN / "README.md").read_text(encoding="utf-8"), (
        f"tests/golden/README.md's \"The specs\" table is not what the specs use; replace it with:\n{table}")
