"""Raw uint8 pixels end to end: examples/specs/digits_folder.yaml (a `uint8` input, `rescale` at the front) trains on
PNG class folders, exports with a Triton repository, and `specgen serve` (the real command, on a loopback port)
answers UINT8 requests, JSON and binary, exactly as `specgen infer` answers the float path: the same checkpoint
exported with a float32 input, fed the same pixels as float32. Casting 0..255 to float32 is exact and the graphs
are otherwise the same, so the logits are compared bit for bit.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")
httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from port_helpers import bound_port  # noqa: E402
from test_images_example import EXAMPLE, make_folder  # noqa: E402

from specgen.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PIXELS = 5  # test images sent


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example trained 2 steps on 40 images, exported twice from that checkpoint: uint8 and float32 input."""
    folder = tmp_path_factory.mktemp("uint8")
    make_folder(folder / "digits", 40)  # the first 34 of each split hold all ten classes
    text = EXAMPLE.read_text().replace("../data/digits_folder/", "digits/").replace("../../runs/digits_folder", "run")
    assert "{shape: [8, 8, 1], dtype: uint8}" in text
    (folder / "spec.yaml").write_text(text)
    (folder / "float.yaml").write_text(text.replace("dtype: uint8", "dtype: float32"))
    assert main(["train", str(folder / "spec.yaml"), "--steps", "2", "--quiet"]) == 0
    assert main(["export", str(folder / "spec.yaml"), "--checkpoint", str(folder / "run"), "-o",
                 str(folder / "u8"), "--triton"]) == 0
    assert main(["export", str(folder / "float.yaml"), "--checkpoint", str(folder / "run"), "-o",
                 str(folder / "f32")]) == 0
    return folder


def pixels(folder: Path) -> np.ndarray:
    """The first test image of each of the first PIXELS classes, as the PNG files hold them: uint8 [n, 8, 8, 1]."""
    from PIL import Image

    files = [sorted((folder / "digits" / "test" / str(d)).iterdir())[0] for d in range(PIXELS)]
    return np.stack([np.asarray(Image.open(f))[..., None] for f in files])


def infer(model: Path, x: np.ndarray, folder: Path, name: str) -> np.ndarray:
    np.savez(folder / f"{name}_in.npz", image=x)
    assert main(["infer", str(model), "--input", str(folder / f"{name}_in.npz"), "--output",
                 str(folder / f"{name}_out.npz"), "--provider", "cpu"]) == 0
    return np.load(folder / f"{name}_out.npz")["logits"]


@pytest.fixture(scope="module")
def url(exported: Path) -> Iterator[str]:
    """`specgen serve` on the exported Triton repository, in its own process, until the module ends. Port 0, read
    back from the server's log (info level: uvicorn's "running on" line): a port picked here and closed for the
    child could be taken meanwhile."""
    log = exported / "serve.log"
    with log.open("wb") as stderr:
        server = subprocess.Popen([sys.executable, "-m", "specgen", "serve", str(exported / "u8"), "--host",
                                   "127.0.0.1", "--port", "0", "--provider", "cpu"], stderr=stderr)
    try:
        deadline = time.monotonic() + 60
        base = f"http://127.0.0.1:{bound_port(server, log, deadline)}"
        while True:
            assert server.poll() is None and time.monotonic() < deadline, "specgen serve did not start"
            try:
                if httpx.get(f"{base}/v2/health/ready").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)  # polling the socket until it listens (no fixed wait)
        yield base
    finally:
        server.terminate()
        server.wait(30)


def test_config_and_graph_take_uint8(exported: Path) -> None:
    config = (exported / "u8" / "digits_folder" / "config.pbtxt").read_text()
    assert 'name: "image"\n    data_type: TYPE_UINT8\n    dims: [ 8, 8, 1 ]' in config
    import onnx

    graph = onnx.load(exported / "u8" / "model.onnx").graph
    assert [(i.name, i.type.tensor_type.elem_type) for i in graph.input] == [("image", onnx.TensorProto.UINT8)]
    assert (graph.node[0].op_type, list(graph.node[0].input)) == ("Cast", ["image"])


def test_serve_uint8_equals_infer_on_the_float_path(exported: Path, url: str) -> None:
    x = pixels(exported)
    assert x.dtype == np.uint8 and x.shape == (PIXELS, 8, 8, 1) and x.max() == 255
    float_path = infer(exported / "f32" / "model.onnx", x.astype(np.float32), exported, "f32")
    np.testing.assert_array_equal(infer(exported / "u8" / "model.onnx", x, exported, "u8"), float_path)
    model = f"{url}/v2/models/digits_folder/infer"
    as_json = {"inputs": [{"name": "image", "shape": list(x.shape), "datatype": "UINT8", "data": x.ravel().tolist()}]}
    response = httpx.post(model, json=as_json)
    assert response.status_code == 200, response.text
    logits = np.float32(response.json()["outputs"][0]["data"]).reshape(PIXELS, 10)
    np.testing.assert_array_equal(logits, float_path)
    header = json.dumps({"inputs": [{"name": "image", "shape": list(x.shape), "datatype": "UINT8",
                                     "parameters": {"binary_data_size": x.nbytes}}],
                         "outputs": [{"name": "logits", "parameters": {"binary_data": True}}]}).encode()
    response = httpx.post(model, content=header + x.tobytes(), headers={"Inference-Header-Content-Length": str(len(header))})
    assert response.status_code == 200, response.text
    length = int(response.headers["inference-header-content-length"])
    np.testing.assert_array_equal(np.frombuffer(response.content[length:], "<f4").reshape(PIXELS, 10), float_path)


@pytest.mark.parametrize(("datatype", "data", "message"), [
    ("UINT8", [256] + [0] * 63, "input 'image': received 256 in 'data', expected UINT8 integers in 0..255"),
    ("FP32", [0.5] * 64, 'input \'image\': received datatype "FP32", expected "UINT8"'),
])
def test_serve_refuses_what_is_not_a_pixel(url: str, datatype: str, data: list[float], message: str) -> None:
    body = {"inputs": [{"name": "image", "shape": [1, 8, 8, 1], "datatype": datatype, "data": data}]}
    response = httpx.post(f"{url}/v2/models/digits_folder/infer", json=body)
    assert response.status_code == 400 and response.json()["error"] == message, response.text
