"""KerasHub imports as a user meets them after the import: `validate --strict`, wrapped backbones, preset names.

- A freshly imported backbone restores every variable (`strict: true`), so the init_scale lint, which judges
  initializers, has nothing to say: `validate --strict` passes it, and a fine-tune whose new head reads the
  backbone (`exclude: ["head/*"]`) too. Before, BERT gave 5 init_scale errors (KerasHub's stddev-0.02 kernels).
- A backbone called as a layer of one's own functional model is refused as a KerasHub model used as a layer,
  not as a mask (its dict input used to be read as a `mask` call argument).
- A preset name is told that presets are not downloaded.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from specgen.cli import main

keras_hub = pytest.importorskip("keras_hub")
keras = pytest.importorskip("keras")

pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")

SIZES = {"vocabulary_size": 50, "num_layers": 1, "num_heads": 2, "hidden_dim": 16, "intermediate_dim": 32,
         "max_sequence_length": 8}
CLASSES = {"bert": "BertBackbone", "gpt2": "GPT2Backbone", "roberta": "RobertaBackbone"}
OUTPUT = {"bert": "pooled_output", "gpt2": "sequence_output", "roberta": "sequence_output"}  # the head reads it


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("hub_lints")
    for name, cls in CLASSES.items():
        keras.utils.set_random_seed(0)
        getattr(keras_hub.models, cls)(**SIZES).save(where / f"{name}.keras")
    return where


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_an_imported_backbone_and_its_fine_tune_pass_validate_strict(
        folder: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    spec = folder / f"{name}.yaml"
    assert main(["import", "keras", str(folder / f"{name}.keras"), "-o", str(spec)]) == 0
    assert main(["validate", "--strict", str(spec)]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines()[-1].startswith(f"ok: {spec}") and "error" not in out.err
    # Without the restore the same layers are judged: the lint still runs on this graph (KerasHub's stddev-0.02
    # kernels shrink the scale), so the pass above is the restore's doing.
    tree = yaml.safe_load(spec.read_text())
    bare = folder / f"{name}_bare.yaml"
    bare.write_text(yaml.safe_dump({k: v for k, v in tree.items() if k != "checkpoint"}, sort_keys=False))
    assert main(["validate", "--strict", str(bare)]) == 1
    assert ": at initialization the activation std shrinks to " in capsys.readouterr().err
    # A new head after the restored backbone, excluded from the strict restore: its input's scale is the
    # checkpoint's, which validate does not read, so it is not judged either.
    last = tree["outputs"][OUTPUT[name]]
    tree["outputs"] = {"logits": "head/logits"}
    tree["layers"] += [{"name": "head/logits", "op": "dense", "units": 2, "input": last,
                        "kernel_init": {"kind": "random_normal", "stddev": 100.0}}]
    tree["checkpoint"]["restore"][0]["exclude"] = ["head/*"]
    tuned = folder / f"{name}_head.yaml"
    tuned.write_text(yaml.safe_dump(tree, sort_keys=False))
    assert main(["validate", "--strict", str(tuned)]) == 0


def test_a_backbone_used_as_a_layer_is_refused_as_a_kerashub_model(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    backbone = keras_hub.models.GPT2Backbone(**SIZES, name="gpt")
    tokens = keras.Input((None,), dtype="int32", name="token_ids")
    mask = keras.Input((None,), dtype="int32", name="padding_mask")
    head = keras.layers.Dense(2, name="head")(backbone({"token_ids": tokens, "padding_mask": mask}))
    keras.Model([tokens, mask], head).save(tmp_path / "wrapped.keras")
    assert main(["import", "keras", str(tmp_path / "wrapped.keras"), "-o", str(tmp_path / "w.yaml")]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{tmp_path / 'wrapped.keras'}: error: Keras layer 'gpt' (GPT2Backbone): a KerasHub model used "
        "as a layer inside a model is not imported yet; KerasHub backbones saved whole (BertBackbone, GPT2Backbone, "
        "RobertaBackbone) are, and their layers as spec ops are in docs/import.md (KerasHub backbones)",
        "1 error found"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wrapped.keras"]  # nothing written


def test_a_preset_name_says_presets_are_not_downloaded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", "keras", "bert_base_en", "-o", str(tmp_path / "b.yaml")]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "bert_base_en: error: 'bert_base_en' is neither a .keras/.h5 file nor a keras.applications constructor "
        "(e.g. ResNet50, MobileNetV3Small, EfficientNetB0); KerasHub presets are not downloaded: save the backbone "
        "with model.save() first (keras_hub.models.Backbone.from_preset('bert_base_en').save('backbone.keras')) "
        "and import that file", "1 error found"]
    assert list(tmp_path.iterdir()) == []
