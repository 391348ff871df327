"""`specgen import keras` of KerasHub backbones on hostile configs: a valid spec or one error line, in bounded time
and memory; never a traceback (issue 28: `num_layers: 100000000` grew past 1.8 GB, `vocabulary_size: 2**31` and a
`dtype: true` ended in tracebacks).

One tiny BertBackbone (1 layer, hidden 8) is saved with KerasHub; its config.json is mutated at one to three places
(an argument of another type, a huge, negative or boolean number, a missing key, an unknown key, a wrong nesting, the
class, module or name changed) and the result imported in process, as the CLI does. Any exception other than
SpecError is a bug, as is a refusal that spans lines, does not name the source, or calls the importer's own output
invalid ("please report it"). Each import is held to CASE_SECONDS and CASE_BYTES of Python allocations
(tracemalloc's peak): the arguments are checked before anything is built, so a refusal costs what reading the file
costs. Derandomized, no example database: CI sees the same 150 configs every time (about 2 s);
SPECGEN_FUZZ_EXAMPLES=5000 searches further, SPECGEN_FUZZ_RANDOM=1 draws a fresh seed.
"""

from __future__ import annotations

import copy
import json
import math
import os
import tempfile
import time
import tracemalloc
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specgen.cli import main
from specgen.diagnostics import MAX_MESSAGE, SpecError
from specgen.fields.base import MAX_NAME_CHARS
from specgen.importers.keras import import_keras
from specgen.importers.keras.keras_hub import BACKBONES
from specgen.ir.resolve import build_ir
from specgen.spec.load import load_spec_text

keras_hub = pytest.importorskip("keras_hub")
keras = pytest.importorskip("keras")

SIZES = {"vocabulary_size": 20, "num_layers": 1, "num_heads": 2, "hidden_dim": 8, "intermediate_dim": 16,
         "max_sequence_length": 8}
# A refusal reads config.json and, at most, the weights' key list; a success also builds an 18-layer spec. Measured
# over the 150 cases: 90 ms and 0.7 MiB at most; at the num_layers bound (9,999 spec layers) 0.75 s and 7 MiB.
CASE_SECONDS = 10.0  # ~10x the bound's time, for a loaded CI machine; 100,000,000 layers took minutes
CASE_BYTES = 64 * 2**20  # ~9x the bound's peak; 100,000,000 layers took 1.8 GB
DTYPES = [{"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float16"}, "registered_name": None},
          {"module": "keras", "class_name": "DTypePolicy", "config": {"name": 5}, "registered_name": None},
          {"class_name": "DTypePolicyMap", "config": {}}, {"config": []}, "bfloat16", "mixed_float16", "float32"]
VALUES = [None, True, False, 0, -1, 1, 2, 3, 7, 0.5, 1.0, 0.0, 2**31 - 1, 2**31, 2**63, 10**8, 10**30, 1e308,
          math.nan, math.inf, "3", "", "x", "__init__", "a/b", "a\nb", "名前", "x" * 300, [], {}, [8], [1, 2],
          {"class_name": "BertBackbone"}, *DTYPES]
ARGUMENTS = ["name", "trainable", "dtype", *SIZES, "dropout", "num_segments", "rope", "__class__", "a\nb\u202e"]
CLASSES = [*BACKBONES, "DistilBertBackbone", "Functional", "", 5, None]


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The saved backbone's config.json and the other members of its .keras."""
    keras.utils.set_random_seed(0)
    path = tmp_path_factory.mktemp("hub_fuzz") / "bert.keras"
    keras_hub.models.BertBackbone(**SIZES).save(path)
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("config.json")), {n: archive.read(n) for n in archive.namelist()}


def write(path: Path, config: Any, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, json.dumps(config) if name == "config.json" else data)
    return path


@st.composite
def mutations(draw: st.DrawFn) -> list[tuple[str, Any, Any]]:
    """One to three (where, key, value) changes: `inner` (the constructor arguments), `top` (class_name, module,
    registered_name, config) or `nest` (the arguments moved under another level)."""
    changes = []
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["inner", "inner", "inner", "inner", "top", "nest"]))
        if where == "inner":
            key = draw(st.sampled_from(ARGUMENTS))
            changes.append(("inner", key, draw(st.sampled_from(["<delete>", *VALUES]))))
        elif where == "top":
            key = draw(st.sampled_from(["class_name", "module", "registered_name", "config"]))
            pool = CLASSES if key == "class_name" else ["<delete>", *VALUES]
            changes.append(("top", key, draw(st.sampled_from(pool))))
        else:
            changes.append(("nest", draw(st.sampled_from(["list", "config", "dict"])), None))
    return changes


def mutated(config: dict[str, Any], changes: list[tuple[str, Any, Any]]) -> Any:
    config = copy.deepcopy(config)
    for where, key, value in changes:
        inner = config.get("config") if isinstance(config, dict) else None
        target = inner if where == "inner" else config
        if where == "nest" and isinstance(config, dict):
            wrapped = {"list": [inner], "config": {"config": inner}, "dict": {"args": inner}}[key]
            config["config"] = wrapped
        elif isinstance(target, dict) and value == "<delete>":
            target.pop(key, None)
        elif isinstance(target, dict):
            target[key] = copy.deepcopy(value)
    return config


def check(source: Path, output: Path) -> None:
    """A spec that validates, or SpecError of one-line refusals naming the source with nothing written; within
    CASE_SECONDS and CASE_BYTES."""
    start = time.perf_counter()
    tracemalloc.start()
    try:
        import_keras(str(source), output)
    except SpecError as exc:
        assert exc.diagnostics and not output.exists()
        for diagnostic in exc.diagnostics:
            line = str(diagnostic)
            assert line.startswith(f"{source}: error: "), line[:300]
            assert "please report" not in line, line[:300]
            assert len(line.splitlines()) == 1, line[:300]
            assert len(line) <= MAX_MESSAGE + len(str(source)) + 20, len(line)
    else:
        build_ir(load_spec_text(output.read_text(), str(output), path=output))
        output.unlink()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert time.perf_counter() - start < CASE_SECONDS
    assert peak < CASE_BYTES, peak


def fuzz(examples: int) -> settings:
    return settings(deadline=None, derandomize=not os.environ.get("SPECGEN_FUZZ_RANDOM"), database=None,
                    max_examples=int(os.environ.get("SPECGEN_FUZZ_EXAMPLES", examples)),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def test_the_seed_imports(seed: tuple[dict[str, Any], dict[str, bytes]], tmp_path: Path) -> None:
    """Mutations of a config that is already refused would test only one refusal."""
    config, members = seed
    result = import_keras(str(write(tmp_path / "m.keras", config, members)), tmp_path / "m.yaml")
    assert (result.layers, result.variables) == (18, 23)


@fuzz(150)
@given(mutations())
def test_mutated_backbone_configs_import_or_refuse_in_one_line(seed: tuple[dict[str, Any], dict[str, bytes]],
                                                                changes: list[tuple[str, Any, Any]]) -> None:
    config, members = seed
    with tempfile.TemporaryDirectory() as folder:
        check(write(Path(folder) / "m.keras", mutated(config, changes), members), Path(folder) / "m.yaml")


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("num_layers", 10**8, "received 100000000 in config.json, expected an integer from 1 to 1110 (each makes 9 spec "
                          "layers, and a spec holds at most 10000)"),
    ("vocabulary_size", 2**31, "received 2147483648 in config.json, expected an integer from 1 to 2147483647"),
    ("hidden_dim", True, "received True in config.json, expected an integer from 1 to 2147483647"),
    ("num_heads", 2.0, "received 2.0 in config.json, expected an integer from 1 to 2147483647"),
    ("intermediate_dim", -1, "received -1 in config.json, expected an integer from 1 to 2147483647"),
    ("vocabulary_size", "<delete>", "missing in config.json, expected an integer from 1 to 2147483647"),
    ("dropout", True, "received True in config.json, expected a number from 0 to below 1"),
    ("dropout", math.nan, "received nan in config.json, expected a number from 0 to below 1"),
    ("trainable", 1, "received 1 in config.json, expected true or false"),
    ("name", 5, "received 5 in config.json, expected a string"),
    ("dtype", True, "received True in config.json, expected float32, as a string or Keras' DTypePolicy (specgen "
                    "runs float32)"),
    ("dtype", DTYPES[0], "received DTypePolicy({'name': 'float16'}) in config.json, expected float32, as a string "
                         "or Keras' DTypePolicy (specgen runs float32)"),
])
def test_each_argument_is_checked_by_the_table(seed: tuple[dict[str, Any], dict[str, bytes]], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str], key: str, value: Any,
                                               expected: str) -> None:
    config, members = seed
    source = write(tmp_path / "m.keras", mutated(config, [("inner", key, value)]), members)
    assert main(["import", "keras", str(source), "-o", str(tmp_path / "m.yaml")]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{source}: error: KerasHub BertBackbone: argument {key}: {expected}", "1 error found"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.keras"]


def test_the_layer_bound_is_cheap(seed: tuple[dict[str, Any], dict[str, bytes]], tmp_path: Path) -> None:
    """At the bound (1,110 layers: 9,999 spec layers) every layer's shapes are worked out, then the weights (of one
    layer) refused: within the fuzz test's time and memory."""
    config, members = seed
    source = write(tmp_path / "m.keras", mutated(config, [("inner", "num_layers", 1110)]), members)
    start = time.perf_counter()
    tracemalloc.start()
    with pytest.raises(SpecError) as caught:
        import_keras(str(source), tmp_path / "m.yaml")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert time.perf_counter() - start < CASE_SECONDS and peak < CASE_BYTES, peak
    assert str(caught.value) == (
        f"{source}: error: the weights hold no value for 17744 ('transformer_layer_1/self_attention_layer/query/kernel', "
        "'transformer_layer_1/self_attention_layer/query/bias', 'transformer_layer_1/self_attention_layer/key/kernel', "
        "'transformer_layer_1/self_attention_layer/key/bias', 'transformer_layer_1/self_attention_layer/value/kernel' "
        "and 17739 more) of the 17767 variables config.json gives (each looked for by its path and as "
        "<layer>/vars/<i>): config.json and the weights disagree")


@pytest.mark.parametrize(("name", "spec_name"), [("__init__", "init"), ("x" * 300, "x" * (MAX_NAME_CHARS - 9) + "_02fd6825"),
                                                 ("bert-base", "bert_base"), ("9lives", "layer_9lives")])
def test_names_the_spec_refuses_are_renamed(seed: tuple[dict[str, Any], dict[str, bytes]], tmp_path: Path,
                                            name: str, spec_name: str) -> None:
    """The backbone's name is checked with the spec's own pattern and renamed as every Keras name is (listed in the
    header), never written for the spec to refuse."""
    config, members = seed
    source = write(tmp_path / "m.keras", mutated(config, [("inner", "name", name)]), members)
    result = import_keras(str(source), tmp_path / "m.yaml")
    text = result.spec.read_text()
    assert f"\nname: {spec_name}\n" in text
    assert f"#   model {name!r} -> {spec_name!r}\n" in text


def test_trainable_false_freezes_the_backbone(seed: tuple[dict[str, Any], dict[str, bytes]], tmp_path: Path) -> None:
    config, members = seed
    source = write(tmp_path / "m.keras", mutated(config, [("inner", "trainable", False)]), members)
    build = build_ir(load_spec_text(import_keras(str(source), tmp_path / "m.yaml").spec.read_text(), "m.yaml"))
    assert build.variables and not [v.path for v in build.model_variables if "trainable" in v.collections]
