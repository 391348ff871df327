"""`specgen serve` against the checker's round 10 (rt10/serve), with Triton's own clients over HTTP and gRPC:

- F1: the model metadata of one version lists that version only (Triton's `TRITONSERVER_ServerModelMetadata` appends
  the version asked for; the served versions only when none is named); it listed every served version.
- F2: the repository index keeps a row per version once served, `UNAVAILABLE` / `unloaded` after an explicit unload
  or a poll that swapped it out (Triton's ModelLifeCycle keeps each version's state, `unloaded` once released); it
  forgot them, and an unloaded model had one row with an empty version.
- F3: a broken config.pbtxt of a model that still serves leaves its READY rows as they are (Triton's poll falls back
  to the model info it had); the refusal is the load's answer, the `model_refused` line and the metric, which
  docs/serve.md now says instead of claiming an `UNAVAILABLE` row.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("uvicorn")
tg = pytest.importorskip("tritonclient.grpc")
th = pytest.importorskip("tritonclient.http")
httpx = pytest.importorskip("httpx")

from serve_helpers import ROOT, Served, events, metric, model_bytes  # noqa: E402

from specgen.runtime.triton import write_repository  # noqa: E402
from specgen.serve.models import load_repository  # noqa: E402
from specgen.serve.options import ServeOptions  # noqa: E402

CNN = "digits_cnn"
READY = {"state": "READY", "reason": ""}
UNLOADED = {"state": "UNAVAILABLE", "reason": "unloaded"}


@pytest.fixture(scope="module")
def versions() -> dict[int, tuple[Any, bytes]]:
    return {v: model_bytes(CNN, seed=v) for v in (1, 2, 3)}


def repository(root: Path, versions: dict[int, tuple[Any, bytes]], numbers: tuple[int, ...], policy: str) -> Path:
    for v in numbers:
        write_repository(root, *versions[v], version=v)
    config = root / CNN / "config.pbtxt"
    config.write_text(config.read_text() + f"version_policy {{ {policy} }}\n")
    return root / CNN


def http_rows(served: Served) -> list[dict[str, str]]:
    """The index over HTTP alone: what a wait reads while a poll may change it (rows() would compare two moments)."""
    answer: list[dict[str, str]] = httpx.post(f"http://{served.http}/v2/repository/index", json={}).json()
    return answer


def rows(served: Served, ready: bool = False) -> list[dict[str, str]]:
    """The index over HTTP, after checking that gRPC's rows say the same (read once the index is settled: a poll
    between the two reads would make them differ)."""
    http, grpc = th.InferenceServerClient(served.http), tg.InferenceServerClient(served.grpc)
    try:
        answer: list[dict[str, str]] = http.get_model_repository_index()
        if ready:
            answer = httpx.post(f"http://{served.http}/v2/repository/index", json={"ready": True}).json()
        over_grpc = [{"name": m.name, "version": m.version, "state": m.state, "reason": m.reason}
                     for m in grpc.get_model_repository_index().models if not ready or m.state == "READY"]
        assert over_grpc == answer
        return answer
    finally:
        http.close()
        grpc.close()


def wait_until(condition: Callable[[], bool], what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.fixture
def explicit(tmp_path: Path, versions: dict[int, tuple[Any, bytes]]) -> Iterator[Served]:
    """Versions 1 and 2 under `all { }`, `--model-control explicit`."""
    repository(tmp_path, versions, (1, 2), "all { }")
    options = ServeOptions(grpc_port=0, model_control="explicit")
    with Served(load_repository(tmp_path, provider="cpu"), options, tmp_path) as served:
        yield served


# F1


def test_the_metadata_of_one_version_lists_that_version(explicit: Served) -> None:
    http, grpc = th.InferenceServerClient(explicit.http), tg.InferenceServerClient(explicit.grpc)
    for version, listed in (("1", ["1"]), ("2", ["2"]), ("", ["1", "2"])):
        assert http.get_model_metadata(CNN, version)["versions"] == listed
        assert list(grpc.get_model_metadata(CNN, version).versions) == listed
    http.close()
    grpc.close()


# F2


def test_an_unloaded_model_keeps_a_row_per_version(explicit: Served, tmp_path: Path) -> None:
    """Triton's index after an unload: `{"name": ..., "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}`
    per version; specgen gave one row with version "" and nothing per version."""
    shutil.copytree(tmp_path / CNN, tmp_path / "spare")  # a folder never loaded keeps its model-level row
    config = tmp_path / "spare" / "config.pbtxt"
    config.write_text(config.read_text().replace(f'name: "{CNN}"', 'name: "spare"'))
    client = th.InferenceServerClient(explicit.http)
    spare = {"name": "spare", "version": "", "state": "UNAVAILABLE", "reason": "not loaded"}
    assert rows(explicit) == [{"name": CNN, "version": "1", **READY}, {"name": CNN, "version": "2", **READY}, spare]
    client.unload_model(CNN)
    assert rows(explicit) == [{"name": CNN, "version": "1", **UNLOADED}, {"name": CNN, "version": "2", **UNLOADED},
                              spare]
    assert rows(explicit, ready=True) == []
    client.load_model(CNN)
    assert rows(explicit, ready=True) == [{"name": CNN, "version": "1", **READY}, {"name": CNN, "version": "2", **READY}]
    client.close()


def test_a_model_not_served_leaves_the_index_with_its_folder_in_explicit_mode(explicit: Served, tmp_path: Path) -> None:
    """rt10 finding 6: explicit mode scans nothing, and a model unloaded, then its folder removed, kept its `unloaded`
    rows until a load named it. A model served keeps its rows without its folder (it serves) until it is unloaded."""
    shutil.copytree(tmp_path / CNN, tmp_path / "spare")
    config = tmp_path / "spare" / "config.pbtxt"
    config.write_text(config.read_text().replace(f'name: "{CNN}"', 'name: "spare"'))
    client = th.InferenceServerClient(explicit.http)
    client.load_model("spare")
    client.unload_model("spare")
    served = [{"name": CNN, "version": "1", **READY}, {"name": CNN, "version": "2", **READY}]
    assert rows(explicit) == [*served, {"name": "spare", "version": "1", **UNLOADED},
                              {"name": "spare", "version": "2", **UNLOADED}]
    shutil.rmtree(tmp_path / "spare")
    assert rows(explicit) == served
    shutil.rmtree(tmp_path / CNN)
    assert rows(explicit) == served and client.is_model_ready(CNN, "1")
    client.unload_model(CNN)
    assert rows(explicit) == []
    client.close()


def test_a_version_swapped_out_by_a_poll_stays_in_the_index(tmp_path: Path,
                                                            versions: dict[int, tuple[Any, bytes]]) -> None:
    """`latest 1`: version 2 replaces 1, which Triton lists as unloaded; its folder removed, the row goes (the index
    lists what the repository holds, as for a refused version); the model folder removed, the model goes."""
    folder = repository(tmp_path, versions, (1,), "latest { num_versions: 1 }")
    options = ServeOptions(grpc_port=0, model_control="poll", poll_seconds=0.1)
    with Served(load_repository(tmp_path, provider="cpu"), options, tmp_path) as served:
        client = th.InferenceServerClient(served.http)
        write_repository(tmp_path, *versions[2], version=2)
        wait_until(lambda: client.is_model_ready(CNN, "2"), "version 2 was not loaded")
        assert rows(served) == [{"name": CNN, "version": "1", **UNLOADED}, {"name": CNN, "version": "2", **READY}]
        shutil.rmtree(folder / "1")  # not atomic: a poll may see it half removed, so the waits read the end state
        wait_until(lambda: http_rows(served) == [{"name": CNN, "version": "2", **READY}], "the row of version 1 stayed")
        assert rows(served) == [{"name": CNN, "version": "2", **READY}]
        shutil.rmtree(folder)
        wait_until(lambda: http_rows(served) == [], "the model stayed")
        assert rows(served) == [] and CNN not in served.service.models
        client.close()


# F3


def test_a_broken_config_of_a_serving_model_keeps_its_ready_rows(
        explicit: Served, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="specgen.serve")
    config = tmp_path / CNN / "config.pbtxt"
    config.write_text(config.read_text() + 'nme: "x"\n')
    http, grpc = th.InferenceServerClient(explicit.http), tg.InferenceServerClient(explicit.grpc)
    with pytest.raises(th.InferenceServerException) as caught:
        http.load_model(CNN)
    [refusal] = events(caplog.records, "model_refused")
    assert refusal["version"] is None
    assert caught.value.message() == f"{refusal['error']}; model '{CNN}' keeps serving version(s) [1, 2]"
    assert refusal["error"].startswith(f"{config}:")
    assert rows(explicit) == [{"name": CNN, "version": "1", **READY}, {"name": CNN, "version": "2", **READY}]
    text = httpx.get(f"http://{explicit.http}/metrics").text
    assert metric(text, "specgen_model_loads_total", model=CNN, result="refused") == 1
    assert http.is_server_ready() and grpc.is_model_ready(CNN, "1")
    http.close()
    grpc.close()
    ready_row = next(line for line in (ROOT / "docs" / "serve.md").read_text().splitlines()
                     if line.startswith("| `GET /v2/health/ready` |"))
    assert "keeps its `READY` rows in the repository index" in ready_row  # the docs said it shows as UNAVAILABLE
    assert "`model_refused` log line" in ready_row
