"""A boolean key takes true or false only (ci checker F5): lax pydantic read `use_bias: 'off'`, `'0'`, `'yes'`, `0`
and `1` as booleans, where a number key refuses `'16'`, so a sweep's `choice: [true, 'true', 'yes']` passed the
repeat check and ran one trial three times. Every spec section's `bool` field is a fields.base.Flag."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic.functional_validators import BeforeValidator

import specgen
from specgen.cli import main
from specgen.fields.base import SpecModel, only_bool

ROOT = Path(__file__).resolve().parents[1]
SPEC_PACKAGES = ("specgen.spec", "specgen.fields", "specgen.kinds", "specgen.sweep")


def _subclasses(cls: type[SpecModel]) -> Iterator[type[SpecModel]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_every_boolean_key_of_a_spec_is_a_flag() -> None:
    for module in pkgutil.walk_packages(specgen.__path__, "specgen."):
        if module.name.startswith(SPEC_PACKAGES):
            importlib.import_module(module.name)
    plain = sorted({f"{cls.__module__}.{cls.__name__}.{name}" for cls in _subclasses(SpecModel)
                    for name, field in cls.model_fields.items() if field.annotation is bool
                    and not any(isinstance(m, BeforeValidator) and m.func is only_bool for m in field.metadata)})
    assert plain == [], f"boolean keys that take 'off' or 0: write them as fields.base.Flag: {plain}"
    assert len({cls for cls in _subclasses(SpecModel)}) > 100  # the spec's sections were imported


@pytest.mark.parametrize(("written", "received"), [
    ("'off'", "'off' (text"), ('"yes"', "'yes' (text"), ("'0'", "'0' (text"), ("0", "0 (a number"),
    ("1", "1 (a number"), ("1.0", "1.0 (a number")])
def test_a_boolean_key_refuses_text_and_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str], written: str,
                                                received: str) -> None:
    text = (ROOT / "examples" / "specs" / "digits_mlp.yaml").read_text()
    spec = tmp_path / "m.yaml"
    spec.write_text(text.replace("activation: relu, kernel_init", f"activation: relu, use_bias: {written}, kernel_init"))
    line = next(n for n, row in enumerate(spec.read_text().splitlines(), 1) if "use_bias" in row)
    col = spec.read_text().splitlines()[line - 1].index("use_bias: ") + len("use_bias: ") + 1
    assert main(["validate", str(spec)]) == 1
    assert capsys.readouterr().err == (
        f"{spec}:{line}:{col}: error: use_bias: expected true or false, received {received}: write true or false, "
        "unquoted) (in layer 'hidden')\n1 error found\n")
    spec.write_text(text.replace("activation: relu, kernel_init", "activation: relu, use_bias: false, kernel_init"))
    assert main(["validate", str(spec)]) == 0
