"""`specgen import keras` of Embedding(mask_zero=True) keeps the mask: a real Keras model saved to .keras,
imported, restored from the file, equals `model.predict` on ids padded at the end, at the start and with
holes; merges of masked tensors (Keras' LogicalOr) too. A mask Keras drops before any layer uses it is left
out (issue 28: the importer wrote a spec it then called invalid); one a spec cannot express is refused by the
Keras layer's name, as is a mask argument specgen's rules would not make."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

keras = pytest.importorskip("keras")

from test_import_keras import compare, randomize, refusal, run_import  # noqa: E402

RTOL = 1e-5  # relative to the largest output: float32 summation order differs over the steps


def masked_model() -> Any:
    layers = keras.layers
    ids = keras.Input((None,), dtype="int32", name="ids")
    h = layers.Embedding(12, 5, mask_zero=True, name="emb")(ids)
    h = layers.LSTM(6, return_sequences=True, name="enc")(h)
    back = layers.GRU(4, return_sequences=True, go_backwards=True, name="back")(h)
    pooled = layers.GlobalAveragePooling1D(name="pool")(back)
    last = layers.SimpleRNN(3, name="last")(h)
    out = layers.Dense(2, name="head")(layers.Concatenate(name="cat")([pooled, last]))
    model = keras.Model(ids, out, name="masked")
    randomize(model)
    return model


def test_mask_zero_import_equals_predict(tmp_path: Path) -> None:
    model = masked_model()
    model.save(tmp_path / "m.keras")
    spec = tmp_path / "m.yaml"
    assert run_import(tmp_path / "m.keras", "-o", spec) == 0
    doc = yaml.safe_load(spec.read_text())
    assert {k: v for k, v in doc["layers"][0].items() if k != "embeddings_init"} == {
        "name": "emb", "op": "embedding", "vocab_size": 12, "dim": 5, "mask_zero": True}
    assert "not_equal" not in {layer["name"] for layer in doc["layers"]}  # Keras' mask op: specgen makes its own
    ids = np.random.default_rng(3).integers(1, 12, (4, 9)).astype(np.int32)
    ids[0, 6:] = 0  # trailing
    ids[1, :4] = 0  # leading
    ids[2, 1::2] = 0  # holes
    for steps in (9, 5):  # the named time dimension: two lengths
        assert compare(spec, tmp_path, model, {"ids": ids[:, :steps]}) < RTOL


PADDED = np.array([[3, 4, 5, 0, 0, 0, 0, 0, 0],  # trailing padding
                   [0, 0, 0, 0, 7, 8, 9, 10, 11],  # leading
                   [1, 0, 2, 0, 3, 0, 4, 0, 5],  # holes
                   [6, 7, 8, 9, 10, 11, 1, 2, 3]], np.int32)  # none


def masked_input(name: str = "ids") -> Any:
    return keras.Input((None,), dtype="int32", name=name)


@pytest.mark.parametrize("drop", ["conv", "peak"])
def test_a_mask_keras_drops_before_any_use_is_left_out(tmp_path: Path, drop: str) -> None:
    """Conv1D and GlobalMaxPooling1D do not support masking: Keras destroys the mask there (with a warning), so
    the mask changes no output, and the spec (which refuses a mask there) is written without it: equal to Keras
    on padded ids (the padded steps count as data on both sides), the change named in the spec's header."""
    layers = keras.layers
    ids = masked_input()
    h = layers.Embedding(12, 5, mask_zero=True, name="emb")(ids)
    if drop == "conv":
        h = layers.GlobalAveragePooling1D(name="pool")(layers.Conv1D(4, 3, padding="same", name="conv")(h))
        where = "'conv' (Conv1D)"
    else:
        h = layers.GlobalMaxPooling1D(name="peak")(h)
        where = "'peak' (GlobalMaxPooling1D)"
    model = keras.Model(ids, layers.Dense(2, name="head")(h))
    randomize(model)
    model.save(tmp_path / "m.keras")
    spec = tmp_path / "m.yaml"
    assert run_import(tmp_path / "m.keras", "-o", spec) == 0
    text = spec.read_text()
    assert "mask_zero" not in yaml.safe_load(text)["layers"][0]
    assert f"#   Embedding mask_zero=True (Keras drops the mask at {where} before any layer uses it, so it changes " \
           "no output): emb\n" in text
    assert compare(spec, tmp_path, model, {"ids": PADDED}) < RTOL


def test_a_merge_of_masked_tensors_is_imported_as_keras_runs_it(tmp_path: Path) -> None:
    """A residual Add of two masked branches, and an Add of two embeddings over differently padded ids: Keras
    merges the masks with a LogicalOr layer (base_merge.py's compute_mask) and hands it to the LSTM and the
    masked mean; specgen's own rule (the OR of the inputs' masks) gives the same steps, and the outputs equal
    Keras'.

    Tolerance: each output is a few float32 dot products of 5 to 16 terms per step (about 16 ulp, 1e-6 relative
    to their magnitude) carried through 9 LSTM steps, whose gates contract rather than grow an error: at most
    9e-6 of the output's magnitude, so RTOL (1e-5); a step masked wrongly changes the outputs by about 10%
    (checked below)."""
    layers = keras.layers
    ids, other = masked_input(), masked_input("other")
    h = layers.Embedding(12, 5, mask_zero=True, name="emb")(ids)
    residual = layers.Add(name="residual")([layers.Dense(5, name="a")(h), layers.Dense(5, activation="tanh", name="b")(h)])
    seq = layers.LSTM(6, return_sequences=True, name="enc")(residual)
    joined = layers.Add(name="joined")([h, layers.Embedding(12, 5, mask_zero=True, name="emb2")(other)])
    outputs = {"mean": layers.GlobalAveragePooling1D(name="pool")(seq),
               "state": layers.LSTM(3, name="last")(joined)}
    model = keras.Model({"ids": ids, "other": other}, outputs)
    randomize(model)
    model.save(tmp_path / "m.keras")
    spec = tmp_path / "m.yaml"
    assert run_import(tmp_path / "m.keras", "-o", spec) == 0
    names = {layer["name"] for layer in yaml.safe_load(spec.read_text())["layers"]}
    assert not {n for n in names if n.startswith(("not_equal", "logical_or"))}  # Keras' mask ops: specgen's own
    feeds = {"ids": PADDED, "other": PADDED[::-1].copy()}  # other rows, other padding: the OR differs from each
    assert compare(spec, tmp_path, model, feeds) < RTOL
    unmasked = {"ids": np.where(PADDED == 0, 1, PADDED), "other": feeds["other"]}
    assert compare(spec, tmp_path, model, unmasked) < RTOL  # no padding in ids: the OR is other's mask alone
    theirs, padded = model.predict(feeds, verbose=0), model.predict(unmasked, verbose=0)
    assert np.abs(theirs["mean"] - padded["mean"]).max() > 0.1 * np.abs(theirs["mean"]).max()


def test_a_mask_keras_drops_on_one_path_and_uses_on_another_is_refused(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    layers = keras.layers
    ids = masked_input()
    h = layers.Embedding(12, 5, mask_zero=True, name="emb")(ids)
    out = layers.Concatenate(name="cat")([layers.GlobalMaxPooling1D(name="peak")(h), layers.LSTM(3, name="enc")(h)])
    err = refusal(tmp_path, keras.Model(ids, out), capsys)
    assert err.splitlines() == [
        f"{tmp_path / 'bad.keras'}: error: Keras layer 'peak' (GlobalMaxPooling1D): Keras drops the padding mask "
        "(mask_zero=True) here (GlobalMaxPooling1D does not support masking), while another layer uses the same "
        "mask; a spec carries a mask to every layer it reaches, so it cannot drop it on one path only (docs/spec.md, "
        "Masks): give this path an Embedding of its own without mask_zero, or end the time axis before this layer",
        "1 error found"]


def test_a_layer_keras_gives_the_mask_that_a_spec_cannot_is_refused(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """BatchNormalization takes Keras' mask (batch statistics over real steps) and passes it on: the mask is used,
    and never left out, even though the LSTM after it is not reached by specgen's rules."""
    layers = keras.layers
    ids = masked_input()
    h = layers.BatchNormalization(name="bn")(layers.Embedding(12, 5, mask_zero=True, name="emb")(ids))
    err = refusal(tmp_path, keras.Model(ids, layers.LSTM(3, name="enc")(layers.Conv1D(5, 1, name="conv")(h))), capsys)
    assert err.splitlines() == [
        f"{tmp_path / 'bad.keras'}: error: Keras layer 'bn' (BatchNormalization): its input carries a padding mask "
        "(mask_zero=True) that the spec cannot express here: Keras' BatchNormalization takes its batch statistics "
        "over the unmasked steps only; specgen's batch_norm takes them over every step (docs/spec.md, Masks); import "
        "the model without mask_zero, or end the time axis before this layer", "1 error found"]


def test_a_mask_specgen_would_not_make_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A NotEqual(ids, 0) the model computes itself and hands to an LSTM whose input carries no mask: Keras masks
    the LSTM, specgen's rules would not, so the mask argument cannot be left to specgen."""
    layers = keras.layers
    ids, other = masked_input(), masked_input("other")
    h = layers.Embedding(12, 5, name="emb")(ids)
    out = layers.LSTM(3, name="enc")(h, mask=keras.ops.not_equal(other, 0))
    err = refusal(tmp_path, keras.Model({"ids": ids, "other": other}, out), capsys)
    assert err.splitlines() == [
        f"{tmp_path / 'bad.keras'}: error: Keras layer 'enc' (LSTM): Keras hands it the mask argument 'mask' made "
        "from the ids 'other', where the spec's mask rules give no mask: a mask specgen would not make cannot be "
        "imported (docs/spec.md, Masks)", "1 error found"]


def onnx_against_predict(spec: Path, tmp_path: Path, model: Any, feeds: dict[str, np.ndarray]) -> float:
    """`specgen export` of the imported spec (restored from the .keras file), run by onnxruntime: the largest
    difference from `model.predict` over every output, relative to that output's largest value."""
    import onnxruntime as ort

    from specgen.cli import main

    assert main(["export", str(spec), "-o", str(tmp_path / "out")]) == 0
    session = ort.InferenceSession(str(tmp_path / "out" / "model.onnx"), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    theirs = model.predict(feeds, verbose=0)
    theirs = theirs if isinstance(theirs, dict) else dict(zip(model.output_names, theirs, strict=True))
    return max(float(np.abs(ours - theirs[name]).max() / np.abs(theirs[name]).max())
               for name, ours in zip(names, session.run(names, feeds), strict=True))


def initial_state_model(explicit_mask: bool = False) -> Any:
    """A masked embedding read by a GRU and an LSTM that start from states made of another input."""
    layers = keras.layers
    ids, context = masked_input(), keras.Input((4,), name="context")
    h = layers.Embedding(12, 5, mask_zero=True, name="emb")(ids)
    mask = {"mask": keras.ops.not_equal(ids, 0)} if explicit_mask else {}
    start = layers.Dense(3, activation="tanh", name="start")(context)
    cell = layers.Dense(3, name="cell")(context)
    outputs = {"gru": layers.GRU(3, name="gru")(h, initial_state=[start], **mask),
               "lstm": layers.LSTM(3, name="lstm")(h, initial_state=[start, cell], **mask)}
    model = keras.Model({"ids": ids, "context": context}, outputs)
    randomize(model)
    return model


def test_a_recurrent_call_with_initial_state_runs_unmasked_as_in_keras(tmp_path: Path) -> None:
    """Keras 3 fills in a layer's mask= only for a call with one tensor argument (Layer.__call__), so a GRU or
    LSTM called with initial_state= runs over the padded steps as data. The import wrote mask_zero: true and the
    spec masked them (0.7 off on trailing padding); the mask reaches no other layer, so the spec is written
    without it, the header says why, and the export equals model.predict on every padding."""
    model = initial_state_model()
    model.save(tmp_path / "m.keras")
    spec = tmp_path / "m.yaml"
    assert run_import(tmp_path / "m.keras", "-o", spec) == 0
    text = spec.read_text()
    assert "mask_zero" not in yaml.safe_load(text)["layers"][0]
    assert "#   Embedding mask_zero=True (Keras runs 'gru' (GRU) without it, as that call passes initial_state too; " \
           "Keras runs 'lstm' (LSTM) without it, as that call passes initial_state too; Keras 3 fills in mask= only " \
           "for a call with one tensor argument, and no other layer uses the mask, so it changes no output): emb\n" \
           in text
    feeds = {"ids": PADDED, "context": np.random.default_rng(4).standard_normal((4, 4)).astype(np.float32)}
    assert onnx_against_predict(spec, tmp_path, model, feeds) < RTOL


def test_a_mask_passed_with_initial_state_is_imported(tmp_path: Path) -> None:
    """The refusal's first fix: the mask passed in the call (`mask=keras.ops.not_equal(ids, 0)`) is recorded,
    Keras masks the layer, and the spec's mask_zero gives the same steps."""
    model = initial_state_model(explicit_mask=True)
    model.save(tmp_path / "m.keras")
    spec = tmp_path / "m.yaml"
    assert run_import(tmp_path / "m.keras", "-o", spec) == 0
    assert yaml.safe_load(spec.read_text())["layers"][0]["mask_zero"] is True
    feeds = {"ids": PADDED, "context": np.random.default_rng(4).standard_normal((4, 4)).astype(np.float32)}
    assert compare(spec, tmp_path, model, feeds) < RTOL


def test_a_recurrent_call_with_initial_state_whose_mask_another_layer_uses_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With return_sequences Keras still passes the mask on (the output mask is computed from the first input's),
    so the pooling after the unmasked GRU is masked: a spec cannot mask one and not the other."""
    layers = keras.layers
    ids, context = masked_input(), keras.Input((4,), name="context")
    h = layers.Embedding(12, 5, mask_zero=True, name="emb")(ids)
    seq = layers.GRU(3, return_sequences=True, name="gru")(h, initial_state=[layers.Dense(3, name="start")(context)])
    err = refusal(tmp_path, keras.Model({"ids": ids, "context": context}, layers.GlobalAveragePooling1D(name="pool")(seq)),
                  capsys)
    assert err.splitlines() == [
        f"{tmp_path / 'bad.keras'}: error: Keras layer 'gru' (GRU): Keras 3 runs this call without the padding mask "
        "(mask_zero=True) of its input, made from the ids 'ids': it fills in mask= only for a call with one tensor "
        "argument, and this call passes initial_state too; the spec's gru would read the mask, and it cannot be left "
        "out of the spec since 'pool' (GlobalAveragePooling1D) uses it (docs/import.md, Masks): pass the mask in the "
        "Keras call (mask=keras.ops.not_equal(ids, 0)) to mask this layer in Keras too, or feed it a tensor without "
        "the mask (an Embedding of its own without mask_zero)", "1 error found"]


def test_masks_of_other_kinds_are_refused_by_the_layer_that_makes_them(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A Masking layer is refused by its own name, and a mask the model computes itself names the layer that makes
    it, not a truncated dict of the tensor reference."""
    layers = keras.layers
    x = keras.Input((6, 2), name="x")
    err = refusal(tmp_path, keras.Model(x, layers.LSTM(2, name="enc")(layers.Masking(0.0, name="pad")(x))), capsys)
    assert err.splitlines() == [
        f"{tmp_path / 'bad.keras'}: error: Keras layer 'pad' (Masking): refused: its mask (the steps whose features all "
        "equal mask_value) is not an Embedding(mask_zero=True)'s padding mask, the only mask specgen imports "
        "(docs/import.md, Masks); remove the Masking layer, or feed token ids through Embedding(mask_zero=True)",
        "1 error found"]
    mask = keras.ops.any(keras.ops.not_equal(x, 0.0), axis=-1)
    err = refusal(tmp_path, keras.Model(x, layers.LSTM(2, name="enc")(x, mask=mask)), capsys)
    any_layer = err.split("the output of '")[1].split("'")[0]  # Keras numbers its operation layers: any, any_1, ...
    assert err.splitlines() == [
        f"{tmp_path / 'bad.keras'}: error: Keras layer 'enc' (LSTM): call argument 'mask' is the output of "
        f"'{any_layer}' (Any), a mask other than an Embedding(mask_zero=True)'s: specgen imports only those padding "
        "masks and their merges, which it derives itself (docs/import.md, Masks)", "1 error found"]
