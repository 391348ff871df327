"""`specgen serve`: model versions (version_policy), statistics, and the live repository (--model-control poll and
explicit), with Triton's own clients (`tritonclient.http`, `tritonclient.grpc`).

The swap test keeps HTTP and gRPC clients sending requests while a new version is written into the polled
repository (as `specgen export --triton` writes it), then a version with other outputs and a damaged file: every
request is answered 200 by the version it names, the bad versions are refused with one log line each and a
metric, and the good version keeps serving. Models: the digits CNN, each version with weights from its own seed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("uvicorn")
tg = pytest.importorskip("tritonclient.grpc")
th = pytest.importorskip("tritonclient.http")
httpx = pytest.importorskip("httpx")

from serve_helpers import Served, events, metric, model_bytes  # noqa: E402

from specgen.runtime.predictor import Predictor  # noqa: E402
from specgen.runtime.triton import write_repository  # noqa: E402
from specgen.serve.app import ServeOptions  # noqa: E402
from specgen.serve.model_config import RepositoryError  # noqa: E402
from specgen.serve.models import load_repository  # noqa: E402
from specgen.serve.repository import read_repository  # noqa: E402

CNN = "digits_cnn"


@pytest.fixture(scope="module")
def versions() -> dict[int, tuple[Any, bytes]]:
    """The CNN with three sets of weights: versions 1, 2 and 3."""
    return {v: model_bytes(CNN, seed=v) for v in (1, 2, 3)}


@pytest.fixture(scope="module")
def predictors(versions: dict[int, tuple[Any, bytes]]) -> dict[int, Predictor]:
    return {v: Predictor(data, provider="cpu") for v, (_, data) in versions.items()}


def images(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 8, 8, 1)).astype(np.float32)


def with_policy(folder: Path, policy: str) -> None:
    config = folder / "config.pbtxt"
    config.write_text(config.read_text() + f"version_policy {{ {policy} }}\n")


def http_input(x: np.ndarray) -> Any:
    tensor = th.InferInput("image", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return tensor


def grpc_input(x: np.ndarray) -> Any:
    tensor = tg.InferInput("image", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return tensor


def wait_until(condition: Any, what: str, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


# version_policy


def test_version_policies_select_the_version_folders(tmp_path: Path, versions: dict[int, tuple[Any, bytes]]) -> None:
    for v, (ir, data) in versions.items():
        write_repository(tmp_path, ir, data, version=v)
    (tmp_path / CNN / "5").mkdir()  # no model file: not a version
    folder = tmp_path / CNN
    base = (folder / "config.pbtxt").read_text()
    cases = [("", [3]), ("latest { num_versions: 2 }", [2, 3]), ("all { }", [1, 2, 3]),
             ("specific { versions: [ 1, 3, 9 ] }", [1, 3])]
    for policy, served in cases:
        (folder / "config.pbtxt").write_text(base + (f"version_policy {{ {policy} }}\n" if policy else ""))
        [entry] = read_repository(tmp_path)
        assert sorted(entry.versions) == served and entry.version == served[-1]
    (folder / "config.pbtxt").write_text(base + "version_policy { specific { versions: [ 4 ] } }\n")
    with pytest.raises(RepositoryError, match=r"config.pbtxt: version_policy specific \{ versions: \[4\] \} selects none "
                                              r"of the versions present \[1, 2, 3\]$"):
        read_repository(tmp_path)


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory: pytest.TempPathFactory, versions: dict[int, tuple[Any, bytes]]) -> Iterator[Served]:
    """Versions 1, 2, 3 on disk, `latest 2` served; dynamic batching off, so each request is one run (exact stats)."""
    root = tmp_path_factory.mktemp("two")
    for v, (ir, data) in versions.items():
        write_repository(root, ir, data, version=v)
    with_policy(root / CNN, "latest { num_versions: 2 }")
    with Served(load_repository(root, provider="cpu"), ServeOptions(grpc_port=0, batching=False)) as served:
        yield served


def test_every_version_the_policy_selects_is_served(two_versions: Served, predictors: dict[int, Predictor]) -> None:
    x = images(2, seed=1)
    http = th.InferenceServerClient(two_versions.http)
    grpc = tg.InferenceServerClient(two_versions.grpc)
    try:
        assert http.get_model_metadata(CNN)["versions"] == ["2", "3"]
        assert http.is_model_ready(CNN, "2") and not http.is_model_ready(CNN, "1")
        latest = http.infer(CNN, [http_input(x)])  # no version: the highest
        assert latest.get_response()["model_version"] == "3"
        np.testing.assert_array_equal(latest.as_numpy("logits"), predictors[3]({"image": x})["logits"])
        older = grpc.infer(CNN, [grpc_input(x)], model_version="2")
        assert older.get_response().model_version == "2"
        np.testing.assert_array_equal(older.as_numpy("logits"), predictors[2]({"image": x})["logits"])
        answer = httpx.post(f"http://{two_versions.http}/v2/models/{CNN}/versions/1/infer", json={"inputs": []})
        assert answer.status_code == 404
        assert answer.json() == {"error": "model 'digits_cnn' has no version '1'; the served versions are ['2', '3']"}
    finally:
        http.close()
        grpc.close()


def test_statistics_in_tritons_format(two_versions: Served) -> None:
    """Each request runs alone here: the counts are exact, and each run's durations appear in its batch size's row."""
    http = th.InferenceServerClient(two_versions.http)
    before = {s["version"]: s for s in http.get_inference_statistics(CNN)["model_stats"]}
    for rows in (1, 2, 2):
        http.infer(CNN, [http_input(images(rows, seed=rows))], model_version="2")
    with pytest.raises(th.InferenceServerException):
        http.infer(CNN, [http_input(images(1, seed=0)[..., 0])], model_version="2")  # wrong shape: refused, not counted
    [stats] = http.get_inference_statistics(CNN, "2")["model_stats"]
    everything = http.get_inference_statistics()["model_stats"]
    http.close()
    assert [(s["name"], s["version"]) for s in everything] == [(CNN, "2"), (CNN, "3")]
    old = before["2"]
    infer = stats["inference_stats"]
    assert stats["inference_count"] - old["inference_count"] == 5  # rows
    assert stats["execution_count"] - old["execution_count"] == 3  # runs
    for key in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert infer[key]["count"] - old["inference_stats"][key]["count"] == 3, key
        assert infer[key]["ns"] > old["inference_stats"][key]["ns"], key
    # refused before the queue: no statistics, as Triton gives none (failures after admission: test_serve_conformance)
    assert infer["fail"]["count"] - old["inference_stats"]["fail"]["count"] == 0
    assert infer["cache_hit"] == infer["cache_miss"] == {"count": 0, "ns": 0}
    sizes = {b["batch_size"]: b for b in stats["batch_stats"]}
    assert set(sizes) <= {1, 2} and sizes[2]["compute_infer"]["count"] >= 2
    runs = sum(b["compute_infer"]["count"] for b in stats["batch_stats"])
    assert runs == stats["execution_count"]
    # one request per run: each request is charged its own run's durations, so the two views add up the same
    assert sum(b["compute_infer"]["ns"] for b in stats["batch_stats"]) == infer["compute_infer"]["ns"]
    assert stats["last_inference"] > time.time() * 1000 - 60_000
    missing = httpx.get(f"http://{two_versions.http}/v2/models/{CNN}/versions/1/stats")
    assert missing.status_code == 404


# live repository


class Load:
    """Clients sending requests without a version, over HTTP and gRPC, until stopped: every answer is kept."""

    def __init__(self, served: Served, x: np.ndarray, clients: int = 2):
        self.x, self.served, self.stop = x, served, threading.Event()
        self.answers: list[tuple[str, int, str, np.ndarray | None, str | None]] = []
        self.threads = [threading.Thread(target=self._http, daemon=True) for _ in range(clients)]
        self.threads += [threading.Thread(target=self._grpc, daemon=True) for _ in range(clients)]

    def _http(self) -> None:
        client = th.InferenceServerClient(self.served.http)
        while not self.stop.is_set():
            try:
                result = client.infer(CNN, [http_input(self.x)])
                self.answers.append(("http", 200, result.get_response()["model_version"], result.as_numpy("logits"), None))
            except th.InferenceServerException as exc:
                self.answers.append(("http", int(exc.status() or 0), "", None, exc.message()))
        client.close()

    def _grpc(self) -> None:
        client = tg.InferenceServerClient(self.served.grpc)
        while not self.stop.is_set():
            try:
                result = client.infer(CNN, [grpc_input(self.x)])
                self.answers.append(("grpc", 200, result.get_response().model_version, result.as_numpy("logits"), None))
            except tg.InferenceServerException as exc:
                self.answers.append(("grpc", 0, "", None, f"{exc.status()} {exc.message()}"))
        client.close()

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)

    def versions(self) -> set[str]:
        return {version for _, _, version, _, _ in self.answers}


def test_new_version_swapped_in_under_load_and_bad_ones_refused(
        tmp_path: Path, versions: dict[int, tuple[Any, bytes]], predictors: dict[int, Predictor],
        caplog: pytest.LogCaptureFixture) -> None:
    write_repository(tmp_path, *versions[1])
    x = images(1, seed=7)
    options = ServeOptions(grpc_port=0, model_control="poll", poll_seconds=0.1)
    with caplog.at_level(logging.INFO), Served(load_repository(tmp_path, provider="cpu"), options, tmp_path) as served, \
            Load(served, x) as load:
        wait_until(lambda: len(load.answers) > 200, "no load")
        folder = write_repository(tmp_path, *versions[2])  # `specgen export --triton` into the repository: version 2
        assert sorted(p.name for p in folder.iterdir()) == ["1", "2", "config.pbtxt"]
        wait_until(lambda: "2" in load.versions(), "version 2 never answered")
        count = len(load.answers)
        wait_until(lambda: len(load.answers) > count + 200, "no load after the swap")
        # a version with other outputs (a ResNet's model copied by hand), then a damaged file: both refused
        (folder / "3").mkdir()
        (folder / "3" / "model.onnx").write_bytes(model_bytes("digits_resnet")[1])
        wait_until(lambda: len(events(caplog.records, "model_refused")) == 1, "version 3 was not refused")
        (folder / "4").mkdir()
        (folder / "4" / "model.onnx").write_bytes(b"not an onnx model")
        wait_until(lambda: len(events(caplog.records, "model_refused")) == 2, "version 4 was not refused")
        count = len(load.answers)
        wait_until(lambda: len(load.answers) > count + 50, "no load after the refusals")
        metrics = httpx.get(f"http://{served.http}/metrics").text
        index = th.InferenceServerClient(served.http).get_model_repository_index()
    assert [a for a in load.answers if a[1] != 200] == []  # not one request failed
    assert load.versions() == {"1", "2"}
    for _, _, version, logits, _ in load.answers:
        np.testing.assert_allclose(logits, predictors[int(version)]({"image": x})["logits"], rtol=0, atol=1e-6)
    last = [version for _, _, version, _, _ in load.answers[-20:]]
    assert last == ["2"] * 20  # the good version kept serving
    assert metric(metrics, "specgen_model_loads_total", model=CNN, result="loaded") == 1
    assert metric(metrics, "specgen_model_loads_total", model=CNN, result="refused") == 2
    assert metric(metrics, "specgen_model_info", model=CNN, version="2") == 1
    assert metric(metrics, "specgen_model_info", model=CNN, version="1") == 0
    refused = events(caplog.records, "model_refused")
    assert [(r["version"], r["error"]) for r in refused] == [
        (3, f"{folder / '3' / 'model.onnx'}: the graph's outputs are ['logits', 'probabilities']; config.pbtxt "
            "declares ['logits']"),
        (4, f"{folder / '4' / 'model.onnx'}: not an ONNX model (it is a text file); expected an .onnx model written "
            "by specgen export")]
    assert [(r["version"], r["replaced"]) for r in events(caplog.records, "model_loaded")] == [(2, False)]
    assert [r["version"] for r in events(caplog.records, "model_unloaded")] == [1]
    assert [r for r in caplog.records if r.exc_info] == []
    assert [(e["version"], e["state"]) for e in index] == [  # version 1, replaced, is `unloaded` (Triton's index)
        ("1", "UNAVAILABLE"), ("2", "READY"), ("3", "UNAVAILABLE"), ("4", "UNAVAILABLE")]


def test_a_broken_config_is_refused_and_the_model_keeps_serving(tmp_path: Path, versions: dict[int, tuple[Any, bytes]],
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    folder = write_repository(tmp_path, *versions[1])
    good = (folder / "config.pbtxt").read_text()
    options = ServeOptions(model_control="poll", poll_seconds=0.1)
    with caplog.at_level(logging.INFO), Served(load_repository(tmp_path, provider="cpu"), options, tmp_path) as served:
        (folder / "config.pbtxt").write_text(good.replace("max_batch_size", "max_batch_sise"))
        wait_until(lambda: events(caplog.records, "model_refused"), "the broken config was not refused")
        time.sleep(0.3)  # more polls: the same refusal is not logged again
        client = th.InferenceServerClient(served.http)
        assert client.infer(CNN, [http_input(images(1, seed=1))]).get_response()["model_version"] == "1"
        (folder / "config.pbtxt").write_text(good.replace("dims: [ 10 ]", "dims: [ 11 ]"))  # no version fits it
        wait_until(lambda: len(events(caplog.records, "model_refused")) == 2, "the mismatching config was not refused")
        assert client.infer(CNN, [http_input(images(1, seed=1))]).get_response()["model_version"] == "1"
        client.close()
    refused = events(caplog.records, "model_refused")
    assert refused[0]["version"] is None and refused[0]["error"].startswith(
        f"{folder / 'config.pbtxt'}:4:1: not a Triton model configuration: ")
    assert "no field named \"max_batch_sise\"" in refused[0]["error"]
    assert refused[1] == {"event": "model_refused", "model": CNN, "version": 1, "error": (
        f"{folder / '1' / 'model.onnx'}: output 'logits' has shape ['batch', 10] in the graph; config.pbtxt declares "
        "[-1, 11]; expected the graph's rank and sizes (-1 only where the graph names a dimension)")}


def test_each_unloaded_version_says_why(tmp_path: Path, versions: dict[int, tuple[Any, bytes]],
                                        caplog: pytest.LogCaptureFixture) -> None:
    """`model_unloaded`'s reason: a version folder deleted is `removed from the repository` (the old code said
    `replaced` for every version that left), a version_policy edit `not chosen by version_policy`, and a newer
    version that the same policy chooses `replaced`."""
    import shutil

    repo = tmp_path / "repo"
    for v in (1, 2):
        write_repository(repo, *versions[v], version=v)
    folder = repo / CNN
    with_policy(folder, "all { }")
    options = ServeOptions(model_control="poll", poll_seconds=0.1)

    def unloaded() -> list[tuple[int, str]]:
        return [(e["version"], e["reason"]) for e in events(caplog.records, "model_unloaded")]

    config = (folder / "config.pbtxt").read_text()
    with caplog.at_level(logging.INFO), Served(load_repository(repo, provider="cpu"), options, repo):
        shutil.move(folder / "2", tmp_path / "kept")
        wait_until(lambda: len(unloaded()) >= 1, "version 2 was not unloaded")
        shutil.move(tmp_path / "kept", folder / "2")
        wait_until(lambda: len(events(caplog.records, "model_loaded")) == 1, "version 2 was not loaded again")
        (folder / "config.pbtxt").write_text(config.replace("all { }", "specific { versions: [ 2 ] }"))
        # A config.pbtxt edit loads the versions it keeps again: the old version 2 leaves as `replaced`.
        wait_until(lambda: len(unloaded()) >= 3, "versions 1 and 2 were not unloaded")
        (folder / "3").mkdir()
        (folder / "3" / "model.onnx").write_bytes((folder / "2" / "model.onnx").read_bytes())
        (folder / "config.pbtxt").write_text(config.replace("version_policy { all { } }", ""))  # latest 1: 3
        wait_until(lambda: len(unloaded()) >= 4, "version 2 was not unloaded")
        (folder / "4").mkdir()
        (folder / "4" / "model.onnx").write_bytes((folder / "2" / "model.onnx").read_bytes())
        wait_until(lambda: len(unloaded()) >= 5, "version 3 was not unloaded")
        (folder / "4" / "model.onnx").unlink()  # the file alone: its folder stays
        wait_until(lambda: len(unloaded()) >= 6, "version 4 was not unloaded")
    lines = unloaded()
    # One install retires versions 1 and 2 at once; each line is written by its own task: their order is free.
    assert [lines[0], sorted(lines[1:3]), *lines[3:]] == [
        (2, "removed from the repository"), [(1, "not chosen by version_policy"), (2, "replaced")],
        (2, "not chosen by version_policy"), (3, "replaced"), (4, "removed from the repository")]


def test_a_refused_start_lists_every_problem_at_once(tmp_path: Path, versions: dict[int, tuple[Any, bytes]]) -> None:
    """A broken config.pbtxt in one folder and a version of another folder whose graph differs from its config: one
    RepositoryError with both lines (the old code stopped after the configs, so the second showed only once the
    first was fixed)."""
    folder = write_repository(tmp_path, *versions[1])
    (folder / "2").mkdir()
    (folder / "2" / "model.onnx").write_bytes(model_bytes("digits_resnet")[1])
    (tmp_path / "broken" / "1").mkdir(parents=True)
    (tmp_path / "broken" / "config.pbtxt").write_text('name: "broken"\nmax_batch_size: 4\nbogus: 1\n')
    with pytest.raises(RepositoryError) as raised:
        load_repository(tmp_path, provider="cpu")
    lines = str(raised.value).splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"{tmp_path / 'broken' / 'config.pbtxt'}:3:1: not a Triton model ")
    assert lines[1] == (f"{folder / '2' / 'model.onnx'}: the graph's outputs are ['logits', 'probabilities']; "
                        "config.pbtxt declares ['logits']")


def test_explicit_load_and_unload(tmp_path: Path, versions: dict[int, tuple[Any, bytes]],
                                  predictors: dict[int, Predictor]) -> None:
    folder = write_repository(tmp_path, *versions[1])
    x = images(1, seed=3)
    options = ServeOptions(grpc_port=0, model_control="explicit")
    with Served(load_repository(tmp_path, provider="cpu"), options, tmp_path) as served:
        http, grpc = th.InferenceServerClient(served.http), tg.InferenceServerClient(served.grpc)
        assert http.get_model_repository_index() == [{"name": CNN, "version": "1", "state": "READY", "reason": ""}]
        write_repository(tmp_path, *versions[2])
        time.sleep(0.2)
        assert http.infer(CNN, [http_input(x)]).get_response()["model_version"] == "1"  # not loaded until asked
        http.load_model(CNN)
        result = grpc.infer(CNN, [grpc_input(x)])
        assert result.get_response().model_version == "2"
        np.testing.assert_array_equal(result.as_numpy("logits"), predictors[2]({"image": x})["logits"])
        grpc.unload_model(CNN)
        with pytest.raises(th.InferenceServerException, match="unknown model 'digits_cnn'"):
            http.infer(CNN, [http_input(x)])
        assert grpc.get_model_repository_index(as_json=True)["models"] == [  # a row per version, as Triton's
            {"name": CNN, "version": v, "state": "UNAVAILABLE", "reason": "unloaded"} for v in ("1", "2")]
        grpc.load_model(CNN)
        assert grpc.is_model_ready(CNN, "2")
        (folder / "3").mkdir()
        (folder / "3" / "model.onnx").write_bytes(b"\0" * 10)
        with pytest.raises(tg.InferenceServerException) as caught:
            grpc.load_model(CNN)
        assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert caught.value.message() == (
            f"{folder / '3' / 'model.onnx'}: not an ONNX model (onnxruntime cannot parse it: a damaged model or another "
            "format); expected an .onnx model written by specgen export; model 'digits_cnn' keeps serving version(s) [2]")
        assert http.infer(CNN, [http_input(x)]).get_response()["model_version"] == "2"
        with pytest.raises(th.InferenceServerException, match=r"load parameters \['config'\] are not supported"):
            http.load_model(CNN, config='{"max_batch_size": 8}')
        with pytest.raises(th.InferenceServerException, match="no model folder 'nope' in the repository"):
            http.load_model("nope")
        http.close()
        grpc.close()


def test_load_needs_explicit_model_control(tmp_path: Path, versions: dict[int, tuple[Any, bytes]]) -> None:
    write_repository(tmp_path, *versions[1])
    with Served(load_repository(tmp_path, provider="cpu"), ServeOptions(grpc_port=0)) as served:
        answer = httpx.post(f"http://{served.http}/v2/repository/models/{CNN}/unload")
        assert answer.status_code == 400
        assert answer.json() == {"error": "model load and unload need --model-control explicit; this server's "
                                          "repository is fixed at start (--model-control none)"}
        client = tg.InferenceServerClient(served.grpc)
        with pytest.raises(tg.InferenceServerException) as caught:
            client.load_model(CNN)
        assert caught.value.status() == "StatusCode.FAILED_PRECONDITION"
        client.close()


def test_warm_up_refuses_a_version_that_fails_at_the_configs_shapes(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """Its graph fits config.pbtxt on paper (a named dimension) but cannot run at the config's dims: refused at load.
    With a variable dimension in the config the warm-up size is a guess, so there a failure is only logged."""
    import onnx
    from onnx import TensorProto, helper

    from specgen.serve.model_config import parse_config
    from specgen.serve.models import load_version

    graph = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
                              [helper.make_tensor("shape", TensorProto.INT64, [2], [1, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    def config(dims: int) -> str:
        return (f'name: "m" max_batch_size: 4 input [ {{ name: "x" data_type: TYPE_FP32 dims: [ {dims} ] }} ] '
                'output [ { name: "y" data_type: TYPE_FP32 dims: [ 2 ] } ]')

    with pytest.raises(RepositoryError) as caught:  # 3 values cannot become [1, 2]
        load_version("m", 1, path, parse_config(config(3)), provider="cpu")
    assert str(caught.value).startswith(f"{path}: warm-up inference failed: ")
    with caplog.at_level(logging.INFO):  # -1 warms up with 1 value, which cannot either: logged, and loaded
        load_version("m", 1, path, parse_config(config(-1)), provider="cpu")
    [line] = events(caplog.records, "warm_up_skipped")
    assert line["model"] == "m" and "warm-up inference failed" in line["error"]


def test_a_precision_variant_is_gated_at_load(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A version folder holding a precision variant and its gate files (as `specgen export --precision ... --force
    --triton` writes them): one whose accuracy fails is not served, its float32 reference is; one that passes
    (as accurate, faster) is served. The graphs and files are those of tests/test_precision_verify.py."""
    from test_precision_verify import WEIGHT, X, _classifier, _quantized, _write

    from specgen.runtime.precision import verify
    from specgen.serve import models

    assert models.VARIANT_INFO == verify.INFO_FILE
    config = ('name: "clf" backend: "onnxruntime" max_batch_size: 16 '
              'input [ { name: "x" data_type: TYPE_FP32 dims: [ 64 ] } ] '
              'output [ { name: "logits" data_type: TYPE_FP32 dims: [ 4 ] } ]')
    (tmp_path / "clf").mkdir()
    (tmp_path / "clf" / "config.pbtxt").write_text(config)
    reference = _classifier(WEIGHT)
    _write(tmp_path / "clf" / "1", _classifier(-WEIGHT), reference)  # wrong on every example: refused
    with caplog.at_level(logging.INFO):
        [refused] = load_repository(tmp_path, provider="cpu")
    np.testing.assert_array_equal(refused.run({"x": X})["logits"], Predictor(reference, provider="cpu")({"x": X})["logits"])
    assert refused.path == tmp_path / "clf" / "1" / verify.REFERENCE_FILE
    [line] = events(caplog.records, "variant_checked")
    assert (line["version"], line["passed"]) == (1, False)
    assert line["line"].startswith(f"{tmp_path / 'clf' / '1' / 'model.onnx'}: int8 variant refused on CPUExecutionProvider")
    caplog.clear()
    _write(tmp_path / "clf" / "2", _quantized(WEIGHT), _classifier(WEIGHT, heavy=24))  # as accurate, faster: served
    with caplog.at_level(logging.INFO):
        [passed] = load_repository(tmp_path, provider="cpu")
    assert (passed.version, passed.path) == (2, tmp_path / "clf" / "2" / "model.onnx")
    assert [line["passed"] for line in events(caplog.records, "variant_checked")] == [True]
