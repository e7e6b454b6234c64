"""The dynamic batcher against a real server: batches gathered within the queue delay,
queue policies with Triton's errors, priority levels."""

from __future__ import annotations

import re
import shutil
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from pbserve.testing import running_server

TEST_MODELS = Path(__file__).resolve().parent / "models"
MODELS = ("batch_gather", "queue_timeout", "queue_bounded", "queue_priority")
WAIT_S = 20.0


def int_input(value: int) -> httpclient.InferInput:
    array = np.array([[value]], np.int32)
    tensor = httpclient.InferInput("IN", list(array.shape), np_to_triton_dtype(array.dtype))
    tensor.set_data_from_numpy(array)
    return tensor


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("dynamic")
    repo = root / "models"
    for name in MODELS:
        shutil.copytree(TEST_MODELS / name, repo / name)
    with running_server(repo, log_path=root / "server.log") as srv:
        yield srv


def wait_for(predicate, what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def pending_count(server, model: str) -> int:
    with urllib.request.urlopen(server.metrics_url, timeout=5) as reply:
        text = reply.read().decode()
    found = re.search(rf'nv_inference_pending_request_count{{model="{model}",version="1"}} '
                      r"(\d+)", text)
    return int(found.group(1)) if found else 0


class Gate:
    """Holds a gated model's only instance busy until opened."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "gate"

    @property
    def parameters(self) -> dict:
        return {"gate": str(self.path)}

    def wait_started(self) -> None:
        wait_for(Path(str(self.path) + ".started").exists, "the gated request to start")

    def open(self) -> None:
        self.path.touch()


def test_requests_of_three_clients_meet_in_one_execute(server):
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def client(i: int) -> None:
        try:
            result = server.http_client(network_timeout=WAIT_S).infer(
                "batch_gather", [int_input(10 + i)])
            results[i] = result
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    assert not errors, errors
    for i in range(3):
        np.testing.assert_array_equal(results[i].as_numpy("OUT"), [[10 + i]])
        assert results[i].as_numpy("REQUESTS_IN_EXECUTE")[0][0] == 3


def test_queue_timeout_rejects_with_tritons_error(server, tmp_path):
    gate = Gate(tmp_path)
    client = server.http_client(concurrency=2, network_timeout=WAIT_S)
    first = client.async_infer("queue_timeout", [int_input(1)], parameters=gate.parameters)
    try:
        gate.wait_started()
        with pytest.raises(InferenceServerException) as caught:
            client.infer("queue_timeout", [int_input(2)])
        assert "Request timeout expired" in caught.value.message()
        assert caught.value.status() == "503"
    finally:
        gate.open()
    np.testing.assert_array_equal(first.get_result(timeout=WAIT_S).as_numpy("OUT"), [[1]])


def test_full_queue_rejects_with_tritons_error(server, tmp_path):
    gate = Gate(tmp_path)
    client = server.http_client(concurrency=3, network_timeout=WAIT_S)
    first = client.async_infer("queue_bounded", [int_input(1)], parameters=gate.parameters)
    try:
        gate.wait_started()
        second = client.async_infer("queue_bounded", [int_input(2)])
        wait_for(lambda: pending_count(server, "queue_bounded") == 2, "the second to queue")
        with pytest.raises(InferenceServerException) as caught:
            client.infer("queue_bounded", [int_input(3)], request_id="third")
        assert caught.value.message() == "[request id: third] Exceeds maximum queue size"
        assert caught.value.status() == "503"
    finally:
        gate.open()
    assert first.get_result(timeout=WAIT_S).as_numpy("OUT")[0][0] == 1
    assert second.get_result(timeout=WAIT_S).as_numpy("OUT")[0][0] == 2


def test_higher_priority_requests_run_first(server, tmp_path):
    gate = Gate(tmp_path)
    client = server.http_client(concurrency=6, network_timeout=WAIT_S)
    first = client.async_infer("queue_priority", [int_input(0)], parameters=gate.parameters)
    try:
        gate.wait_started()
        # 0 and out-of-range priorities mean the default level (2, the lower one).
        low = [client.async_infer("queue_priority", [int_input(v)], priority=p)
               for v, p in ((1, 0), (2, 2), (3, 7))]
        high = [client.async_infer("queue_priority", [int_input(v)], priority=1)
                for v in (11, 12)]
        wait_for(lambda: pending_count(server, "queue_priority") == 6, "all to queue")
    finally:
        gate.open()
    assert first.get_result(timeout=WAIT_S).as_numpy("CALL")[0][0] == 1
    high_calls = sorted(int(r.get_result(timeout=WAIT_S).as_numpy("CALL")[0][0]) for r in high)
    low_calls = sorted(int(r.get_result(timeout=WAIT_S).as_numpy("CALL")[0][0]) for r in low)
    assert high_calls == [2, 3]
    assert low_calls == [4, 5, 6]
