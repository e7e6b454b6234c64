"""`--frontend-processes 2`, driven as a user would: a real server whose HTTP and gRPC are
answered by two frontend processes over shared memory, with tritonclient."""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from pbserve.testing import frontend_connection_counts, frontend_pids, running_server
from polling import wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "models" / "examples"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("frontends") / "server.log"
    load = [a for m in ("identity", "add_sub", "async_stream", "repeat")
            for a in ("--load-model", m)]
    with running_server(EXAMPLES, log_path=log, args=[
            "--frontend-processes", "2", "--model-control-mode", "explicit", *load]) as srv:
        yield srv


def add_sub_inputs(module, a: np.ndarray, b: np.ndarray) -> list:
    inputs = [module.InferInput("INPUT0", [16], "FP32"),
              module.InferInput("INPUT1", [16], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def test_two_frontend_processes_serve_http_and_grpc(server):
    assert len(frontend_pids(server.pid)) == 2
    a, b = np.arange(16, dtype=np.float32), np.ones(16, dtype=np.float32)
    for module, client in ((httpclient, server.http_client()),
                           (grpcclient, server.grpc_client())):
        result = client.infer("add_sub", add_sub_inputs(module, a, b))
        assert np.array_equal(result.as_numpy("OUTPUT0"), a + b)
        assert np.array_equal(result.as_numpy("OUTPUT1"), a - b)
        big = np.random.default_rng(1).random(4 << 20, dtype=np.float32)  # 16 MiB
        tensor = module.InferInput("INPUT_FP32", [big.size], "FP32")
        tensor.set_data_from_numpy(big)
        result = client.infer("identity", [tensor])
        assert np.array_equal(result.as_numpy("OUTPUT_FP32"), big)
        with pytest.raises(InferenceServerException, match="unknown model"):
            client.infer("nope", add_sub_inputs(module, a, b))
        client.close()


def test_a_decoupled_stream_and_the_statistics_come_through(server):
    client = server.grpc_client()
    responses: queue.Queue = queue.Queue()
    client.start_stream(lambda result, error: responses.put((result, error)))
    prompt = grpcclient.InferInput("PROMPT", [1], "BYTES")
    prompt.set_data_from_numpy(np.array([b"hi"], dtype=object))
    chunks = grpcclient.InferInput("CHUNKS", [1], "INT32")
    chunks.set_data_from_numpy(np.array([3], dtype=np.int32))
    client.async_stream_infer("async_stream", [prompt, chunks],
                              enable_empty_final_response=True)
    texts = []
    while True:
        result, error = responses.get(timeout=20)
        assert error is None
        response = result.get_response()
        if response.outputs:
            texts.append(result.as_numpy("TEXT")[0])
        if response.parameters["triton_final_response"].bool_param:
            break
    client.stop_stream()
    assert texts == [f"chunk {i}/3 of 'hi' ".encode() for i in (1, 2, 3)]
    stats = client.get_inference_statistics("async_stream", as_json=True)
    assert int(stats["model_stats"][0]["inference_count"]) >= 1
    client.close()


def test_model_control_and_client_regions_reach_every_frontend(server):
    """A region registered on one connection (one frontend) is used on fresh connections,
    which the kernel spreads over both frontends; an unload is seen by all of them."""
    http = server.http_client()
    key = f"/pbserve_fe_{os.getpid()}"
    array = np.arange(16, dtype=np.float32)
    handle = shm.create_shared_memory_region("fe_in", key, 64)
    try:
        shm.set_shared_memory_region(handle, [array])
        http.register_system_shared_memory("fe_in", key, 64)
        for _ in range(8):  # new connections each time
            client = server.http_client()
            tensor = httpclient.InferInput("INPUT_FP32", [16], "FP32")
            tensor.set_shared_memory("fe_in", 64)
            result = client.infer("identity", [tensor])
            assert np.array_equal(result.as_numpy("OUTPUT_FP32"), array)
            client.close()
        http.unregister_system_shared_memory("fe_in")
    finally:
        shm.destroy_shared_memory_region(handle)
    http.unload_model("repeat")
    for _ in range(4):
        client = server.grpc_client()
        assert not client.is_model_ready("repeat")
        client.close()
    http.load_model("repeat")
    assert http.is_model_ready("repeat")
    http.close()


def test_log_settings_changed_through_one_frontend_hold_in_every_one(server):
    http = server.http_client()
    http.update_log_settings({"log_verbose_level": 1})
    try:
        for _ in range(6):
            client = server.http_client()
            assert client.get_log_settings()["log_verbose_level"] == 1
            client.close()
    finally:
        http.update_log_settings({"log_verbose_level": 0})
        http.close()


def test_a_killed_frontend_is_restarted_and_the_other_serves_on(server):
    """SIGKILL one frontend under load from 16 clients: the clients on the other go on,
    only the killed one's requests fail, and a new frontend takes its place."""
    a, b = np.arange(16, dtype=np.float32), np.ones(16, dtype=np.float32)
    stop = threading.Event()
    counts = {"ok": 0, "failed": 0}
    lock = threading.Lock()

    def client_loop() -> None:
        client = server.http_client()
        while not stop.is_set():
            try:
                result = client.infer("add_sub", add_sub_inputs(httpclient, a, b))
                assert np.array_equal(result.as_numpy("OUTPUT0"), a + b)
                with lock:
                    counts["ok"] += 1
            except Exception:  # the killed frontend's connection
                with lock:
                    counts["failed"] += 1
                client.close()
                client = server.http_client()
        client.close()

    threads = [threading.Thread(target=client_loop) for _ in range(16)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 20  # under way: 100 answered (~0.2 s on 2 cores)
        while counts["ok"] < 100 and time.monotonic() < deadline:
            time.sleep(0.02)
        before = frontend_pids(server.pid)
        assert len(before) == 2
        os.kill(before[0], signal.SIGKILL)
        with lock:
            ok_at_kill = counts["ok"]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            now = frontend_pids(server.pid)
            if len(now) == 2 and before[0] not in now:
                break
            time.sleep(0.1)
        assert len(now) == 2 and before[0] not in now and before[1] in now
        deadline = time.monotonic() + 1.0  # over 100 answered within 1 s of the restart
        while counts["ok"] - ok_at_kill <= 100 and time.monotonic() < deadline:
            time.sleep(0.02)
        with lock:
            ok_after = counts["ok"] - ok_at_kill
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert ok_after > 100
    assert counts["failed"] <= 16  # at most each client's request in flight on it
    assert "frontend process 0" in server.log_text() or \
        "frontend process 1" in server.log_text()
    assert server.http_client().is_server_ready()


def connections_by_frontend(server, port: int) -> list[int]:
    """The established TCP connections to `port` each frontend process holds, sorted
    (/proc/net/tcp* for the sockets, /proc/<pid>/fd for their owners)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    held = []
    for pid in frontend_pids(server.pid):
        owned = 0
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            owned += target.startswith("socket:[") and target[8:-1] in inodes
        held.append(owned)
    return sorted(held)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_connections_are_spread_evenly_over_the_frontends_a_clients_two_too(server, protocol):
    """perf_analyzer opens two gRPC connections at concurrency 8: hashed by SO_REUSEPORT
    they met on one frontend in 2 of 5 starts; each frontend now takes one."""
    import socket

    port = server.http_port if protocol == "http" else server.grpc_port
    # earlier tests' connections are closed and counted out, both frontends serve
    wait_for(lambda: frontend_connection_counts(server.pid) == [0, 0],
             "no connection counted, both frontends serving")
    opened: list[socket.socket] = []
    try:
        for count in range(1, 7):
            opened.append(socket.create_connection(("127.0.0.1", port)))
            wait_for(lambda: sum(connections_by_frontend(server, port)) == count,
                     f"connection {count} to be accepted")
            if count in (2, 6):
                assert connections_by_frontend(server, port) == [count // 2] * 2
                assert frontend_connection_counts(server.pid) == [count // 2] * 2
    finally:
        for sock in opened:
            sock.close()
    wait_for(lambda: connections_by_frontend(server, port) == [0, 0],
             "the frontends to see the connections closed")
    assert server.http_client().is_server_live()


def test_a_second_server_on_the_same_port_is_refused_as_without_frontends(server):
    """The frontends share the core's sockets: no other server takes the port."""
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "pbserve", "--model-repository", str(EXAMPLES),
         "--frontend-processes", "2", "--http-port", str(server.http_port),
         "--grpc-port", "0", "--metrics-port", "0", "--model-control-mode", "explicit"],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"Socket '127.0.0.1:{server.http_port}' already in use" in \
        result.stdout + result.stderr
