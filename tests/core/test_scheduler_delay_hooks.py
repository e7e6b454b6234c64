"""Triton's scheduler test hooks (pbserve/core/scheduling/delay_hooks.py):
TRITONSERVER_DELAY_SCHEDULER holds a dynamic or sequence batcher until so many requests
are queued, TRITONSERVER_BACKLOG_DELAY_SCHEDULER a sequence batcher until so many wait
in its backlog. A real server started with them, requests sent one after another."""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from pbserve.testing import RunningServer
from polling import wait_for

MODEL = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy().copy())])
            for r in requests]
'''
IO = ('input [ { name: "X" data_type: TYPE_INT32 dims: [ %s ] } ]\n'
      'output [ { name: "Y" data_type: TYPE_INT32 dims: [ %s ] } ]\n')
CONFIGS = {
    "dynamic": "max_batch_size: 8\ndynamic_batching { }\n",
    "sequences": "max_batch_size: 4\nsequence_batching { direct { } }\n",
    "one_slot": "max_batch_size: 0\nsequence_batching { direct { } }\n",
    "shapes": "max_batch_size: 4\nsequence_batching { direct { } }\n",  # dims [-1]
}


def _repo(root: Path, names: tuple[str, ...]) -> Path:
    for name in names:
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.py").write_text(MODEL)
        (root / name / "config.pbtxt").write_text(
            f'backend: "python"\n{CONFIGS[name]}{IO % (("-1",) * 2 if name == "shapes" else ("1",) * 2)}'
            'instance_group [ { kind: KIND_CPU count: 1 } ]\n')
    return root


def _server(tmp_path: Path, names: tuple[str, ...], env: dict[str, str]) -> RunningServer:
    server = RunningServer([_repo(tmp_path / "models", names)], (),
                           tmp_path / "server.log", env=env)
    server.wait_ready()
    return server


def _x(value: int, shape=(1,)) -> httpclient.InferInput:
    tensor = httpclient.InferInput("X", list(shape), "INT32")
    tensor.set_data_from_numpy(np.full(shape, value, np.int32))
    return tensor


def _batches(client, model: str) -> dict[int, int]:
    stats = client.get_inference_statistics(model)["model_stats"][0]
    return {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]}


def _pending(server: RunningServer, model: str) -> int:
    """The model's requests the server took and has not answered (its metrics)."""
    with urllib.request.urlopen(server.metrics_url, timeout=5) as reply:
        found = re.search(rf'nv_inference_pending_request_count{{model="{model}",'
                          r'version="1"} (\d+)', reply.read().decode())
    return int(found.group(1)) if found else 0


def _still_held(client, model: str) -> bool:
    time.sleep(0.5)  # time enough to run what is queued, were it not held
    return _batches(client, model) == {}


def test_a_batcher_holds_its_batches_until_the_delay_count_is_queued(tmp_path):
    server = _server(tmp_path, ("dynamic", "sequences"),
                     {"TRITONSERVER_DELAY_SCHEDULER": "3"})
    try:
        client = httpclient.InferenceServerClient(server.http_url, concurrency=6)
        sent = [client.async_infer("dynamic", [_x(v, (1, 1))]) for v in (1, 2)]
        assert _still_held(client, "dynamic")
        sent.append(client.async_infer("dynamic", [_x(3, (1, 1))]))
        assert [int(r.get_result().as_numpy("Y")[0, 0]) for r in sent] == [1, 2, 3]
        assert _batches(client, "dynamic") == {3: 1}  # the three in one execute
        # then the hold is gone: a lone request runs at once
        client.infer("dynamic", [_x(4, (1, 1))])
        assert _batches(client, "dynamic") == {3: 1, 1: 1}

        # a sequence batcher counts the requests in its slots (three sequences here)
        starts = [client.async_infer("sequences", [_x(v, (1, 1))], sequence_id=v,
                                     sequence_start=True) for v in (1, 2)]
        assert _still_held(client, "sequences")
        starts.append(client.async_infer("sequences", [_x(3, (1, 1))], sequence_id=3,
                                         sequence_start=True))
        assert [int(r.get_result().as_numpy("Y")[0, 0]) for r in starts] == [1, 2, 3]
        assert _batches(client, "sequences") == {3: 1}
        client.close()
    finally:
        server.stop()


def test_a_sequence_batch_takes_the_slots_whose_shapes_equal_the_first_ones(tmp_path):
    """Triton's RequiredEqualInputs in the sequence batcher: an input of a variable
    dimension has one shape in a batch; a slot whose request differs waits (L0_sequence_
    batcher test_ragged_batch). The hook lines the three sequences up first."""
    server = _server(tmp_path, ("shapes",), {"TRITONSERVER_DELAY_SCHEDULER": "3"})
    try:
        client = httpclient.InferenceServerClient(server.http_url, concurrency=3)
        sent = [client.async_infer("shapes", [_x(v, (1, width))], sequence_id=v,
                                   sequence_start=True, sequence_end=True)
                for v, width in ((1, 2), (2, 3), (3, 2))]
        assert [r.get_result().as_numpy("Y").tolist() for r in sent] == [
            [[1, 1]], [[2, 2, 2]], [[3, 3]]]
        assert _batches(client, "shapes") == {2: 1, 1: 1}  # [1, 3] together, then [2]
        client.close()
    finally:
        server.stop()


def test_a_sequence_batcher_also_waits_for_its_backlog(tmp_path):
    server = _server(tmp_path, ("one_slot",), {"TRITONSERVER_DELAY_SCHEDULER": "2",
                                               "TRITONSERVER_BACKLOG_DELAY_SCHEDULER": "1"})
    try:
        client = httpclient.InferenceServerClient(server.http_url, concurrency=4)
        # sequence 1 holds the one slot: two requests queue there, START first
        first = []
        for count, (value, flags) in enumerate(((1, {"sequence_start": True}),
                                                (2, {"sequence_end": True})), start=1):
            first.append(client.async_infer("one_slot", [_x(value)], sequence_id=1, **flags))
            wait_for(lambda n=count: _pending(server, "one_slot") == n, "queued", 10)
        assert _still_held(client, "one_slot")  # 2 in the slot, none in the backlog yet
        other = client.async_infer("one_slot", [_x(3)], sequence_id=2, sequence_start=True,
                                   sequence_end=True)  # the backlog's one
        assert [int(r.get_result().as_numpy("Y")[0]) for r in (*first, other)] == [1, 2, 3]
        wait_for(lambda: _batches(client, "one_slot") == {1: 3}, "three batches of one", 10)
        client.close()
    finally:
        server.stop()


@pytest.mark.parametrize("value, count", [("12", 12), (" 7abc", 7), ("abc", 0), ("-3", 0),
                                          ("", 0)])
def test_the_count_is_read_as_atoi_reads_it(monkeypatch, value, count):
    from pbserve.core.scheduling.delay_hooks import DELAY, held_count

    monkeypatch.setenv(DELAY, value)
    assert held_count(DELAY) == count
