"""`specgen import keras` of KerasHub backbones: BertBackbone, GPT2Backbone (causal, pre-norm) and RobertaBackbone
(TokenAndPositionEmbedding, exact gelu), built from tiny configs (2 layers, hidden 32) with random weights, saved
with model.save() (and BERT's second weight set with save_weights()), imported and exported through the CLI.

Checked: onnxruntime on the export equals KerasHub's model.predict (every output: BERT's pooled_output too)
within 1e-4 of the output's magnitude at 5 and 16 steps through one graph, with an all-ones padding_mask and
with padded batches (zeros in the mask; all positions, and the real ones alone), and refuses 17
(max_sequence_length); the spec's variable
paths are KerasHub's weight paths; hostile configs get one error line and write nothing; an imported backbone
plus a new head fine-tunes with the backbone frozen by the imported `backbone` collection (docs/import.md).
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import yaml

from specgen.cli import main
from specgen.ir.resolve import build_ir
from specgen.runtime.predictor import InputError, Predictor
from specgen.spec.load import load_spec

keras_hub = pytest.importorskip("keras_hub")
keras = pytest.importorskip("keras")

pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")

SIZES = {"vocabulary_size": 50, "num_layers": 2, "num_heads": 2, "hidden_dim": 32, "intermediate_dim": 64,
         "max_sequence_length": 16}
CLASSES = {"bert": "BertBackbone", "gpt2": "GPT2Backbone", "roberta": "RobertaBackbone"}
LENGTHS = (5, 16)  # one graph at two lengths; 16 is max_sequence_length
# float32 through 2 layers, computed in another order (einsum vs MatMul, fused Gelu): 3.4e-7 to 7.5e-7 of the
# output's magnitude measured; the bound for imports is 1e-4 relative (the exact gelu for BERT: 2.9e-4).
RELATIVE = 1e-4


def feeds(name: str, steps: int, padded: bool = False) -> dict[str, np.ndarray]:
    """Three sequences; `padded`: of 1, steps - 2 and steps real tokens, the rest id 0 with mask 0 (KerasHub's
    padding), else all real (an all-ones mask)."""
    rng = np.random.default_rng(steps)
    real = np.arange(steps) < np.array([[1], [steps - 2], [steps]]) if padded else np.ones((3, steps), bool)
    found = {"token_ids": np.where(real, rng.integers(1, 50, (3, steps)), 0).astype(np.int32)}
    if name == "bert":
        found["segment_ids"] = np.where(real, rng.integers(0, 2, (3, steps)), 0).astype(np.int32)
    return found | {"padding_mask": real.astype(np.int32)}


def randomize(model: Any, seed: int) -> None:
    """Weights of order 1 where KerasHub's initializers give 0.02: activations reach the range where the exact
    and the tanh gelu, or a wrong layer order, differ far above the tolerance."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        value = rng.normal(0.0, 0.2, tuple(weight.shape))
        weight.assign((value + 1.0 if weight.path.endswith("gamma") else value).astype(np.float32))


CASES = [(steps, padded) for steps in LENGTHS for padded in (False, True)]


def reference(model: Any, name: str) -> dict[tuple[int, bool], dict[str, np.ndarray]]:
    """KerasHub's own outputs (sequence_output, BERT's pooled_output) at each length, unpadded and padded."""
    found = {}
    for steps, padded in CASES:
        out = model.predict(feeds(name, steps, padded), verbose=0)
        found[steps, padded] = {k: np.asarray(v) for k, v in out.items()} if isinstance(out, dict) else \
            {"sequence_output": np.asarray(out)}
    return found


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("hub")
    found: dict[str, Any] = {"folder": folder}
    for i, (name, cls) in enumerate(CLASSES.items()):
        keras.utils.set_random_seed(i)
        model = getattr(keras_hub.models, cls)(**SIZES)
        randomize(model, i)
        model.save(folder / f"{name}.keras")
        found[name] = {"outputs": reference(model, name), "paths": {w.path for w in model.weights},
                       "values": {w.path: np.asarray(w.numpy()) for w in model.weights}}
        if name == "bert":  # a second weight set, saved alone (no config): imported with --weights
            randomize(model, 10)
            model.save_weights(folder / "bert.weights.h5")
            found["bert_weights"] = {"outputs": reference(model, name)}
    return found


def imported(saved: dict[str, Any], name: str, *extra: str, spec: str = "") -> Path:
    folder = saved["folder"]
    target = folder / (spec or f"{name}.yaml")
    assert main(["import", "keras", str(folder / f"{name}.keras"), "-o", str(target), *extra]) == 0
    return target


def exported(spec: Path) -> Predictor:
    out = spec.with_suffix("")
    assert main(["export", str(spec), "-o", str(out)]) == 0
    return Predictor(out / "model.onnx", provider="cpu")


def relative(actual: np.ndarray, expected: np.ndarray) -> float:
    return float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))


def check_outputs(predictor: Predictor, name: str, expected: dict[tuple[int, bool], dict[str, np.ndarray]]) -> None:
    """Every output at every case within RELATIVE; padded batches also on their real positions alone."""
    for steps, padded in CASES:
        got = predictor(feeds(name, steps, padded))
        assert sorted(got) == sorted(expected[steps, padded]) == sorted(OUTPUTS[name])
        for output, want in expected[steps, padded].items():
            assert got[output].shape == want.shape == ((3, steps, 32) if output == "sequence_output" else (3, 32))
            assert relative(got[output], want) <= RELATIVE, (name, steps, padded, output)
        if padded:
            real = feeds(name, steps, padded)["padding_mask"].astype(bool)
            want = expected[steps, padded]["sequence_output"][real]
            assert relative(got["sequence_output"][real], want) <= RELATIVE, (name, steps, "real positions")


OUTPUTS = {"bert": ["pooled_output", "sequence_output"], "gpt2": ["sequence_output"],
           "roberta": ["sequence_output"]}


@pytest.mark.parametrize("name", list(CLASSES))
def test_onnx_matches_keras_hub_at_two_lengths(saved: dict[str, Any], name: str) -> None:
    predictor = exported(imported(saved, name))
    check_outputs(predictor, name, saved[name]["outputs"])
    # The mask is honoured, not ignored: the padded batch's ids under an all-ones mask give another answer (on
    # the real positions for BERT/RoBERTa; GPT-2's causal real positions never see the trailing pads, its padded
    # ones do).
    unmasked = predictor(feeds(name, 16, True) | {"padding_mask": np.ones((3, 16), np.int32)})["sequence_output"]
    assert relative(unmasked, saved[name]["outputs"][16, True]["sequence_output"]) > 1e-2
    with pytest.raises(InputError) as caught:
        predictor(feeds(name, 17))
    assert str(caught.value) == ("input 'token_ids': received 17 steps along 'seq' (shape [3, 17]), expected at "
                                 f"most 16: the max_length of layer '{'embeddings/' if name == 'roberta' else ''}"
                                 "position_embedding' (positional_embedding)")


def test_save_weights_file(saved: dict[str, Any]) -> None:
    """The config from the .keras, the weights from a save_weights() file: the export is that file's model."""
    spec = imported(saved, "bert", "--weights", str(saved["folder"] / "bert.weights.h5"), spec="bert_w.yaml")
    check_outputs(exported(spec), "bert", saved["bert_weights"]["outputs"])


@pytest.mark.parametrize("name", list(CLASSES))
def test_variable_paths_are_keras_hub_weight_paths(saved: dict[str, Any], name: str) -> None:
    spec = imported(saved, name)
    ir = build_ir(load_spec(spec))
    assert {v.path for v in ir.model_variables} == saved[name]["paths"]
    text = spec.read_text()
    activation = "gelu" if name == "roberta" else "gelu_approximate"  # KerasHub 0.32: RoBERTa exact, BERT/GPT-2 tanh
    assert text.count(f"activation: {activation},") == 2
    assert text.count("causal: true") == (2 if name == "gpt2" else 0)


def hostile(saved: dict[str, Any], tmp_path: Path, change: dict[str, Any], cls: str = "BertBackbone") -> Path:
    """bert.keras with its config.json edited (made at test time, never committed)."""
    source = zipfile.ZipFile(saved["folder"] / "bert.keras")
    config = json.loads(source.read("config.json"))
    config["class_name"] = cls
    config["config"].update(change)
    target = tmp_path / "edited.keras"
    with zipfile.ZipFile(target, "w") as out:
        for item in source.namelist():
            out.writestr(item, json.dumps(config) if item == "config.json" else source.read(item))
    return target


REFUSALS = [
    ("class", {}, "DistilBertBackbone",
     "KerasHub class 'DistilBertBackbone': specgen imports BertBackbone, GPT2Backbone, RobertaBackbone (their "
     "configs, never their code)"),
    ("heads", {"num_heads": 3}, "BertBackbone",
     "KerasHub BertBackbone: hidden_dim 32 is not a multiple of num_heads 3 (each head's key_dim is hidden_dim / "
     "num_heads)"),
    ("vocabulary", {"vocabulary_size": 51}, "BertBackbone",
     "weight 'token_embedding/vars/0' has shape [50, 32], the config gives [51, 32]"),
    ("unknown", {"rope": True}, "BertBackbone",
     "KerasHub BertBackbone: config.json has arguments that specgen does not know: 1 ('rope'); expected only name, "
     "trainable, dtype, vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim, dropout, "
     "max_sequence_length, num_segments"),
    ("dropout", {"dropout": 1.5}, "BertBackbone",
     "KerasHub BertBackbone: argument dropout: received 1.5 in config.json, expected a number from 0 to below 1"),
    ("float16", {"dtype": "float16"}, "BertBackbone",
     "KerasHub BertBackbone: argument dtype: received float16 in config.json, expected float32, as a string or "
     "Keras' DTypePolicy (specgen runs float32)"),
]


@pytest.mark.parametrize(("change", "cls", "expected"), [pytest.param(c, k, e, id=i) for i, c, k, e in REFUSALS])
def test_refusals(saved: dict[str, Any], tmp_path: Path, change: dict[str, Any], cls: str, expected: str,
                  capsys: pytest.CaptureFixture[str]) -> None:
    source = hostile(saved, tmp_path, change, cls)
    assert main(["import", "keras", str(source), "-o", str(tmp_path / "out.yaml")]) == 1
    assert capsys.readouterr().err.splitlines() == [f"{source}: error: {expected}", "1 error found"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["edited.keras"]  # nothing written


def test_keras_hub_layers_inside_a_model_are_refused_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ids = keras.Input((None,), dtype="int32", name="ids")
    model = keras.Model(ids, keras_hub.layers.TokenAndPositionEmbedding(50, 16, 32, name="embed")(ids))
    model.save(tmp_path / "mine.keras")
    assert main(["import", "keras", str(tmp_path / "mine.keras"), "-o", str(tmp_path / "mine.yaml")]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{tmp_path / 'mine.keras'}: error: Keras layer 'embed' (TokenAndPositionEmbedding): a KerasHub layer inside "
        "a model is not imported yet; KerasHub backbones saved whole (BertBackbone, GPT2Backbone, RobertaBackbone) "
        "are, and their layers as spec ops are in docs/import.md (KerasHub backbones)", "1 error found"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.keras"]


HEAD = ("head/logits/kernel", "head/logits/bias")


def test_finetune_with_the_backbone_frozen(saved: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """docs/import.md's edit: a pooled head on sequence_output, `frozen: [backbone]`, a loss and data; four
    training steps leave every backbone weight bitwise the file's and train the head."""
    import tensorflow as tf

    folder = saved["folder"]
    spec = yaml.safe_load(imported(saved, "roberta").read_text())
    last = spec["outputs"].pop("sequence_output")
    spec["outputs"]["logits"] = "head/logits"
    spec["layers"] += [{"name": "head/pool", "op": "global_avg_pool", "input": last},
                       {"name": "head/logits", "op": "dense", "units": 2}]
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 50, (64, 8)).astype(np.int32)
    np.savez(folder / "tokens.npz", x=ids, m=np.ones_like(ids), y=(ids == 7).any(axis=1).astype(np.int32))  # 7?
    spec.update({"frozen": ["backbone"], "loss": {"kind": "sparse_softmax_cross_entropy", "logits": "logits",
                                                  "labels": "label"},
                 "optimizers": {"head": {"kind": "adam", "learning_rate": 0.01}},
                 "train": {"batch_size": 16, "epochs": 1, "seed": 0},
                 "data": {"train": {"npz": "tokens.npz", "features": {"token_ids": "x", "padding_mask": "m"},
                                    "labels": {"label": "y"}}}})
    spec["checkpoint"]["dir"] = "run"
    assert spec["checkpoint"]["restore"][0]["strict"] is True  # the new head has no key: it is excluded by name
    spec["checkpoint"]["restore"][0]["exclude"] = ["head/*"]
    path = folder / "roberta_head.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    ir = build_ir(load_spec(path))
    assert sorted(v.path for v in ir.model_variables if "trainable" in v.collections) == sorted(HEAD)
    assert main(["train", str(path), "--steps", "4"]) == 0
    assert "restore: restored 36, initialized 2, unused 0, mismatched 0" in capsys.readouterr().out
    reader = tf.train.load_checkpoint(str(folder / "run"))
    for keras_path, value in saved["roberta"]["values"].items():
        assert np.array_equal(reader.get_tensor(keras_path).view(np.uint32), value.view(np.uint32)), keras_path
    assert np.abs(reader.get_tensor("head/logits/bias")).max() > 0  # the head trained (its bias starts at zeros)
    assert reader.get_tensor("optimizers/head/iterations") == 4


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_opset_23_attention_node_with_padding(saved: dict[str, Any], name: str) -> None:
    """At opset 23 each attention is one Attention node; the padding mask (and-ed with the causal one for GPT-2)
    reaches it as a full [batch, 1, T, S] mask: the same outputs, padded or not, at both lengths."""
    spec = yaml.safe_load(imported(saved, name).read_text())
    spec.setdefault("export", {}).setdefault("onnx", {})["opset"] = 23
    path = saved["folder"] / f"{name}_23.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    predictor = exported(path)
    assert [n.op_type for n in onnx.load(path.with_suffix("") / "model.onnx").graph.node].count("Attention") == 2
    check_outputs(predictor, name, saved[name]["outputs"])
