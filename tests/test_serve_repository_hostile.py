"""`specgen serve` against what an independent red team tried on the live repository and the gRPC wire (trust,
round 5): version names that are not versions, messages that do not parse, unload of names that name nothing, a
repository that disappears under a polling server, a config that would hold requests forever, a model file outside
its version folder, and request values that only onnxruntime can refuse. Each gets its status code and one line,
never a traceback, and the versions served keep serving.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("uvicorn")
grpc = pytest.importorskip("grpc")
tg = pytest.importorskip("tritonclient.grpc")
httpx = pytest.importorskip("httpx")

from serve_helpers import Served, events, model_bytes  # noqa: E402
from tritonclient.grpc import service_pb2, service_pb2_grpc  # noqa: E402

from specgen.ir.resolve import build_ir  # noqa: E402
from specgen.render.files import render_files  # noqa: E402
from specgen.runtime.onnx_export import with_weights  # noqa: E402
from specgen.runtime.parity import random_weights  # noqa: E402
from specgen.runtime.triton import write_repository  # noqa: E402
from specgen.serve.batcher import Batcher  # noqa: E402
from specgen.serve.model_config import MAX_QUEUE_DELAY_US, RepositoryError, parse_config  # noqa: E402
from specgen.serve.models import load_repository  # noqa: E402
from specgen.serve.options import ServeOptions  # noqa: E402
from specgen.serve.repository import read_repository, version_number  # noqa: E402
from specgen.serve.server import Server, server_config  # noqa: E402
from specgen.spec.load import load_spec  # noqa: E402

CNN = "digits_cnn"
ROOT = Path(__file__).resolve().parents[1]


def quiet(records: list[logging.LogRecord]) -> None:
    """No traceback and nothing at error level: each refusal here is the client's mistake, not the server's."""
    assert [r.getMessage() for r in records if r.exc_info or r.levelno >= logging.ERROR] == []


def image_body() -> bytes:
    return b'{"inputs":[{"name":"image","shape":[1,8,8,1],"datatype":"FP32","data":[' + b",".join([b"0"] * 64) + b"]}]}"


@pytest.fixture(scope="module")
def cnn() -> tuple[Any, bytes]:
    return model_bytes(CNN, seed=1)


# version names


@pytest.mark.quick
@pytest.mark.parametrize(("text", "number"), [
    ("1", 1), ("42", 42), (str(2**63 - 1), 2**63 - 1),
    ("0", None), ("01", None), ("0001", None), ("", None), (" 1", None), ("1e3", None), ("-1", None), ("+1", None),
    ("²", None), ("١", None), ("1²", None), (str(2**63), None), ("9" * 5000, None)])
def test_a_version_is_a_positive_ascii_decimal_within_int64(text: str, number: int | None) -> None:
    assert version_number(text) == number


def test_folders_that_name_no_version_are_not_versions(tmp_path: Path, cnn: tuple[Any, bytes]) -> None:
    folder = write_repository(tmp_path, *cnn, version=2)
    for name in ("²", "01", "0", "v3"):  # Triton ignores all four; int('²') raised before
        shutil.copytree(folder / "2", folder / name)
    [entry] = read_repository(tmp_path)
    assert sorted(entry.versions) == [2]
    write_repository(tmp_path, *cnn)  # export --triton into the repository: the next version after 2 ('01' is not 1)
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["0", "01", "2", "3", "v3", "²"]


def test_version_strings_that_name_no_version_get_404(tmp_path: Path, cnn: tuple[Any, bytes],
                                                      caplog: pytest.LogCaptureFixture) -> None:
    write_repository(tmp_path, *cnn)
    caplog.set_level(logging.INFO, logger="specgen.serve")
    with Served(load_repository(tmp_path, provider="cpu"), ServeOptions(grpc_port=0)) as served:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel := grpc.insecure_channel(served.grpc))
        for version in ("9" * 5000, "01", "²"):  # int() refuses 5000 digits (ValueError: a 500 before)
            shown = version if len(version) <= 80 else version[:77] + "..."
            message = f"model '{CNN}' has no version '{shown}'; the served version is '1'"
            for path in ("infer", "stats", ""):
                url = f"http://{served.http}/v2/models/{CNN}/versions/{version}" + (f"/{path}" if path else "")
                answer = httpx.post(url, content=image_body()) if path == "infer" else httpx.get(url)
                assert (answer.status_code, answer.json()) == (404, {"error": message}), url[:120]
            for call, request in ((stub.ModelInfer, service_pb2.ModelInferRequest(model_name=CNN, model_version=version)),
                                  (stub.ModelMetadata, service_pb2.ModelMetadataRequest(name=CNN, version=version))):
                with pytest.raises(grpc.RpcError) as caught:
                    call(request, timeout=10)
                assert (caught.value.code(), caught.value.details()) == (grpc.StatusCode.NOT_FOUND, message)
        channel.close()
    quiet(caplog.records)


# the gRPC wire


def test_a_message_that_does_not_parse_is_invalid_argument(tmp_path: Path, cnn: tuple[Any, bytes],
                                                             caplog: pytest.LogCaptureFixture) -> None:
    write_repository(tmp_path, *cnn)
    caplog.set_level(logging.INFO, logger="specgen.serve")
    with Served(load_repository(tmp_path, provider="cpu"), ServeOptions(grpc_port=0)) as served:
        channel = grpc.insecure_channel(served.grpc)
        # bytes in, bytes out: what a broken or hostile client sends (0xff: a field number 0 with wire type 7;
        # field 1 of ModelInferRequest, a string, holding invalid UTF-8)
        for method, kind in (("ModelInfer", "ModelInferRequest"), ("ModelMetadata", "ModelMetadataRequest"),
                             ("RepositoryModelUnload", "RepositoryModelUnloadRequest")):
            call = channel.unary_unary(f"/inference.GRPCInferenceService/{method}")
            for raw in (b"\xff" * 5, b"\x0a\x02\xc3\x28"):
                with pytest.raises(grpc.RpcError) as caught:
                    call(raw, timeout=10)
                assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert caught.value.details().startswith(f"{method}: the request is not an inference.{kind} message (")
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        assert stub.ModelReady(service_pb2.ModelReadyRequest(name=CNN), timeout=10).ready  # still serving
        channel.close()
    quiet(caplog.records)
    assert len(events(caplog.records, "invalid_message")) == 6


# explicit unload


def test_unload_of_a_name_that_names_no_model_is_refused(tmp_path: Path, cnn: tuple[Any, bytes],
                                                          caplog: pytest.LogCaptureFixture) -> None:
    write_repository(tmp_path, *cnn)
    caplog.set_level(logging.INFO, logger="specgen.serve")
    options = ServeOptions(grpc_port=0, model_control="explicit")
    with Served(load_repository(tmp_path, provider="cpu"), options, tmp_path) as served:
        client = tg.InferenceServerClient(served.grpc)
        (tmp_path / "spare").mkdir()  # a folder of the repository, never loaded: unloading it is a no-op
        index = client.get_model_repository_index(as_json=True)["models"]
        long = "z" * 10_000
        cases = [("nope", 404, "unknown model 'nope': it is neither served nor in the repository (served: "
                               "['digits_cnn'])"),
                 (long, 400, "a model name of 10,000 bytes cannot name a model folder of the repository (at most 255 "
                             "bytes)"),
                 ("%2E%2E", 400, '".." cannot name a model folder of the repository')]
        for name, status, message in cases:
            answer = httpx.post(f"http://{served.http}/v2/repository/models/{name}/unload")
            assert (answer.status_code, answer.json()) == (status, {"error": message})
        with pytest.raises(tg.InferenceServerException) as caught:
            client.unload_model("ghost")
        assert caught.value.status() == "StatusCode.NOT_FOUND"
        assert client.get_model_repository_index(as_json=True)["models"] == index  # no entry for any of them
        client.unload_model("spare")
        assert client.is_model_ready(CNN)
        client.close()
    quiet(caplog.records)


# the polled repository


def test_a_repository_that_disappears_is_one_warning_and_the_models_keep_serving(
        tmp_path: Path, cnn: tuple[Any, bytes], caplog: pytest.LogCaptureFixture) -> None:
    repo = tmp_path / "repo"
    write_repository(repo, *cnn)
    caplog.set_level(logging.INFO, logger="specgen.serve")
    options = ServeOptions(grpc_port=0, model_control="poll", poll_seconds=0.05)
    with Served(load_repository(repo, provider="cpu"), options, repo) as served:
        repo.rename(tmp_path / "away")
        deadline = time.monotonic() + 10  # a poll that saw it gone, however late the poll task ran
        while not events(caplog.records, "repository_unreadable"):
            assert time.monotonic() < deadline, "the repository's absence was never noticed"
            time.sleep(0.02)
        time.sleep(0.3)  # about 6 more polls while it is away: each would repeat the warning if it were not logged once
        assert httpx.post(f"http://{served.http}/v2/models/{CNN}/infer", content=image_body()).status_code == 200
        (tmp_path / "away").rename(repo)
        deadline = time.monotonic() + 20
        while not events(caplog.records, "repository_readable"):
            assert time.monotonic() < deadline, "the repository was never read again"
            time.sleep(0.02)
    quiet(caplog.records)
    [warning] = events(caplog.records, "repository_unreadable")
    assert warning["error"].startswith(f"{repo}: cannot be listed: ")
    assert events(caplog.records, "model_unloaded") == []


# config.pbtxt


@pytest.mark.quick
def test_config_bounds_the_queue_delay_and_keeps_the_model_file_in_its_folder() -> None:
    base = ('name: "m"\nmax_batch_size: 8\ninput [{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }]\n'
            'output [{ name: "y" data_type: TYPE_FP32 dims: [ 2 ] }]\n')
    assert parse_config(base + f"dynamic_batching {{ max_queue_delay_microseconds: {MAX_QUEUE_DELAY_US} }}\n"
                        ).max_queue_delay_us == 10_000_000
    with pytest.raises(RepositoryError) as caught:
        parse_config(base + "dynamic_batching { max_queue_delay_microseconds: 18446744073709551615 }\n", "m.pbtxt")
    assert str(caught.value) == ("m.pbtxt: dynamic_batching max_queue_delay_microseconds 18446744073709551615 is more "
                                 "than 10,000,000 (10 s); expected at most that (a few hundred to a few thousand is "
                                 "usual)")
    for name in ("/abs/model.onnx", "../../x.onnx", "sub/model.onnx", ".."):
        with pytest.raises(RepositoryError) as caught:
            parse_config(base + f'default_model_filename: "{name}"\n', "m.pbtxt")
        assert str(caught.value) == (f"m.pbtxt: default_model_filename {name!r} is not a plain file name; expected "
                                     "the name of the model file inside each version folder (model.onnx)")
    assert parse_config(base + 'default_model_filename: "net.onnx"\n').model_filename == "net.onnx"


def test_a_retired_version_runs_what_it_holds_without_waiting_out_its_delay() -> None:
    """Requests queued in a version that is swapped out (each one keeps it open) run at once with what is queued;
    before, they waited out its max_queue_delay, and with a huge one forever."""
    async def scenario() -> tuple[float, list[int]]:
        batcher = Batcher("m", lambda x: {"y": x["x"] * 2}, max_batch_size=8, max_delay=3600.0, queue_size=8)
        batcher.start()
        futures = [batcher.submit({"x": np.full((1, 2), i, np.float32)}, 1) for i in range(3)]
        await asyncio.sleep(0.05)
        assert not any(f.done() for f in futures)  # waiting for company, up to an hour
        started = time.monotonic()
        batcher.hurry()
        results = await asyncio.wait_for(asyncio.gather(*futures), 30)
        waited = time.monotonic() - started
        await batcher.close()
        return waited, [int(r["y"][0, 0]) for r in results]

    waited, values = asyncio.run(scenario())
    assert values == [0, 2, 4] and waited < 30


# values only onnxruntime can refuse


@pytest.fixture(scope="module")
def text_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The text transformer with a variable sequence length (`tokens: [seq]`) and random weights."""
    root = tmp_path_factory.mktemp("text")
    spec = root / "text_seq.yaml"
    spec.write_text((ROOT / "examples" / "specs" / "text_transformer.yaml").read_text()
                    .replace("tokens: {shape: [16], dtype: int32}", "tokens: {shape: [seq], dtype: int32}")
                    .replace("name: text_transformer", "name: text_seq"))
    ir = build_ir(load_spec(spec))
    model = onnx.load_from_string(render_files(ir)["model.onnx"])
    write_repository(root / "repo", ir, with_weights(model, ir, random_weights(ir, np.random.default_rng(0)))
                     .SerializeToString())
    return root / "repo"


def test_a_length_of_0_and_a_token_past_the_vocabulary_are_400(text_repo: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="specgen.serve")
    with Served(load_repository(text_repo, provider="cpu"), ServeOptions(grpc_port=0)) as served:
        url = f"http://{served.http}/v2/models/text_seq/infer"

        def infer(shape: list[int], data: list[int]) -> tuple[int, str]:
            body = {"inputs": [{"name": "tokens", "shape": shape, "datatype": "INT32", "data": data}]}
            answer = httpx.post(url, json=body)
            return answer.status_code, answer.json().get("error", "")

        assert infer([1, 0], []) == (400, "input 'tokens': received shape [1, 0] with a dimension of 0, expected "
                                          "[-1, -1] with a batch size of 1..64 for -1, each -1 a length of 1 or more")
        status, message = infer([1, 4], [1, 2, 99, 3])  # vocab_size 32: row 99 does not exist
        assert status == 400
        # The export stamps the embedding's id range (specgen.id_ranges): refused before onnxruntime runs, one line.
        assert message == ("input 'tokens': received id 99 at [0, 2], expected ids in [0, 31]: layer 'embed' "
                           "(embedding) takes ids below 32")
        assert infer([1, 4], [1, -1, 3, 3])[1].startswith("input 'tokens': received id -1 at [0, 1]")  # no wrap
        assert infer([1, 4], [1, 2, 31, 3])[0] == 200
    quiet(caplog.records)


def test_a_swap_runs_the_old_versions_queued_requests_at_once(tmp_path: Path, cnn: tuple[Any, bytes],
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """Through the registry: two requests wait for company in a version whose delay is 9 s; an explicit load of a
    new config retires it, and they are answered then, not 9 s after they came."""
    folder = write_repository(tmp_path, *cnn, max_queue_delay_us=9_000_000)
    caplog.set_level(logging.INFO, logger="specgen.serve")
    options = ServeOptions(grpc_port=0, model_control="explicit")
    with Served(load_repository(tmp_path, provider="cpu"), options, tmp_path) as served:
        url = f"http://{served.http}/v2/models/{CNN}/infer"
        with ThreadPoolExecutor(2) as pool:
            started = time.monotonic()
            answers = [pool.submit(httpx.post, url, content=image_body(), timeout=30) for _ in range(2)]
            deadline = started + 5
            while served.service.models[CNN][1].batcher.waiting < 2:
                assert time.monotonic() < deadline, "the two requests never queued"
                time.sleep(0.01)
            config = folder / "config.pbtxt"
            config.write_text(config.read_text().replace("max_queue_delay_microseconds: 9000000",
                                                         "max_queue_delay_microseconds: 1000"))
            assert httpx.post(f"http://{served.http}/v2/repository/models/{CNN}/load").status_code == 200
            assert [a.result().status_code for a in answers] == [200, 200]
            waited = time.monotonic() - started
    quiet(caplog.records)
    assert waited < 7, f"the queued requests waited {waited:.1f} s: the retired version's delay (9 s) ran out"
    assert [e["version"] for e in events(caplog.records, "model_unloaded")] == [1]


# shutdown


def test_a_request_cut_off_by_the_graceful_timeout_is_503_without_a_traceback(
        tmp_path: Path, cnn: tuple[Any, bytes], caplog: pytest.LogCaptureFixture) -> None:
    write_repository(tmp_path, *cnn)
    entered, gate = threading.Event(), threading.Event()
    [model] = load_repository(tmp_path, provider="cpu")
    held = dataclasses.replace(model, run=lambda inputs: (entered.set(), gate.wait(60), model.run(inputs))[2])
    caplog.set_level(logging.INFO)
    served = Served([held], ServeOptions(grpc_port=None))
    served.server = Server(server_config(served.app, "127.0.0.1", 0, timeout_graceful_shutdown=0.3))
    served.thread = threading.Thread(target=served.server.run, daemon=True)
    try:
        with served, ThreadPoolExecutor(1) as pool:
            answer = pool.submit(httpx.post, f"http://{served.http}/v2/models/{CNN}/infer", content=image_body(),
                                 timeout=30)
            assert entered.wait(10), "the request never reached the model"
            served.server.should_exit = True  # the request is running: the graceful timeout cuts it off
            result = answer.result()
            gate.set()  # the batchers drain before the server exits: the held run may finish now
    finally:
        gate.set()
    assert (result.status_code, result.json()) == (
        503, {"error": "the server stopped before answering: its graceful timeout passed"})
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
    [line] = events(caplog.records, "infer")
    assert (line["status"], line["error"]) == (503, "the server stopped before answering: its graceful timeout passed")


def test_a_repository_request_too_large_names_no_model(tmp_path: Path, cnn: tuple[Any, bytes]) -> None:
    write_repository(tmp_path, *cnn)
    options = ServeOptions(grpc_port=None, model_control="explicit")
    with Served(load_repository(tmp_path, provider="cpu"), options, tmp_path) as served:
        answer = httpx.post(f"http://{served.http}/v2/repository/index", content=b" " * 100_000)
    assert (answer.status_code, answer.json()) == (
        413, {"error": "the request body exceeds 65536 bytes, the most a repository request accepts"})


# export --triton into a repository the server reads


def test_export_refuses_what_the_server_would_not_read(tmp_path: Path, cnn: tuple[Any, bytes]) -> None:
    """export and serve agree on the versions: no version past int64's largest (the server ignores such a folder),
    and no model.onnx into a model whose config.pbtxt serves another file name (a second, unread model in 1/)."""
    ir, data = cnn
    folder = write_repository(tmp_path / "a", ir, data, version=2**63 - 1)
    with pytest.raises(ValueError) as caught:
        write_repository(tmp_path / "a", ir, data)
    assert str(caught.value) == (f"{folder} holds version 9223372036854775807, the largest Triton's int64 versions "
                                 "allow: there is no next version; export into another repository")
    with pytest.raises(ValueError, match=r"^version must be an integer from 1 to 9223372036854775807 "):
        write_repository(tmp_path / "a", ir, data, version=2**63)
    folder = write_repository(tmp_path / "b", ir, data, version=1)
    (folder / "1" / "model.onnx").rename(folder / "1" / "m.onnx")
    config = folder / "config.pbtxt"
    config.write_text(config.read_text() + "default_model_filename: 'm.onnx'  # hand-written\n")
    before = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(ValueError) as caught:
        write_repository(tmp_path / "b", ir, data)
    assert str(caught.value) == (f"{config} serves default_model_filename 'm.onnx'; specgen export writes model.onnx, "
                                 "which the server would not read: export into another repository, or set "
                                 'default_model_filename to "model.onnx" (or remove it) first')
    assert {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    [entry] = read_repository(tmp_path / "b")
    assert entry.versions == {1: folder / "1" / "m.onnx"}
