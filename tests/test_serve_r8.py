"""`specgen serve` against the hostile-input check of round 8 (rt8): a NUL beside a quote in a client's string, a
config.pbtxt that declares -1 where the graph fixes a size or a size no request could carry, a config.pbtxt parse
error that quoted its whole line (300 KB), and links that led the server out of its repository. Each is one bounded
line with its status over Triton's own HTTP and gRPC clients, never a traceback, and the models served keep serving.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("uvicorn")
tg = pytest.importorskip("tritonclient.grpc")
th = pytest.importorskip("tritonclient.http")
httpx = pytest.importorskip("httpx")

from onnx import TensorProto, helper  # noqa: E402
from serve_helpers import Served, model_bytes  # noqa: E402

from specgen.runtime.predictor import Predictor  # noqa: E402
from specgen.runtime.triton import write_repository  # noqa: E402
from specgen.serve.errors import ProtocolError  # noqa: E402
from specgen.serve.model_config import MAX_REQUEST_BYTES, RepositoryError, parse_config  # noqa: E402
from specgen.serve.models import load_repository, values_checked  # noqa: E402
from specgen.serve.options import ServeOptions  # noqa: E402
from specgen.serve.repository import MAX_CONFIG_BYTES  # noqa: E402
from specgen.serve.values import HugeInt, show  # noqa: E402

CNN = "digits_cnn"
LINK_ADVICE = ("the server reads only what lies inside its repository: copy what the link points to into the "
               "repository (or serve the repository that holds it), or remove the link")


def quiet(records: list[logging.LogRecord]) -> None:
    """No traceback and nothing at error level: each refusal here is a client's or the repository's mistake."""
    assert [r.getMessage() for r in records if r.exc_info or r.levelno >= logging.ERROR] == []


@pytest.fixture(scope="module")
def cnn() -> tuple[Any, bytes]:
    return model_bytes(CNN, seed=1)


@pytest.fixture
def repo(tmp_path: Path, cnn: tuple[Any, bytes]) -> Path:
    write_repository(tmp_path / "repo", *cnn)
    return tmp_path / "repo"


def copy_model(repo: Path, name: str, config: str | None = None) -> Path:
    """The digits CNN again as model `name` (its config edited by `config`'s replacement of the dims, if given)."""
    folder = repo / name
    shutil.copytree(repo / CNN, folder)
    text = (folder / "config.pbtxt").read_text().replace(f'name: "{CNN}"', f'name: "{name}"')
    (folder / "config.pbtxt").write_text(text if config is None else text.replace("dims: [ 8, 8, 1 ]", config))
    return folder


def refused(served: Served, name: str, message: str) -> None:
    """An explicit load of `name` answers 400 with `message` over HTTP and INVALID_ARGUMENT with it over gRPC."""
    http, grpc_client = th.InferenceServerClient(served.http), tg.InferenceServerClient(served.grpc)
    with pytest.raises(th.InferenceServerException) as caught:
        http.load_model(name)
    assert (caught.value.status(), caught.value.message()) == ("400", message)
    with pytest.raises(tg.InferenceServerException) as caught_grpc:
        grpc_client.load_model(name)
    assert (caught_grpc.value.status(), caught_grpc.value.message()) == ("StatusCode.INVALID_ARGUMENT", message)
    assert http.is_model_ready(CNN) and not http.is_model_ready(name)
    http.close()
    grpc_client.close()


@pytest.fixture
def explicit(repo: Path, caplog: pytest.LogCaptureFixture) -> Iterator[Served]:
    caplog.set_level(logging.INFO, logger="specgen.serve")
    options = ServeOptions(grpc_port=0, model_control="explicit")
    with Served(load_repository(repo, provider="cpu"), options, repo) as served:
        yield served
    quiet(caplog.records)


# F2: show() marks a HugeInt by its type, never by a character a client can send


@pytest.mark.quick
@pytest.mark.parametrize(("value", "text"), [
    ("\0image\0", '"\\u0000image\\u0000"'), ("tiny\0", '"tiny\\u0000"'), ("\0", '"\\u0000"'), ('"\0', '"\\"\\u0000"'),
    ([HugeInt("9" * 5000), "\0"], '[an integer of 5000 digits, "\\u0000"]'), ({"\0": [1, 2.5, None]},
                                                                             '{"\\u0000": [1, 2.5, null]}'),
    ("a" * 200, '"' + "a" * 76 + "..."), (list(range(10**6)), ("[" + ", ".join(map(str, range(40))))[:77] + "..."),
    (10**5000, "a number")], ids=range(9))
def test_show_escapes_every_character_of_a_value(value: Any, text: str) -> None:
    assert show(value) == text


def test_a_nul_beside_a_quote_is_shown_escaped(explicit: Served) -> None:
    body = {"inputs": [{"name": "\0image\0", "shape": [1, 8, 8, 1], "datatype": "FP32", "data": [0.0] * 64}]}
    message = """received an input named "\\u0000image\\u0000"; model 'digits_cnn' expects inputs ['image']"""
    answer = httpx.post(f"http://{explicit.http}/v2/models/{CNN}/infer", content=json.dumps(body))
    assert (answer.status_code, answer.json()) == (400, {"error": message})
    client = tg.InferenceServerClient(explicit.grpc)
    tensor = tg.InferInput("\0image\0", [1, 8, 8, 1], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 8, 8, 1), np.float32))
    with pytest.raises(tg.InferenceServerException) as caught:
        client.infer(CNN, [tensor])
    assert (caught.value.status(), caught.value.message()) == ("StatusCode.INVALID_ARGUMENT", message)
    client.close()
    for name, shown in (("tiny%00", '"tiny\\u0000"'), ("%00", '"\\u0000"')):
        answer = httpx.post(f"http://{explicit.http}/v2/repository/models/{name}/load", content=b"{}")
        assert (answer.status_code, answer.json()) == (
            400, {"error": f"{shown} cannot name a model folder of the repository"})


# F3: -1 only where the graph leaves the size open; F7: no config whose example no request could carry


def test_config_minus_one_over_a_fixed_graph_size_is_refused_at_load(repo: Path, explicit: Served) -> None:
    """Before: loaded, the metadata said [-1, -1, 8, 1], and a request of [1, 5, 8, 1] was 500 / INTERNAL."""
    copy_model(repo, "neg1", "dims: [ -1, 8, 1 ]")
    refused(explicit, "neg1", f"{repo / 'neg1' / '1' / 'model.onnx'}: input 'image' has shape ['batch', 8, 8, 1] in "
                              "the graph; config.pbtxt declares [-1, -1, 8, 1]; expected the graph's rank and sizes "
                              "(-1 only where the graph names a dimension)")
    folder = copy_model(repo, "outneg")
    config = folder / "config.pbtxt"
    config.write_text(config.read_text().replace("dims: [ 10 ]", "dims: [ -1 ]"))
    refused(explicit, "outneg", f"{folder / '1' / 'model.onnx'}: output 'logits' has shape ['batch', 10] in the "
                                "graph; config.pbtxt declares [-1, -1]; expected the graph's rank and sizes (-1 only "
                                "where the graph names a dimension)")


def identity(folder: Path, dims: str) -> None:
    """A model whose graph leaves its one dimension open (x: [batch, n] -> y), with config.pbtxt `dims`."""
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "ident",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    (folder / "1").mkdir(parents=True)
    onnx.save(model, folder / "1" / "model.onnx")
    (folder / "config.pbtxt").write_text(f'name: "{folder.name}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
                                         f'input [ {{ name: "x" data_type: TYPE_FP32 dims: [ {dims} ] }} ]\n'
                                         'output [ { name: "y" data_type: TYPE_FP32 dims: [ -1 ] } ]\n')


def test_a_config_whose_one_example_no_request_can_carry_is_refused_before_warm_up(repo: Path,
                                                                                   explicit: Served) -> None:
    """Before: 2^28 loaded, its warm-up allocating 1 GiB twice (input and output); 2^32 needed 32 GiB."""
    for size in (2**28, 2**32):
        identity(repo / f"ident{size}", str(size))
        refused(explicit, f"ident{size}", f"{repo / f'ident{size}' / 'config.pbtxt'}: one example of the inputs "
                                          f"takes {size * 4:,} bytes (input 'x': dims [{size}] of FP32), more than "
                                          "the largest request the server accepts (67,108,864 bytes); expected dims "
                                          "whose example fits in one request (-1 where the client chooses the size)")
    identity(repo / "fits", str(MAX_REQUEST_BYTES // 4))  # exactly the largest request: loads
    client = th.InferenceServerClient(explicit.http)
    client.load_model("fits")
    assert client.get_model_metadata("fits")["inputs"][0]["shape"] == [-1, MAX_REQUEST_BYTES // 4]
    client.close()


@pytest.mark.quick
def test_the_example_bound_is_the_servers_body_cap() -> None:
    assert ServeOptions().max_body_bytes == MAX_REQUEST_BYTES


def test_a_shape_the_predictor_refuses_at_run_time_is_a_protocol_error(repo: Path) -> None:
    """What the server's checks let through and the Predictor refuses is the request's to mend: 400, not 500."""
    run = values_checked(Predictor(repo / CNN / "1" / "model.onnx", provider="cpu"))
    with pytest.raises(ProtocolError) as caught:
        run({"image": np.zeros((1, 5, 8, 1), np.float32)})
    assert (caught.value.status, caught.value.message) == (
        400, "the model refused this request: input 'image': received shape [1, 5, 8, 1], expected ['batch', 8, 8, 1]")


# F4: config.pbtxt bounded, read and quoted


@pytest.mark.quick
def test_a_parse_error_names_the_position_not_the_line() -> None:
    deep = 'parameters { key: "x" value: ' + "{ " * 100_000 + "}" * 100_000 + " }"
    with pytest.raises(RepositoryError) as caught:
        parse_config(deep, "m/config.pbtxt")
    assert str(caught.value) == ("m/config.pbtxt:1:32: not a Triton model configuration: Expected identifier or "
                                 "number, got {.")
    with pytest.raises(RepositoryError) as caught:
        parse_config("max_batch_size: 4\n" + "x" * 300_000 + ": 1\n", "m/config.pbtxt")
    assert str(caught.value) == ('m/config.pbtxt:2:1: not a Triton model configuration: Message type '
                                 '"inference.ModelConfig" has no field named "' + "x" * 100 + "... (300,059 "
                                 "characters)")
    with pytest.raises(RepositoryError) as caught:
        parse_config('name: "a\\nb\\033[31m"\nplatform: "x\\ny"', "m/config.pbtxt")
    assert str(caught.value) == ("m/config.pbtxt: platform 'x\\ny' / backend '' is not served; expected backend: "
                                 '"onnxruntime" or platform: "onnxruntime_onnx"')


def test_config_pbtxt_is_read_to_a_bound_and_its_errors_are_one_short_line(repo: Path, explicit: Served) -> None:
    """Before: the load answer (and the log line) held the 300 KB line, and config.pbtxt was read whole."""
    deep = copy_model(repo, "deep")
    (deep / "config.pbtxt").write_text('parameters { key: "x" value: ' + "{ " * 100_000 + "}" * 100_000 + " }\n")
    refused(explicit, "deep", f"{deep / 'config.pbtxt'}:1:32: not a Triton model configuration: Expected identifier "
                              "or number, got {.")
    big = copy_model(repo, "big")
    (big / "config.pbtxt").write_text("# a comment\n" * (MAX_CONFIG_BYTES // 12 + 1))
    refused(explicit, "big", f"{big / 'config.pbtxt'}: is larger than 1,048,576 bytes; expected a Triton model "
                             "configuration (text protobuf, a few kilobytes)")


# F6: the repository is confined; links inside it are followed


def test_links_out_of_the_repository_are_refused_naming_the_link(repo: Path, explicit: Served) -> None:
    outside = repo.parent / "elsewhere"
    outside.mkdir()
    (outside / "secret.txt").write_text("root:x:0:0:SECRET\n")
    cases = {}
    folder = copy_model(repo, "cfg")  # config.pbtxt -> a file outside
    (folder / "config.pbtxt").unlink()
    (folder / "config.pbtxt").symlink_to(outside / "secret.txt")
    cases["cfg"] = (folder / "config.pbtxt", str(outside / "secret.txt"))
    shutil.copytree(repo / CNN, outside / "whole")  # the model folder -> a folder outside
    (repo / "whole").symlink_to(outside / "whole")
    cases["whole"] = (repo / "whole", str(outside / "whole"))
    folder = copy_model(repo, "version")  # a version folder -> a folder outside, by a relative link
    (folder / "1").rename(outside / "v1")
    (folder / "1").symlink_to(Path("..", "..", "elsewhere", "v1"))
    cases["version"] = (folder / "1", "../../elsewhere/v1")
    folder = copy_model(repo, "file")  # model.onnx -> a file outside
    (folder / "1" / "model.onnx").rename(outside / "m.onnx")
    (folder / "1" / "model.onnx").symlink_to(outside / "m.onnx")
    cases["file"] = (folder / "1" / "model.onnx", str(outside / "m.onnx"))
    for name, (link, target) in cases.items():
        refused(explicit, name, f"{link}: is a symbolic link to {target}, outside the model repository {repo}; "
                                + LINK_ADVICE)
    with pytest.raises(RepositoryError) as caught:  # at start too: one line per link, nothing of the file quoted
        load_repository(repo, provider="cpu")
    assert "SECRET" not in str(caught.value) and len(str(caught.value).splitlines()) == 4, str(caught.value)


def test_links_inside_the_repository_are_followed(repo: Path, explicit: Served) -> None:
    builds = repo / ".builds"  # a hidden folder is no model: a place for what the versions link to
    shutil.copytree(repo / CNN / "1", builds / "b1")
    folder = repo / "linked"
    folder.mkdir()
    config = (repo / CNN / "config.pbtxt").read_text().replace(f'name: "{CNN}"', 'name: "linked"')
    (builds / "linked.pbtxt").write_text(config)
    (folder / "config.pbtxt").symlink_to(Path("..", ".builds", "linked.pbtxt"))
    (folder / "1").symlink_to(Path("..", ".builds", "b1"))
    (repo / "alias").symlink_to("linked")  # a second name for a model folder: its config must name it, as always
    client = th.InferenceServerClient(explicit.http)
    client.load_model("linked")
    assert client.is_model_ready("linked")
    with pytest.raises(th.InferenceServerException) as caught:
        client.load_model("alias")
    assert caught.value.message() == (f"{repo / 'alias' / 'config.pbtxt'}: name 'linked' differs from the folder "
                                      "name 'alias'; Triton requires them to be equal")
    client.close()
    assert os.path.islink(repo / "alias")


def test_a_version_linked_out_is_refused_alone_and_the_others_load(repo: Path, explicit: Served) -> None:
    """One version folder linked out of the repository refused the whole model (`"version": null`): a valid version
    beside it was never served, and the index had no row saying why. Now that version is refused alone, with its
    number, as a damaged version is, and the index names it."""
    outside = repo.parent / "far"
    folder = copy_model(repo, "multi")
    shutil.copytree(folder / "1", outside / "v2")
    (folder / "2").symlink_to(Path("..", "..", "far", "v2"))
    shutil.copytree(folder / "1", folder / "3")
    text = (folder / "config.pbtxt").read_text()
    (folder / "config.pbtxt").write_text(text + "version_policy: { all { } }\n")
    client = th.InferenceServerClient(explicit.http)
    link_line = (f"{folder / '2'}: is a symbolic link to ../../far/v2, outside the model repository {repo}; "
                 + LINK_ADVICE)
    with pytest.raises(th.InferenceServerException) as caught:  # as for a damaged version: it says what it serves
        client.load_model("multi")
    assert caught.value.message() == f"{link_line}; model 'multi' serves version(s) [1, 3]"
    assert [client.is_model_ready("multi", str(v)) for v in (1, 2, 3)] == [True, False, True]
    rows = [r for r in client.get_model_repository_index() if r["name"] == "multi"]
    ready = {"state": "READY", "reason": ""}
    assert rows == [{"name": "multi", "version": "1", **ready},  # in version order, as Triton's index
                    {"name": "multi", "version": "2", "state": "UNAVAILABLE", "reason": link_line},
                    {"name": "multi", "version": "3", **ready}]
    client.close()


def test_an_explicit_load_of_a_folder_gone_forgets_its_refusal(repo: Path, explicit: Served) -> None:
    """A refused folder, then deleted: the load that answers "no model folder" left the refusal in the index."""
    folder = copy_model(repo, "gone")
    (folder / "config.pbtxt").write_text((folder / "config.pbtxt").read_text().replace('name: "gone"', 'name: "x"'))
    refused(explicit, "gone", f"{folder / 'config.pbtxt'}: name 'x' differs from the folder name 'gone'; Triton "
                              "requires them to be equal")
    shutil.rmtree(folder)
    client = th.InferenceServerClient(explicit.http)
    with pytest.raises(th.InferenceServerException) as caught:
        client.load_model("gone")
    assert caught.value.message() == f"no model folder 'gone' in the repository {repo}"
    assert [r for r in client.get_model_repository_index() if r["name"] == "gone"] == []
    client.close()
