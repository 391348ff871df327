"""Keras weight files as restore sources: Keras 3 `.weights.h5` and `.keras`, legacy `.h5` written by
Keras 2 itself (tf_keras) and by Keras 3's legacy writer; plans, restores bit for bit, export
without --checkpoint, and damaged files."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
h5py = pytest.importorskip("h5py")

from specgen.cli import main  # noqa: E402
from specgen.diagnostics import SpecError  # noqa: E402
from specgen.ir.resolve import build_ir  # noqa: E402
from specgen.render.files import render_files  # noqa: E402
from specgen.runtime.commands.restore import apply_plan, list_checkpoint, plan_restore  # noqa: E402
from specgen.runtime.keras_weights import Reader, read_weights  # noqa: E402
from specgen.runtime.lib.generated import load_generated  # noqa: E402
from specgen.runtime.predictor import Predictor  # noqa: E402
from specgen.spec.load import LoadedSpec, load_spec_text  # noqa: E402

LAYERS = """\
  - {name: norm, op: normalize}
  - {name: conv1, op: conv2d, filters: 4, kernel: 3, padding: same, activation: relu}
  - {name: bn1, op: batch_norm, center: false}
  - {name: dw, op: depthwise_conv2d, kernel: 3, padding: same}
  - {name: bn2, op: batch_norm, scale: false}
  - {name: sep, op: separable_conv2d, filters: 5, kernel: 3}
  - {name: pw, op: conv2d, filters: 3, kernel: 1}
  - {name: bn, op: batch_norm}
  - {name: flat, op: flatten}
  - {name: fc, op: dense, units: 3}
"""
SPEC = "specgen: 1\nname: tiny\ninputs: {{image: {{shape: [8, 8, 3]}}}}\noutputs: {{logits: fc}}\nlayers:\n{layers}{restore}"
NESTED = '        - {strip_prefix: "block/"}\n'  # the nested Sequential's layers are top-level layers here
BARE_BN = "".join(f"        - {{from: {bn}/vars/{i}, to: {bn}/{role}}}\n" for bn, roles in
                  (("bn1", ("gamma", "moving_mean", "moving_variance")), ("bn2", ("beta", "moving_mean", "moving_variance")))
                  for i, role in enumerate(roles))
K2_DEPTHWISE = "        - {from: dw/depthwise_kernel, to: dw/kernel}\n"  # Keras 2's name for it
# file -> (the model that wrote it, the map that restores every variable of the spec)
KINDS = {"k3.weights.h5": ("k3", NESTED + BARE_BN), "k3.keras": ("k3", NESTED), "k3_legacy.h5": ("k3", NESTED),
         "k3_model.h5": ("k3", NESTED), "k2_model.h5": ("k2", NESTED + K2_DEPTHWISE),
         "k2_weights.h5": ("k2", NESTED + K2_DEPTHWISE)}


def build(api: Any, data: np.ndarray) -> Any:
    """One model in Keras 3 or Keras 2 (tf_keras): the layers of LAYERS, pw and bn in a nested Sequential."""
    layers = api.layers
    image = api.Input((8, 8, 3), name="image")
    norm = layers.Normalization(name="norm")
    norm.adapt(data)
    x = layers.Conv2D(4, 3, padding="same", activation="relu", name="conv1")(norm(image))
    x = layers.BatchNormalization(center=False, name="bn1")(x)
    x = layers.DepthwiseConv2D(3, padding="same", name="dw")(x)
    x = layers.BatchNormalization(scale=False, name="bn2")(x)
    x = layers.SeparableConv2D(5, 3, name="sep")(x)
    x = api.Sequential([layers.Conv2D(3, 1, name="pw"), layers.BatchNormalization(name="bn")], name="block")(x)
    return api.Model(image, layers.Dense(3, name="fc")(layers.Flatten(name="flat")(x)), name="tiny")


def leaves(model: Any, prefix: str = "") -> list[tuple[str, Any]]:
    found = []
    for layer in model.layers:
        inner = getattr(layer, "layers", None)
        found += leaves(layer, f"{prefix}{layer.name}/") if inner else [(prefix + layer.name, layer)]
    return found


def held(model: Any) -> dict[str, np.ndarray]:
    """What Keras holds, `layer.get_weights()`, by `<layer>/<weight>` (Keras' names without scope and ':0')."""
    return {f"{path}/{w.name.split('/')[-1].split(':')[0]}": value for path, layer in leaves(model)
            for w, value in zip(layer.weights, layer.get_weights(), strict=True)}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    import tf_keras
    from keras.src.legacy.saving import legacy_h5_format

    folder = tmp_path_factory.mktemp("keras")
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((32, 8, 8, 3)) * [1.0, 2.0, 0.5] + [0.5, -1.0, 2.0]).astype(np.float32)
    k3, k2 = build(keras, data), build(tf_keras, data)
    for (_, ours), (_, theirs) in zip(leaves(k3), leaves(k2), strict=True):
        values = [v if v.dtype != np.float32 else (np.abs(rng.standard_normal(v.shape)) + 0.5 if "variance" in w.name
                                                   else 0.3 * rng.standard_normal(v.shape)).astype(np.float32)
                  for w, v in zip(ours.weights, ours.get_weights(), strict=True)]
        if isinstance(ours, keras.layers.Normalization):  # its forward pass uses the adapted values, not set_weights'
            values = ours.get_weights()
        ours.set_weights(values)
        theirs.set_weights(values)
    k3.save_weights(folder / "k3.weights.h5")
    k3.save(folder / "k3.keras")
    k3.save(folder / "k3_model.h5")
    with h5py.File(folder / "k3_legacy.h5", "w") as handle:
        legacy_h5_format.save_weights_to_hdf5_group(handle, k3)
    k2.save(folder / "k2_model.h5")
    k2.save_weights(str(folder / "k2_weights.h5"))
    x = rng.standard_normal((5, 8, 8, 3)).astype(np.float32)
    return {"folder": folder, "k3": k3, "k2": k2, "held": {"k3": held(k3), "k2": held(k2)}, "x": x,
            "expected": k3(x, training=False).numpy()}


def spec(folder: Path, restore: str = "", layers: str = LAYERS) -> LoadedSpec:
    text = SPEC.format(layers=layers, restore=restore)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec.yaml").write_text(text)
    return load_spec_text(text, display=str(folder / "spec.yaml"), path=folder / "spec.yaml")


def restore_section(source: str, entries: str = "", exclude: str = "") -> str:
    return (f"checkpoint:\n  dir: run\n  restore:\n    - from: {source}\n"
            + (f"      map:\n{entries}" if entries else "") + (f"      exclude: {exclude}\n" if exclude else ""))


def generated(loaded: LoadedSpec, folder: Path) -> Any:
    ir = build_ir(loaded)
    (folder / "model.py").write_bytes(render_files(ir)["model.py"])
    return getattr(load_generated(folder / "model.py"), ir.class_name)(seed=0)


@pytest.mark.parametrize("name", list(KINDS))
def test_keys_and_values_equal_what_keras_holds(files: dict[str, Any], name: str) -> None:
    weights = read_weights(files["folder"] / name)
    expected = files["held"][KINDS[name][0]]
    if name == "k3.weights.h5":  # no config: BatchNormalization with 3 variables is named by index
        expected = {k.replace("bn1/gamma", "bn1/vars/0").replace("bn2/beta", "bn2/vars/0")
                    .replace("moving_mean", "vars/1").replace("moving_variance", "vars/2")
                    if k.startswith(("bn1/", "bn2/")) else k: v for k, v in expected.items()}
    assert set(weights) == set(expected)
    assert ("dw/depthwise_kernel" in weights) == (KINDS[name][0] == "k2")
    with Reader(files["folder"] / name) as reader:
        for key, weight in weights.items():
            value = reader.get_tensor(weight.dataset)
            assert value.dtype == expected[key].dtype and np.array_equal(value, expected[key]), key
            assert (weight.shape, weight.dtype) == (expected[key].shape, expected[key].dtype.name)


@pytest.mark.parametrize("name", list(KINDS))
def test_every_format_restores_the_spec_bit_for_bit(files: dict[str, Any], name: str, tmp_path: Path) -> None:
    loaded = spec(tmp_path, restore_section(str(files["folder"] / name), KINDS[name][1]))
    model = generated(loaded, tmp_path)
    variables = model.variables_by_path()
    plan = plan_restore(loaded, {p: (tuple(v.shape), v.dtype.name) for p, v in variables.items()})
    assert plan.ok and plan.count("restored") == len(variables) == 23
    apply_plan(plan, variables)
    for row in plan.rows:  # index-named keys were mapped to the Keras names the spec uses
        theirs = files["held"][KINDS[name][0]][row.path if "/vars/" in row.key else row.key]
        assert np.array_equal(variables[row.path].numpy(), theirs), (row.path, row.key)
    unused = {u.key for u in plan.unused}
    assert unused == {"norm/count"}  # Keras' sample count: no variable of specgen's normalize


def test_bare_weights_h5_names_an_undecidable_batch_norm_by_index(files: dict[str, Any], tmp_path: Path) -> None:
    """Without a config, 3 BatchNormalization variables may be gamma or beta first: nothing guesses."""
    loaded = spec(tmp_path, restore_section(str(files["folder"] / "k3.weights.h5"), NESTED))
    plan = plan_restore(loaded, {v.path: (v.shape, v.dtype) for v in build_ir(loaded).model_variables})
    rows = {r.path: r for r in plan.rows}
    assert rows["bn1/gamma"].status == "initialized" and rows["bn/gamma"].status == "restored"
    reasons = {u.key: u.reason for u in plan.unused}
    assert reasons["bn1/vars/0"] == ("variable 0 of layer 'bn1' (BatchNormalization): the file alone does not say "
                                     "which of beta, moving_mean, moving_variance / gamma, moving_mean, "
                                     "moving_variance it holds; map it by name")


def test_identity_map_and_renames_with_exclude(files: dict[str, Any], tmp_path: Path) -> None:
    source = str(files["folder"] / "k3.keras")
    loaded = spec(tmp_path / "same", restore_section(source))
    plan = plan_restore(loaded, {v.path: (v.shape, v.dtype) for v in build_ir(loaded).model_variables})
    status = {r.path: r.status for r in plan.rows}
    nested = {"pw/kernel", "pw/bias", "bn/gamma", "bn/beta", "bn/moving_mean", "bn/moving_variance"}
    assert {p for p, s in status.items() if s == "initialized"} == nested  # they are block/... in the file
    assert plan.ok and {r.key for r in plan.rows if r.status == "restored"} >= {"conv1/kernel", "bn1/gamma", "sep/bias"}
    renamed = (LAYERS.replace("name: conv1,", "name: stem_conv,").replace("name: pw,", "name: head_pw,")
               .replace("name: bn,", "name: head_bn,"))
    entries = ('        - {from: conv1/kernel, to: stem_conv/kernel}\n        - {from: conv1/bias, to: stem_conv/bias}\n'
               '        - {pattern: "^block/(pw|bn)/(.*)$", to: "head_\\\\1/\\\\2"}\n')
    loaded = spec(tmp_path, restore_section(source, entries, '["head_bn/moving_*", "fc/*"]'), layers=renamed)
    model = generated(loaded, tmp_path)
    variables = model.variables_by_path()
    plan = plan_restore(loaded, {p: (tuple(v.shape), v.dtype.name) for p, v in variables.items()})
    rows = {r.path: r for r in plan.rows}
    assert rows["head_pw/kernel"].key == "block/pw/kernel" and rows["stem_conv/kernel"].key == "conv1/kernel"
    assert {p for p, r in rows.items() if r.status == "initialized"} == {
        "head_bn/moving_mean", "head_bn/moving_variance", "fc/kernel", "fc/bias"}
    assert rows["fc/kernel"].note == "excluded by 'fc/*' in " + source
    before = variables["fc/kernel"].numpy().copy()
    apply_plan(plan, variables)
    assert np.array_equal(variables["head_pw/kernel"].numpy(), files["held"]["k3"]["block/pw/kernel"])
    assert np.array_equal(variables["fc/kernel"].numpy(), before)


def run_cli(args: list[Any], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_restore_plan_from_a_legacy_h5(files: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    spec(tmp_path)
    code, out, _ = run_cli(["restore-plan", tmp_path / "spec.yaml", "--from", files["folder"] / "k2_weights.h5"], capsys)
    lines = out.splitlines()
    assert code == 0 and lines[-1] == "restored 16, initialized 7, unused 8, mismatched 0"
    source = f"{files['folder'] / 'k2_weights.h5'}"
    assert any(line.split() == ["bn1/gamma", "restored", f"{source}:bn1/gamma", "float32[4]"] for line in lines)
    assert f"  {source}:dw/depthwise_kernel  float32[3, 3, 4, 1]  no variable with this name here" in lines
    assert list_checkpoint(files["folder"] / "k2_model.h5")["conv1/kernel"] == ((3, 3, 3, 4), "float32")


def test_export_without_checkpoint_matches_keras(files: dict[str, Any], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    spec(tmp_path, restore_section(str(files["folder"] / "k3.keras"), NESTED))
    code, out, err = run_cli(["export", tmp_path / "spec.yaml", "-o", tmp_path / "out"], capsys)
    assert code == 0, err
    assert out.splitlines()[1] == "restore: restored 23, initialized 0, unused 1, mismatched 0"
    report = json.loads((tmp_path / "out" / "export.json").read_text())
    assert report["checkpoint"] is None and report["weights"] == "restore plan"
    assert report["restore"]["variables"]["pw/kernel"] == f"{files['folder'] / 'k3.keras'}:block/pw/kernel"
    actual = Predictor(str(tmp_path / "out" / "model.onnx"), provider="cpu")({"image": files["x"]})["logits"]
    np.testing.assert_allclose(actual, files["expected"], rtol=0, atol=1e-5)


def test_export_without_checkpoint_says_what_is_missing(files: dict[str, Any], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    spec(tmp_path)
    code, _, err = run_cli(["export", tmp_path / "spec.yaml", "-o", tmp_path / "out"], capsys)
    assert (code, err.splitlines()[-1]) == (1, "1 error found") and "nothing to export from: pass --checkpoint" in err
    code, _, err = run_cli(["export", tmp_path / "spec.yaml", "--checkpoint", files["folder"] / "k3.keras", "-o",
                            tmp_path / "out"], capsys)
    assert code == 1 and "is a Keras weight file, not a TensorFlow checkpoint" in err
    spec(tmp_path, restore_section(str(files["folder"] / "k3.keras")))  # a mismatch: all or nothing
    (tmp_path / "spec.yaml").write_text((tmp_path / "spec.yaml").read_text().replace("units: 3", "units: 4"))
    code, _, err = run_cli(["export", tmp_path / "spec.yaml", "-o", tmp_path / "out"], capsys)
    assert code == 1 and "nothing was restored" in err and not (tmp_path / "out").exists()


def rewrite_keras(source: Path, target: Path, config: Any = None, drop: str | None = None) -> Path:
    """A copy of a .keras archive with its config changed or one weights group removed."""
    with zipfile.ZipFile(source) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    if config is not None:
        members["config.json"] = json.dumps(config(json.loads(members["config.json"]))).encode()
    if drop is not None:
        buffer = io.BytesIO(members["model.weights.h5"])
        with h5py.File(buffer, "a") as handle:
            del handle[drop]
        members["model.weights.h5"] = buffer.getvalue()
    with zipfile.ZipFile(target, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return target


def fc_config(change: dict[str, Any]) -> Any:
    def edit(config: dict[str, Any]) -> dict[str, Any]:
        for entry in config["config"]["layers"]:
            if entry["config"]["name"] == "fc":
                entry.update({k: v for k, v in change.items() if k == "class_name"})
                entry["config"].update({k: v for k, v in change.items() if k != "class_name"})
        return config
    return edit


def damaged(folder: Path, originals: Path) -> dict[str, tuple[Path, str]]:
    """Broken copies of the fixture's files, each with the words its error line must hold."""
    source = originals / "k3.keras"
    h5 = (originals / "k2_weights.h5").read_bytes()
    (folder / "truncated.h5").write_bytes(h5[: len(h5) // 2])
    (folder / "text.h5").write_text("not hdf5\n")
    with zipfile.ZipFile(folder / "other.keras", "w") as archive:
        archive.writestr("readme.txt", "hello")
    with h5py.File(folder / "foreign.h5", "w") as handle:
        handle["data"] = np.zeros(3)
    with h5py.File(folder / "lost_layer.h5", "w") as handle, h5py.File(originals / "k2_weights.h5") as original:
        for key, value in original.attrs.items():
            handle.attrs[key] = value
        for key in original:
            if key != "conv1":
                original.copy(key, handle)
    return {
        "truncated": (folder / "truncated.h5", "damaged ("),
        "text": (folder / "text.h5", "neither an HDF5 file nor a .keras archive"),
        "zip": (folder / "other.keras", "a zip archive without config.json and model.weights.h5, not a .keras model"),
        "foreign": (folder / "foreign.h5", "an HDF5 file without Keras weights"),
        "legacy_lost_layer": (folder / "lost_layer.h5", "layer 'conv1' is listed in layer_names but has no group"),
        "keras_lost_layer": (rewrite_keras(source, folder / "lost.keras", drop="layers/dense"),
                             "layer 'fc' (Dense) of 'tiny' in config.json has no weights group"),
        "unknown_class": (rewrite_keras(source, folder / "unknown.keras", fc_config({"class_name": "Mystery"})),
                          "layer 'fc' (Mystery) has 2 variables, and specgen does not know the variable order of Mystery"),
        "count": (rewrite_keras(source, folder / "count.keras", fc_config({"use_bias": False})),
                  "layer 'fc' (Dense) has 2 variables in the file, but its config gives 1 (kernel)"),
    }


def test_damaged_files_are_one_error_line(files: dict[str, Any], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    spec(tmp_path)
    for case, (path, message) in damaged(tmp_path, files["folder"]).items():
        code, out, err = run_cli(["restore-plan", tmp_path / "spec.yaml", "--from", path], capsys)
        lines = err.splitlines()
        assert (code, out, len(lines), lines[-1]) == (1, "", 2, "1 error found"), (case, err)
        assert lines[0].startswith(f"{path}: error: cannot read Keras weight file {path}: "), (case, err)
        assert message in lines[0], (case, err)
    spec(tmp_path, restore_section("truncated.h5"))
    with pytest.raises(SpecError) as caught:
        loaded = spec(tmp_path, restore_section("truncated.h5"))
        plan_restore(loaded, {v.path: (v.shape, v.dtype) for v in build_ir(loaded).model_variables})
    assert caught.value.diagnostics[0].message.startswith("checkpoint.restore[0]: cannot read Keras weight file ")
