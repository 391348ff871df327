"""`specgen import keras` on hostile model configs: a valid spec, or one error line; never a traceback.

The explicit cases are those an outside check found (issue 17): wrong types read as numbers, nesting
that made Python recurse, names that made the importer write a spec it then called invalid, an output
path that overwrote the model, and an import that took minutes on 10,000 layers.

The fuzz test mutates a valid config (tests/keras_configs.py: a Keras 3 functional model with a nested
Sequential, a Keras 2 one, a chain) at one to three random places: a value of another type, a missing
key, a deep list, a huge or negative number, NaN, unicode and control characters in names, a
duplicated list entry. The result is written as a `.keras` (or `.h5`) file and imported in process,
as the CLI does. Any exception other than SpecError is a bug (a traceback for the user), and so is a
refusal that spans lines, that does not name the source file, or that calls the importer's own
output invalid ("please report it"); a written spec must validate.

The runs are derandomized and use no example database, so CI sees the same examples every time.
SPECGEN_FUZZ_EXAMPLES=5000 searches further; SPECGEN_FUZZ_RANDOM=1 draws a fresh seed each run.
"""

from __future__ import annotations

import copy
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from keras_configs import (
    chain,
    dense,
    functional,
    input_layer,
    keras2_tiny,
    layer,
    nested_sequentials,
    tiny,
    weights_for,
    wide,
    write_keras,
    write_weights,
)

from specgen.cli import main
from specgen.diagnostics import MAX_MESSAGE, SpecError, one_line
from specgen.fields.base import MAX_NAME_CHARS, is_layer_name
from specgen.importers.keras import import_keras
from specgen.importers.keras.convert import _order
from specgen.importers.keras.dag import KGraph, KInput, KLayer
from specgen.importers.keras.names import Namer
from specgen.ir.resolve import build_ir
from specgen.spec.load import load_spec_text

SEEDS = {"keras3": tiny(), "keras2": keras2_tiny(), "chain": chain(3), "wide": wide()}
DEEP: Any = []
for _ in range(60):  # deeper than any real config, shallower than json's own recursion
    DEEP = [DEEP]
VALUES = [None, True, False, 0, -1, -7, 1, 3.5, 0.0, 1e-45, "3", "", "relu", "same", "a\nb", "tab\there", "名前",
          "\u2028", "x" * 300, 2**31, 2**63 + 1, 10**30, 1e308, -1e308, math.nan, math.inf, -math.inf, [], {},
          [None], [1, 2.5], ["a", 0, 0], {"class_name": 5}, {"class_name": "Dense", "config": None}, DEEP,
          [[3, 3], [3]], ["x", True, 0]]


def fuzz(examples: int) -> settings:
    return settings(deadline=None, derandomize=not os.environ.get("SPECGEN_FUZZ_RANDOM"), database=None,
                    max_examples=int(os.environ.get("SPECGEN_FUZZ_EXAMPLES", examples)),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def places(value: Any) -> Iterator[tuple[Any, Any]]:
    """(container, key) of every value inside `value`, without recursion."""
    stack = [value]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, item in items:
            yield node, key
            if item is not DEEP:
                stack.append(item)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    kind = draw(st.sampled_from(sorted(SEEDS)))
    config = copy.deepcopy(SEEDS[kind])
    for _ in range(draw(st.integers(1, 3))):
        spots = list(places(config))
        if not spots:  # every key deleted
            break
        container, key = draw(st.sampled_from(spots))
        action = draw(st.sampled_from(["value", "value", "value", "delete", "duplicate", "wrap"]))
        if action == "value":
            container[key] = copy.deepcopy(draw(st.sampled_from(VALUES)))
        elif action == "delete":
            del container[key]
        elif action == "duplicate" and isinstance(container, list):
            container.insert(key, copy.deepcopy(container[key]))
        elif action == "wrap":
            container[key] = [container[key]]
    return kind, config


def write_h5(path: Path, config: dict[str, Any]) -> Path:
    """A legacy Keras 2 model file: model_config, and zero weights where the config converts (keras_configs.py)."""
    with h5py.File(path, "w") as f:
        f.attrs["model_config"] = json.dumps(config)
        f.attrs["keras_version"] = "2.15.0"
        stored = weights_for(config, keras2=True)
        if stored is not None:
            write_weights(f, stored)
    return path


def test_the_seeds_import() -> None:
    """Mutations of a config that is already refused would test only one refusal."""
    with tempfile.TemporaryDirectory() as folder:
        for kind, config in SEEDS.items():
            source = write_h5(Path(folder) / "m.h5", config) if kind == "keras2" else \
                write_keras(Path(folder) / "m.keras", config)
            result = import_keras(str(source), Path(folder) / f"{kind}.yaml")
            print(kind, result.layers)
            assert (kind, result.layers) in [("keras3", 6), ("keras2", 4), ("chain", 3), ("wide", 18)]


def check(source: Path, output: Path) -> None:
    """Import `source`: a spec that validates, or SpecError with one-line refusals and nothing written."""
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
        return
    build_ir(load_spec_text(output.read_text(), str(output), path=output))
    output.unlink()


@fuzz(250)
@given(mutated())
def test_mutated_configs_import_or_refuse_in_one_line(case: tuple[str, dict[str, Any]]) -> None:
    kind, config = case
    with tempfile.TemporaryDirectory() as folder:
        if kind == "keras2":
            source = write_h5(Path(folder) / "m.h5", config)
        else:
            source = write_keras(Path(folder) / "m.keras", config)
        check(source, Path(folder) / "m.yaml")


def refusal(tmp_path: Path, config: dict[str, Any] | str, capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line `specgen import keras` prints for `config`, after checking it wrote nothing."""
    source = write_keras(tmp_path / "m.keras", config)
    assert main(["import", "keras", str(source), "-o", str(tmp_path / "m.yaml")]) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.keras"]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[1] == "1 error found", err
    prefix = f"{source}: error: "
    assert err[0].startswith(prefix), err
    return err[0][len(prefix):]


def with_units(units: Any) -> dict[str, Any]:
    return functional("m", [input_layer("x", [4]), dense("fc", units, "x")], ["x"], ["fc"])


@pytest.mark.parametrize(("units", "received"), [(True, "True"), (3.5, "3.5"), ("3", "3"), (0, "0"), (-2, "-2"),
                                                  (2**40, "1099511627776"), (None, "None")])
def test_a_number_of_the_wrong_type_is_refused_not_converted(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             units: Any, received: str) -> None:
    """`units: true` became 1, 3.5 became 3, "3" became 3: each is now refused, naming layer, key and both sides."""
    assert refusal(tmp_path, with_units(units), capsys) == (
        f"Keras layer 'fc' (Dense): argument units: received {received}, expected an integer from 1 to 2147483647")


def test_a_missing_argument_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = with_units(3)
    del config["config"]["layers"][1]["config"]["units"]
    assert refusal(tmp_path, config, capsys) == ("Keras layer 'fc' (Dense): argument units: received nothing (the "
                                                 "key is missing), expected an integer from 1 to 2147483647")


@pytest.mark.parametrize(("shape", "message"), [
    ([4.5], "Keras layer 'x' (InputLayer): config.batch_shape[1]: received 4.5, expected a valid integer"),
    ([True], "Keras layer 'x' (InputLayer): config.batch_shape[1]: received True, expected a valid integer"),
    (["4"], "Keras layer 'x' (InputLayer): config.batch_shape[1]: received '4', expected a valid integer"),
    ([0], "Keras layer 'x' (InputLayer): config.batch_shape[1]: received 0, expected greater than 0"),
])
def test_input_shapes_are_strict_integers(tmp_path: Path, capsys: pytest.CaptureFixture[str], shape: list[Any],
                                          message: str) -> None:
    """Shape [4.5] became [4]."""
    config = functional("m", [input_layer("x", shape), dense("fc", 2, "x")], ["x"], ["fc"])
    assert refusal(tmp_path, config, capsys) == message


@pytest.mark.parametrize(("broken", "message"), [
    (lambda c: c["config"].pop("layers"), "config.layers: missing"),
    (lambda c: c["config"]["layers"].__setitem__(1, 7),
     "config.layers[1]: received 7, expected a valid dictionary"),
    (lambda c: c["config"]["layers"][1].pop("class_name"), "config.layers[1].class_name: missing"),
    (lambda c: c["config"]["layers"][1]["inbound_nodes"][0].__setitem__("args", 5),
     "config.layers[1].inbound_nodes[0].args: received 5, expected a valid list"),
    (lambda c: c["config"]["layers"][1]["inbound_nodes"][0]["args"][0]["config"].__setitem__(
        "keras_history", ["x", True, 0]),
     "config.layers[1].inbound_nodes[0].args[0].config.keras_history[1]: received True, expected a valid integer"),
    (lambda c: c["config"].__setitem__("output_layers", [["fc", 0]]),
     "config.output_layers[0][2]: missing"),
    (lambda c: c["config"]["layers"][1].__setitem__("name", "x"),
     "config.layers[1]: a second layer named 'x' (names in one Keras model are unique)"),
    (lambda c: c["config"]["layers"][1].__setitem__("name", "a/b"),
     "config.layers[1]: layer name 'a/b' holds '/', which Keras names never hold"),
    (lambda c: c.__setitem__("class_name", ["Functional"]),
     "class_name: received ['Functional'], expected a valid string"),
])
def test_malformed_structure_is_one_positioned_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    broken: Any, message: str) -> None:
    """These were AttributeError, KeyError, IndexError and TypeError tracebacks."""
    config = with_units(2)
    broken(config)
    assert refusal(tmp_path, config, capsys) == message


def test_100000_nested_brackets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """json.loads recursed into a RecursionError traceback. The file reader (runtime/keras_files.py), which
    parses config.json for every command, refuses it before the importer's own depth check sees it."""
    assert refusal(tmp_path, "[" * 100_000 + "]" * 100_000, capsys) == (
        f"{tmp_path / 'm.keras'}: config.json nests JSON arrays or objects deeper than Python's parser goes "
        f"({sys.getrecursionlimit()} levels)")


def test_deep_json_inside_a_layer_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Deep enough to pass json.loads, too deep to walk: refused before anything recurses into it."""
    config = with_units(2)
    deep: Any = 1
    for _ in range(500):
        deep = [deep]
    config["config"]["layers"][1]["config"]["kernel_regularizer"] = deep
    assert refusal(tmp_path, config, capsys) == ("the model config nests over 100 levels of JSON arrays and objects; "
                                                 "a Keras model config needs about 35 for models nested 7 deep")


def test_300_nested_sequentials(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """300 made a RecursionError; fewer made a restore map key too long for the spec ("please report it")."""
    assert refusal(tmp_path, nested_sequentials(300), capsys).startswith("the model config nests over 100 levels")
    assert refusal(tmp_path, nested_sequentials(9), capsys) == (
        "Keras layer 's2/s3/s4/s5/s6/s7/s8/s9' (Sequential): a model nested 8 deep in others; specgen flattens 7 "
        "levels (spec layer names have at most 8 parts)")


def test_models_nested_7_deep_import(tmp_path: Path) -> None:
    source = write_keras(tmp_path / "m.keras", nested_sequentials(8))
    assert main(["import", "keras", str(source), "-o", str(tmp_path / "m.yaml")]) == 0
    assert "  - {name: s2/s3/s4/s5/s6/s7/s8/fc, op: dense, units: 2}\n" in (tmp_path / "m.yaml").read_text()


def test_a_newline_in_a_layer_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A layer with weights: its keys cannot be written in a restore map, so it is refused up front."""
    config = functional("m", [input_layer("x", [4]), dense("f\nc", 2, "x")], ["x"], ["f\nc"])
    assert refusal(tmp_path, config, capsys) == (
        "Keras layer 'f\\nc' (Dense): its name holds a control character, which a spec's restore map cannot write "
        "in the keys of this layer's weights (rename the layer in Keras)")


def test_a_newline_in_a_weightless_layer_name_is_renamed(tmp_path: Path) -> None:
    """No weight keys to write: renamed, and the header comment escapes the newline."""
    config = functional("m", [input_layer("x", [4]), layer("ReLU", "re\nlu\x01", {}, "x")], ["x"], ["re\nlu\x01"])
    source = write_keras(tmp_path / "m.keras", config)
    assert main(["import", "keras", str(source), "-o", str(tmp_path / "m.yaml")]) == 0
    text = (tmp_path / "m.yaml").read_text()
    assert "#   layer 're\\nlu\\x01' -> 're_lu'\n" in text and "  - {name: re_lu, op: relu}\n" in text
    assert main(["validate", str(tmp_path / "m.yaml")]) == 0


def test_a_newline_in_the_file_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The spec restores from the model file, and a spec cannot name a path with a control character."""
    source = write_keras(tmp_path / "a\nb.keras", tiny())
    assert main(["import", "keras", str(source), "-o", str(tmp_path / "m.yaml")]) == 1
    assert not (tmp_path / "m.yaml").exists()
    assert capsys.readouterr().err.splitlines()[0] == one_line(
        f"{source}: error: the spec would restore from 'a\nb.keras', which holds a control character: rename the file")


def test_long_names_are_shortened_to_fit_the_spec(tmp_path: Path) -> None:
    """A name at the spec's limit made unique stays within it (it became 2 longer, which the spec refuses)."""
    longest = "b" * MAX_NAME_CHARS
    layers = [input_layer("x", [4]), dense(longest, 2, "x"), dense(longest + "-", 2, longest)]
    source = write_keras(tmp_path / "m.keras", functional("m", layers, ["x"], [longest + "-"]))
    assert main(["import", "keras", str(source), "-o", str(tmp_path / "m.yaml")]) == 0
    names = [line.split(",")[0] for line in (tmp_path / "m.yaml").read_text().splitlines() if "op: dense" in line]
    assert names == ["  - {name: " + longest, "  - {name: " + longest[:-2] + "_2"]
    assert main(["validate", str(tmp_path / "m.yaml")]) == 0


def test_deeply_nested_long_names_fit_the_spec_patterns() -> None:
    """8 parts of 60 characters (487) would not fit `<name>/*` in the spec's 256-character patterns."""
    name = Namer().layer("/".join(["c" * 60] * 8))
    assert name == "c" * 60 + "/" + "c" * 60 + "/" + "c" * 60 + "_1874bb96"
    assert is_layer_name(name)


@pytest.mark.parametrize("how", ["same path", "symlink", "hardlink"])
def test_the_output_never_overwrites_the_model(tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str) -> None:
    source = write_keras(tmp_path / "tiny.keras", tiny())
    before = source.read_bytes()
    output = source if how == "same path" else tmp_path / "tiny.yaml"
    if how == "symlink":
        output.symlink_to(source)
    elif how == "hardlink":
        output.hardlink_to(source)
    # A .keras -o is a command-line mistake (exit 2, before anything is read); a link to the model is found later
    assert main(["import", "keras", str(source), "-o", str(output)]) == (2 if how == "same path" else 1)
    assert source.read_bytes() == before
    expected = (f"specgen import: error: -o {output}: a spec is a YAML file, not a Keras model file (.keras); "
                "choose a path ending in .yaml" if how == "same path" else
                f"{source}: error: -o {output} is {source} itself: writing the spec would overwrite it; choose "
                "another path")
    assert capsys.readouterr().err.splitlines()[0] == expected


def test_layer_limit_is_applied_before_the_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The spec's 10,000-layer limit (specgen/spec/expand.py) also bounds imports, counted while flattening."""
    assert refusal(tmp_path, chain(10_001), capsys) == (
        "the model has more than 10000 layers (each call of a shared layer counts); a spec holds at most 10000")


def test_ordering_is_linear() -> None:
    """A chain written in reverse: the old ordering rescanned every pending layer per round (20,000 rounds of
    up to 20,000 layers, minutes); Kahn's algorithm visits each layer and edge once (0.05 s here)."""
    layers = [KLayer(f"r{i}", "ReLU", "keras.layers", {}, [], inputs=[f"r{i - 1}" if i else "x"])
              for i in range(20_000)]
    graph = KGraph("chain", [KInput("x", [4], "float32")], layers[::-1], [("out", "r19999")])
    start = time.process_time()  # CPU seconds of this process: other xdist workers and jobs on the shared cores do not count
    order = _order(graph)
    seconds = time.process_time() - start
    assert [layer.name for layer in order] == [f"r{i}" for i in range(20_000)]
    assert seconds < 5, seconds  # 100x the linear time, a small fraction of the quadratic one
