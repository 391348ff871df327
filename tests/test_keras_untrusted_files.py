"""Issue 17 part 2: Keras files as untrusted input at the file-format level (specgen/runtime/keras_files.py).

Every hostile file is made here at test time from a real Keras model's own files (h5py, zipfile):

- HDF5 external storage pointing at a planted secret, a virtual dataset over another file, an external
  link, a soft link, a hard-link cycle, a filter HDF5 would load as a plugin and a tree 300 groups
  deep are refused before any dataset is read, by `export`,
  `restore-plan`, `train` and `import keras` alike, in one error line naming the link; the secret's
  bytes appear in no output, and nothing is written;
- external storage on a FIFO is refused at once (before the fix, `export` blocked forever on it);
- a `.keras` whose member inflates past its cap is refused while specgen's memory stays at a few
  chunks, whatever size the zip header claims; a member stored without compression is never held to
  the spec's bound (it cannot outgrow the archive); duplicate member names are refused.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import tracemalloc
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

keras = pytest.importorskip("keras")
h5py = pytest.importorskip("h5py")

from specgen.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KERNEL = "layers/dense/vars/0"  # where Keras 3 keeps the Dense layer's kernel in model.weights.h5 / .weights.h5
SECRET = b"CI_TOKEN=ghp_s3cr3t-planted-by-the-test-01234567"  # 48 bytes: a (4, 3) float32 kernel
SPEC = """\
specgen: 1
name: tiny
inputs: {{x: {{shape: [4]}}}}
outputs: {{y: fc}}
layers:
  - {{name: fc, op: dense, units: 3}}
loss: {{kind: sparse_softmax_cross_entropy, logits: y, labels: label}}
optimizers: {{all: {{kind: sgd, learning_rate: 0.1}}}}
train: {{batch_size: 4, seed: 0}}
data:
  train: {{npz: data.npz, features: {{x: x}}, labels: {{label: y}}}}
checkpoint:
  dir: run
  restore:
    - from: {source}
"""
DECLARED = (4 * 3 + 3) * 4  # bytes of the spec's variables: fc/kernel float32[4, 3], fc/bias float32[3]


@pytest.fixture(scope="module")
def model_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real Keras 3 model's .keras, .weights.h5 and legacy .h5, and the secret a hostile file points at."""
    folder = tmp_path_factory.mktemp("model")
    model = keras.Sequential([keras.Input((4,), name="x"), keras.layers.Dense(3, name="fc")], name="tiny")
    model.save(folder / "model.keras")
    model.save_weights(folder / "model.weights.h5")
    model.save(folder / "model.h5")
    (folder / "secret.txt").write_bytes(SECRET)
    with h5py.File(folder / "other.h5", "w") as other:
        other["k"] = np.frombuffer(SECRET, np.float32).reshape(4, 3)
    return folder


def plant(h5: Any, name: str, kind: str, folder: Path) -> None:
    """Replace dataset `name` with a hostile object of `kind` that reads what lies outside the file."""
    shape = h5[name].shape
    del h5[name]
    if kind == "external":
        h5.create_dataset(name, shape, np.float32, external=[(str(folder / "secret.txt"), 0, len(SECRET))])
    elif kind == "fifo":
        h5.create_dataset(name, shape, np.float32, external=[(str(folder / "fifo"), 0, len(SECRET))])
    elif kind == "virtual":
        layout = h5py.VirtualLayout(shape, np.float32)
        layout[:] = h5py.VirtualSource(str(folder / "other.h5"), "k", shape=shape)
        h5.create_virtual_dataset(name, layout)
    elif kind == "external_link":
        h5[name] = h5py.ExternalLink(str(folder / "other.h5"), "/k")
    elif kind == "soft_link":
        h5["stash"] = np.zeros(shape, np.float32)
        h5[name] = h5py.SoftLink("/stash")
    elif kind == "cycle":  # the layer's `layers` group is the model's: the reader would recurse forever
        h5[name] = np.zeros(shape, np.float32)
        h5["layers/dense/layers"] = h5["layers"]
    elif kind == "plugin":  # filter 307 (bzip2) is no built-in: reading would make HDF5 search for a plugin
        plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        plist.set_chunk(shape)
        plist.set_filter(307, h5py.h5z.FLAG_OPTIONAL, ())  # optional: written unfiltered here, no plugin needed
        space = h5py.h5s.create_simple(shape)
        h5py.h5d.create(h5.id, name.encode(), h5py.h5t.NATIVE_FLOAT, space, dcpl=plist)
    elif kind == "deep":
        h5[name] = np.zeros(shape, np.float32)
        h5.create_group("layers/dense/" + "/".join(["d"] * 300))


def hostile_weights(model_files: Path, folder: Path, kind: str, name: str = "hostile.weights.h5") -> Path:
    target = folder / name
    target.write_bytes((model_files / "model.weights.h5").read_bytes())
    with h5py.File(target, "r+") as h5:
        plant(h5, KERNEL, kind, model_files)
    return target


def rezip(target: Path, members: dict[str, bytes], compress: int = zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(target, "w", compress) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return target


def members_of(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def hostile_keras(model_files: Path, folder: Path, kind: str) -> Path:
    members = members_of(model_files / "model.keras")
    members["model.weights.h5"] = hostile_weights(model_files, folder, kind, "inner.h5").read_bytes()
    return rezip(folder / "hostile.keras", members)


def write_spec(folder: Path, source: Path) -> Path:
    rng = np.random.default_rng(0)
    np.savez(folder / "data.npz", x=rng.standard_normal((8, 4)).astype(np.float32), y=np.arange(8) % 3)
    (folder / "spec.yaml").write_text(SPEC.format(source=source.name))
    return folder / "spec.yaml"


def run(args: list[Any], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def refusal(model_files: Path, kind: str) -> str:
    """What the error line says after the file's name, for each hostile kind."""
    kernel = f"'/{KERNEL}'"
    return {
        "external": f"dataset {kernel} keeps its bytes in another file ('{model_files / 'secret.txt'}': HDF5 external "
                    "storage); specgen reads weights only from inside the file",
        "fifo": f"dataset {kernel} keeps its bytes in another file ('{model_files / 'fifo'}': HDF5 external "
                "storage); specgen reads weights only from inside the file",
        "virtual": f"dataset {kernel} is a virtual dataset (its bytes come from other files); specgen reads weights "
                   "only from inside the file",
        "external_link": f"{kernel} is an external link to '/k' in file '{model_files / 'other.h5'}'; specgen reads "
                         "nothing outside the file it was given",
        "soft_link": f"{kernel} is a soft link (to '/stash'); a Keras file has none, and specgen follows none",
        "cycle": "'/layers/dense/layers' is a second name for '/layers'; a Keras file names each object once",
        "plugin": f"dataset {kernel} uses filter 307 (unnamed), not one of HDF5's built-in filters (gzip, shuffle, "
                  "fletcher32, szip, nbit, scaleoffset, lzf)",
        "deep": f"'/layers/dense/{'/'.join(['d'] * 255)}' lies 257 groups deep, deeper than 256",
    }[kind]


def assert_refused(err: str, out: str, spec_line: str, file: Path, why: str) -> None:
    lines = err.splitlines()
    assert lines == [f"{spec_line}cannot read Keras weight file {file}: {why}", "1 error found"], err
    assert SECRET.decode() not in out + err


KINDS = ["external", "virtual", "external_link", "soft_link", "cycle", "plugin", "deep"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("container", ["weights.h5", "keras"])
def test_export_refuses_what_lies_outside_the_file(model_files: Path, tmp_path: Path, kind: str, container: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    source = (hostile_weights(model_files, tmp_path, kind) if container == "weights.h5"
              else hostile_keras(model_files, tmp_path, kind))
    spec = write_spec(tmp_path, source)
    code, out, err = run(["export", spec, "-o", tmp_path / "out"], capsys)
    assert code == 1
    assert_refused(err, out, f"{spec}:15:13: error: checkpoint.restore[0]: ", source, refusal(model_files, kind))
    assert not (tmp_path / "out").exists()


def test_the_unchanged_files_export_and_import(model_files: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The control: the same files without the hostile change restore, export and import (so the refusals
    above and below are the hostile change's)."""
    for name in ("model.weights.h5", "model.keras"):
        spec = write_spec(tmp_path, model_files / name)
        (tmp_path / "spec.yaml").write_text(spec.read_text().replace(f"from: {name}", f"from: {model_files / name}"))
        code, out, err = run(["export", spec, "-o", tmp_path / name], capsys)
        assert code == 0, err
        assert out.splitlines()[1] == "restore: restored 2, initialized 0, unused 0, mismatched 0", out
    for name in ("model.keras", "model.h5"):
        code, out, err = run(["import", "keras", model_files / name, "-o", tmp_path / f"{name}.yaml"], capsys)
        assert code == 0, err
        # Keras 3's legacy .h5 names a Sequential's weights `<model>/<layer>/<weight>`: read as `<layer>/<weight>`,
        # so the import's strict restore has every variable (issue 28: it exported random ones with exit 0)
        code, out, err = run(["export", tmp_path / f"{name}.yaml", "-o", tmp_path / f"{name}_onnx"], capsys)
        assert (code, out.splitlines()[1]) == (0, "restore: restored 2, initialized 0, unused 0, mismatched 0"), err


def test_restore_plan_and_train_refuse_and_write_nothing(model_files: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    source = hostile_keras(model_files, tmp_path, "external")
    spec = write_spec(tmp_path, source)
    why = refusal(model_files, "external")
    code, out, err = run(["restore-plan", spec, "--from", source], capsys)
    assert (code, out) == (1, "")
    assert_refused(err, out, f"{source}: error: ", source, why)
    code, out, err = run(["train", spec, "--steps", "1", "--quiet"], capsys)
    assert code == 1
    assert_refused(err, out, f"{spec}:15:13: error: checkpoint.restore[0]: ", source, why)
    # train writes its code and TensorBoard folders before it restores (train's order, not the reader's): no
    # checkpoint may exist, since that is what a later `--resume` or `export` would trust.
    assert not list((tmp_path / "run").glob("ckpt-*")) and not (tmp_path / "run" / "latest").exists()


def test_import_keras_refuses_hostile_weights_and_model_files(model_files: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    weights = hostile_weights(model_files, tmp_path, "external")
    code, out, err = run(["import", "keras", model_files / "model.keras", "--weights", weights,
                          "-o", tmp_path / "imported.yaml"], capsys)
    assert code == 1
    assert_refused(err, out, f"{model_files / 'model.keras'}: error: --weights: ", weights,
                   refusal(model_files, "external"))
    legacy = tmp_path / "legacy.h5"  # the legacy format keeps the kernel under its name
    legacy.write_bytes((model_files / "model.h5").read_bytes())
    with h5py.File(legacy, "r+") as h5:
        kernel = [n for n in _datasets(h5) if n.endswith("kernel")]
        assert len(kernel) == 1
        plant(h5, kernel[0], "external", model_files)
    code, out, err = run(["import", "keras", legacy, "-o", tmp_path / "imported.yaml"], capsys)
    assert code == 1
    assert err.splitlines() == [
        f"{legacy}: error: {legacy}: dataset '/{kernel[0]}' keeps its bytes in another file "
        f"('{model_files / 'secret.txt'}': HDF5 external storage); specgen reads weights only from inside the file",
        "1 error found"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hostile.weights.h5", "legacy.h5"]


def _datasets(h5: Any) -> list[str]:
    found: list[str] = []
    h5.visititems(lambda name, obj: found.append(name) if isinstance(obj, h5py.Dataset) else None)
    return found


def test_external_storage_on_a_fifo_is_refused_at_once(model_files: Path, tmp_path: Path) -> None:
    """Before the fix `export` opened the FIFO and waited forever for a writer: run it where a hang can be killed."""
    os.mkfifo(model_files / "fifo")
    try:
        source = hostile_weights(model_files, tmp_path, "fifo")
        spec = write_spec(tmp_path, source)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
        # 300 s: importing TensorFlow takes 5 s here, up to a minute on a loaded machine; a hang never ends.
        done = subprocess.run([sys.executable, "-m", "specgen", "export", str(spec), "-o", str(tmp_path / "out")],
                              capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    finally:
        (model_files / "fifo").unlink()
    assert done.returncode == 1
    assert done.stderr.splitlines()[-2:] == [  # paths relative to the working directory, as the CLI shows them
        f"spec.yaml:15:13: error: checkpoint.restore[0]: cannot read Keras weight file {source.name}: "
        f"{refusal(model_files, 'fifo')}", "1 error found"]
    assert not (tmp_path / "out").exists()


# --- zip members: bounded whatever the header claims ---------------------------------------------------------

PADDING = 96 * 2**20  # zeros after the real HDF5 bytes: 96 MiB inflated from about 100 KB, over the 64 MiB cap


def bomb(model_files: Path, target: Path, member: str, padding: int, pad: bytes = b"\0",
         method: int = zipfile.ZIP_DEFLATED) -> Path:
    """model.keras with `member` followed by `padding` bytes of `pad`, streamed (never held whole here)."""
    members = members_of(model_files / "model.keras")
    with zipfile.ZipFile(target, "w", method) as archive:
        for name, data in members.items():
            if name != member:
                archive.writestr(name, data)
                continue
            with archive.open(name, "w") as out:
                out.write(data)
                block = pad * 2**20
                for _ in range(padding // len(block)):
                    out.write(block)
    return target


def lie(path: Path, member: str, claimed: int) -> Path:
    """Patch the member's uncompressed size in its local header and its central directory entry."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        struct.pack_into("<I", data, archive.getinfo(member).header_offset + 22, claimed)
    at = data.find(b"PK\x01\x02")
    while at >= 0:
        length = struct.unpack_from("<H", data, at + 28)[0]
        if data[at + 46: at + 46 + length] == member.encode():
            struct.pack_into("<I", data, at + 24, claimed)
        at = data.find(b"PK\x01\x02", at + 4)
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("header", ["honest", "lying"])
def test_a_weights_bomb_is_refused_in_bounded_memory(model_files: Path, tmp_path: Path, header: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    source = bomb(model_files, tmp_path / "bomb.keras", "model.weights.h5", PADDING)
    claimed = zipfile.ZipFile(source).getinfo("model.weights.h5").file_size
    if header == "lying":  # claims 1,000 bytes: zipfile used to inflate everything in one call, then cut it
        claimed = 1000
        lie(source, "model.weights.h5", claimed)
    assert source.stat().st_size < 2**20
    spec = write_spec(tmp_path, model_files / "model.keras")
    spec.write_text(spec.read_text().replace("from: model.keras", f"from: {model_files / 'model.keras'}"))
    assert run(["restore-plan", spec], capsys)[0] == 0  # first: what the first run imports and caches is not counted
    spec = write_spec(tmp_path, source)
    tracemalloc.start()
    try:
        code, out, err = run(["restore-plan", spec], capsys)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    why = (f"model.weights.h5 inflates to more than the 64.0 MiB allowed (4 x the {DECLARED} bytes of variables the "
           f"spec declares + 64 MiB) (its zip header says {claimed} bytes)" if header == "honest"
           else "damaged (Bad CRC-32 for file 'model.weights.h5')")  # zipfile stops at the claimed size
    assert (code, out) == (1, "")
    assert err.splitlines() == [f"{spec}:15:13: error: checkpoint.restore[0]: cannot read Keras weight file {source}: "
                                f"{why}", "1 error found"]
    # The reader holds one 1 MiB chunk at a time (keras_files.CHUNK) and zipfile its compressed read buffer; 8 MiB
    # leaves room for the spec and plan's own objects. Before the fix the whole member was in memory (96 MiB+).
    assert peak < 8 * 2**20, peak


def test_a_member_stored_without_compression_is_not_held_to_the_spec(model_files: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Stored bytes cannot outgrow the archive: Keras writes members that way, so they restore however big."""
    source = bomb(model_files, tmp_path / "big.keras", "model.weights.h5", PADDING, method=zipfile.ZIP_STORED)
    assert source.stat().st_size > 4 * DECLARED + 64 * 2**20  # keras_files.weights_cap(DECLARED)
    spec = write_spec(tmp_path, source)
    code, out, err = run(["restore-plan", spec], capsys)
    assert code == 0, err
    assert out.splitlines()[-1] == "restored 2, initialized 0, unused 0, mismatched 0"


def peak_rss_mib(args: list[Any], cwd: Path) -> tuple[int, str, float]:
    """Exit status, stderr and peak resident memory (MiB) of `specgen ARGS` run in a fresh process."""
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec, so a child would report this test's own peak.
    script = ("import re, sys\nfrom specgen.cli import main\ncode = main(sys.argv[1:])\n"
              "hwm = re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read()).group(1)\n"
              "print('peak', hwm, file=sys.stderr)\nsys.exit(code)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=cwd)
    lines = done.stderr.splitlines()
    assert lines[-1].startswith("peak "), done.stderr
    return done.returncode, "\n".join(lines[:-1]), int(lines[-1].split()[1]) / 1024


@pytest.mark.parametrize("header", ["honest", "lying"])
def test_import_keras_reads_config_json_in_bounded_memory(model_files: Path, tmp_path: Path, header: str) -> None:
    """config.json: the real config then 256 MiB of spaces (still valid JSON), under a header claiming its
    real size (over the 16 MiB cap) or 1,000 bytes (the red team's 1 MB file took 2.16 GB this way)."""
    source = bomb(model_files, tmp_path / "bomb.keras", "config.json", 256 * 2**20, pad=b" ")
    claimed = zipfile.ZipFile(source).getinfo("config.json").file_size
    if header == "lying":
        claimed = 1000
        lie(source, "config.json", claimed)
    code, err, peak = peak_rss_mib(["import", "keras", source, "-o", tmp_path / "bomb.yaml"], tmp_path)
    why = (f": config.json inflates to more than the 16.0 MiB allowed (its zip header says {claimed} bytes)"
           if header == "honest" else " is not a Keras 3 .keras file (a zip with config.json): Bad CRC-32 for file "
           "'config.json'")  # zipfile stops at the claimed size and checks the CRC there
    assert code == 1
    assert err.splitlines()[-2:] == [f"bomb.keras: error: {source}{why}", "1 error found"]
    assert not (tmp_path / "bomb.yaml").exists()
    control, _, baseline = peak_rss_mib(["import", "keras", model_files / "model.keras", "-o", tmp_path / "ok.yaml"],
                                        tmp_path)
    # The same command on the real model: the bomb may add the 16 MiB cap's worth of chunks and no more (the
    # cap is never held whole: 1 MiB chunks, joined once at the end). Before the fix it added 256 MiB or more.
    assert control == 0 and peak < baseline + 32, (peak, baseline)


@pytest.mark.parametrize("case", ["duplicate", "nested_zip", "deep_json"])
def test_archive_tricks_are_one_error_line(model_files: Path, tmp_path: Path, case: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    members = members_of(model_files / "model.keras")
    if case == "nested_zip":
        members["model.weights.h5"] = (model_files / "model.keras").read_bytes()
    if case == "deep_json":
        members["config.json"] = b"[" * 100_000 + b"]" * 100_000
    source = rezip(tmp_path / f"{case}.keras", members)
    if case == "duplicate":  # a second config.json after the first: one reader sees one, another the other
        with pytest.warns(UserWarning, match="Duplicate name"), zipfile.ZipFile(source, "a") as archive:
            archive.writestr("config.json", b'{"class_name": "Functional"}')
    code, out, err = run(["restore-plan", write_spec(tmp_path, source), "--from", source], capsys)
    why = {"duplicate": "the zip holds two members named 'config.json' (readers disagree on which counts)",
           "nested_zip": "model.weights.h5 is not an HDF5 file",
           "deep_json": f"config.json nests JSON arrays or objects deeper than Python's parser goes "
                        f"({sys.getrecursionlimit()} levels)"}[case]
    assert (code, out) == (1, "")
    assert err.splitlines() == [f"{source}: error: cannot read Keras weight file {source}: {why}", "1 error found"]
    if case != "nested_zip":  # the importer reads config.json only
        code, out, err = run(["import", "keras", source, "-o", tmp_path / "imported.yaml"], capsys)
        assert (code, err.splitlines()) == (1, [f"{source}: error: {source}: {why}", "1 error found"])
        assert not (tmp_path / "imported.yaml").exists()
