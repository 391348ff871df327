"""The JSON Schema in schemas/ is current, and every example spec validates against it."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from specgen.cli import main
from specgen.schema import schema_text

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "schemas" / "specgen.schema.json"
SPECS = sorted((ROOT / "examples" / "specs").glob("*.yaml"))


def test_schema_file_is_current() -> None:
    assert SCHEMA.read_text() == schema_text(), "schemas/ is stale: run `specgen schema`"


def test_schema_is_deterministic(tmp_path: Path) -> None:
    assert main(["schema", "-o", str(tmp_path / "a.json")]) == 0
    assert main(["schema", "-o", str(tmp_path / "b.json")]) == 0
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes() == SCHEMA.read_bytes()
    assert main(["schema", "-o", str(tmp_path / "a.json"), "--check"]) == 0
    (tmp_path / "a.json").write_text("{}\n")
    assert main(["schema", "-o", str(tmp_path / "a.json"), "--check"]) == 1


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_examples_validate_against_the_schema(spec: Path) -> None:
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    document = yaml.safe_load(spec.read_text())
    assert list(validator.iter_errors(document)) == []
    assert spec.read_text().startswith("# yaml-language-server: $schema=../../schemas/specgen.schema.json\n")


@pytest.mark.parametrize(("path", "value"), [
    (("layers", 0, "op"), "conv3d"),
    (("layers", 0, "units"), "many"),
    (("train", "batch_size"), 0),
    (("name",), "has space"),
])
def test_schema_rejects_what_pydantic_rejects(path: tuple[str | int, ...], value: object) -> None:
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    document = yaml.safe_load((ROOT / "examples" / "specs" / "digits_mlp.yaml").read_text())
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert list(validator.iter_errors(document)) != []
