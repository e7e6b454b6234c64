"""Operating the request plane: a NATS server restart under a running cluster, NATS
credentials and TLS, and the frontend's statistics summed over the workers. Real
processes throughout: the wheel's nats-server, pbserve workers and a frontend, driven
with tritonclient."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pbserve.core.instances.stub_process import stub_environment
from pbserve.testing import RunningServer, free_ports, running_nats
from stub_probe import sleeping_in_execute

ROOT = Path(__file__).resolve().parents[2]
HEARTBEAT = ["--plane-heartbeat-secs", "1"]


def _repository(tmp: Path) -> Path:
    repo = tmp / "repo"
    repo.mkdir(exist_ok=True)
    if not (repo / "sleepy").exists():
        shutil.copytree(ROOT / "tests/models/sleepy", repo / "sleepy")
    return repo


def _sleepy(module, ms: int):
    tensor = module.InferInput("SLEEP_MS", [1], "INT32")
    tensor.set_data_from_numpy(np.array([ms], np.int32))
    return tensor


def wait_for(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not met in {timeout} s: {condition}"
        time.sleep(0.05)


def _answers(client) -> bool:
    try:
        client.infer("sleepy", [_sleepy(httpclient, 0)])
    except InferenceServerException:
        return False
    return True


class Cluster:
    """Workers serving sleepy, and a frontend, on `url` with `plane_args`."""

    def __init__(self, url: str, tmp: Path, workers: list[str], plane_args=()) -> None:
        plane = ["--request-plane", url, *HEARTBEAT, *plane_args]
        repo = _repository(tmp)
        self.workers = {name: RunningServer([repo], [*plane, "--worker-name", name],
                                            tmp / f"{name}.log") for name in workers}
        self.frontend = RunningServer([], plane, tmp / "frontend.log")

    def wait_ready(self) -> None:
        for server in (*self.workers.values(), self.frontend):
            server.wait_ready()
        client = self.frontend.http_client()
        wait_for(lambda: client.is_model_ready("sleepy"))

    def stop(self) -> None:
        for server in (self.frontend, *self.workers.values()):
            server.stop()


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ops")
    with running_nats(tmp / "nats.log") as nats:
        cluster = Cluster(nats.url, tmp, ["w1", "w2"])
        try:
            cluster.wait_ready()
            yield nats, cluster
        finally:
            cluster.stop()


# -- statistics -------------------------------------------------------------------------
def _count(stats: dict, key: str = "inference_count") -> int:
    (entry,) = stats["model_stats"]
    return int(entry.get(key, 0))


def test_frontend_statistics_are_the_workers_summed(ops):
    _, cluster = ops
    client = cluster.frontend.http_client(concurrency=4)
    workers = [w.http_client() for w in cluster.workers.values()]
    before = [_count(w.get_inference_statistics("sleepy")) for w in workers]
    # One sleepy instance a worker: four concurrent requests reach both.
    pending = [client.async_infer("sleepy", [_sleepy(httpclient, 300)]) for _ in range(4)]
    for call in pending:
        call.get_result()
    after = [_count(w.get_inference_statistics("sleepy")) for w in workers]
    assert all(a > b for a, b in zip(after, before)), (before, after)
    assert sum(after) - sum(before) == 4

    stats = client.get_inference_statistics("sleepy")
    (entry,) = stats["model_stats"]
    assert (entry["name"], entry["version"]) == ("sleepy", "1")
    assert int(entry["inference_count"]) == sum(after)
    success = entry["inference_stats"]["success"]
    assert int(success["count"]) == sum(after)
    assert int(success["ns"]) >= 4 * 300_000_000  # the four sleeps, at least
    assert entry["last_inference"] > 0
    # gRPC ModelStatistics says the same; the version asked for, and every model.
    grpc = cluster.frontend.grpc_client()
    by_grpc = grpc.get_inference_statistics("sleepy", "1", as_json=True)
    assert _count(by_grpc) == sum(after)
    every = client.get_inference_statistics()
    assert [e["name"] for e in every["model_stats"]] == ["sleepy"]
    with pytest.raises(InferenceServerException, match="unknown model: 'nope'") as err:
        client.get_inference_statistics("nope")
    assert err.value.status() == "404"  # as a local server says it

    # /metrics: Triton's counters of the model, summed over its workers as well.
    with urllib.request.urlopen(cluster.frontend.metrics_url, timeout=10) as reply:
        text = reply.read().decode()
    assert f'nv_inference_request_success{{model="sleepy",version="1"}} {sum(after)}' in text
    assert f'nv_inference_count{{model="sleepy",version="1"}} {sum(after)}' in text
    assert text.count("# TYPE nv_inference_request_success counter") == 1


# -- a NATS server restart --------------------------------------------------------------
def test_a_nats_server_restart_is_survived(ops):
    nats, cluster = ops
    client = cluster.frontend.http_client(concurrency=2, network_timeout=60)
    grpc = cluster.frontend.grpc_client()
    assert _answers(client)
    # A request in flight when the server goes (its worker sleeps in execute).
    in_flight = client.async_infer("sleepy", [_sleepy(httpclient, 2000)])
    wait_for(lambda: any(sleeping_in_execute(w.pid) for w in cluster.workers.values()))
    nats.kill()
    with pytest.raises(InferenceServerException) as err:
        in_flight.get_result()
    assert err.value.status() == "503"
    assert f"request plane {nats.url}" in err.value.message()
    # While it is away: not ready, the registry's entries expire (no heartbeat reaches
    # it), and requests fail at once, naming the plane.
    wait_for(lambda: not client.is_server_ready())
    wait_for(lambda: client.get_model_repository_index() == [])
    with pytest.raises(InferenceServerException) as err:
        grpc.infer("sleepy", [_sleepy(grpcclient, 0)], client_timeout=30)
    assert err.value.status() == "StatusCode.UNAVAILABLE"
    assert f"request plane {nats.url} is not connected" in err.value.message()
    with pytest.raises(InferenceServerException, match="is not connected") as err:
        client.get_inference_statistics("sleepy")
    assert err.value.status() == "503"

    # The server comes back with nothing (the stream and the registry were in its
    # memory): the workers and the frontend make them again and the entries return.
    nats.start()
    wait_for(lambda: _answers(client))
    assert client.is_server_ready() and client.is_model_ready("sleepy")
    assert [m["name"] for m in client.get_model_repository_index()] == ["sleepy"]
    result = grpc.infer("sleepy", [_sleepy(grpcclient, 0)])
    assert result.as_numpy("PID")[0] > 0
    # Both workers take requests again (their pulls were made again too), once the one
    # that had the request in flight is done with it.
    wait_for(lambda: _both_take(client))


def _both_take(client) -> bool:
    """Whether two concurrent sleepy requests ran on two workers (one instance each)."""
    pending = [client.async_infer("sleepy", [_sleepy(httpclient, 300)]) for _ in range(2)]
    return len({int(p.get_result().as_numpy("PID")[0]) for p in pending}) == 2


# -- credentials and TLS ----------------------------------------------------------------
def _pbserve(*args: str) -> subprocess.CompletedProcess:
    """pbserve with `args`, on free ports (not the defaults, which another server may hold)."""
    http, grpc, metrics = free_ports(3)
    return subprocess.run([sys.executable, "-m", "pbserve", "--http-port", str(http),
                           "--grpc-port", str(grpc), "--metrics-port", str(metrics), *args],
                          capture_output=True, text=True, timeout=60)


def test_plane_flags_are_checked_before_anything_starts(tmp_path):
    missing = tmp_path / "nope.creds"
    done = _pbserve("--request-plane", "nats://127.0.0.1:1", "--request-plane-creds",
                    str(missing))
    assert done.returncode == 1
    assert f"--request-plane-creds '{missing}' cannot be read" in done.stderr
    done = _pbserve("--model-repository", str(tmp_path), "--request-plane-user", "alice")
    assert done.returncode == 1
    assert "--request-plane-user needs --request-plane" in done.stderr
    done = _pbserve("--request-plane", "nats://127.0.0.1:1", "--request-plane-tls-cert",
                    str(missing.parent))
    assert done.returncode == 1
    assert f"--request-plane-tls-cert '{missing.parent}' cannot be read" in done.stderr
    # Nothing listens there: the first connection fails at once, saying why.
    done = _pbserve("--request-plane", "nats://127.0.0.1:1")
    assert done.returncode == 1
    assert "cannot join the request plane nats://127.0.0.1:1: " in done.stderr


def _joins(url: str, tmp: Path, name: str, *args: str,
           env: dict[str, str] | None = None) -> RunningServer:
    """A frontend on `url`: it exits 1 (its log says why) or it is ready."""
    return RunningServer([], ["--request-plane", url, *args], tmp / f"{name}.log", env=env)


def test_credentials_are_passed_to_nats(tmp_path):
    auth = ["--user", "alice", "--pass", "s3cret"]
    with running_nats(tmp_path / "nats.log", auth) as nats:
        refused = _joins(nats.url, tmp_path, "refused", "--request-plane-user", "alice",
                         "--request-plane-password", "wrong")
        assert refused.proc.wait(30) == 1
        refused.stop()
        assert (f"cannot join the request plane {nats.url}: nats: 'Authorization "
                f"Violation' (credentials refused") in refused.log_text()
        cluster = Cluster(nats.url, tmp_path, ["w1"], ["--request-plane-user", "alice",
                                                       "--request-plane-password", "s3cret"])
        try:
            cluster.wait_ready()
            assert _answers(cluster.frontend.http_client())
            # Cut off from the plane, both still exit cleanly.
            nats.kill()
            wait_for(lambda: not cluster.frontend.http_client().is_server_ready())
            assert cluster.frontend.stop() == 0
            assert cluster.workers["w1"].stop() == 0
        finally:
            cluster.stop()


def test_a_token_is_passed_to_nats(tmp_path):
    with running_nats(tmp_path / "nats.log", ["--auth", "t0ken"]) as nats:
        refused = _joins(nats.url, tmp_path, "refused", "--request-plane-token", "wrong")
        assert refused.proc.wait(30) == 1
        refused.stop()
        assert "'Authorization Violation' (credentials refused" in refused.log_text()
        # From the environment (kept out of `ps`), as the flag's default.
        frontend = _joins(nats.url, tmp_path, "frontend",
                          env={"PBSERVE_REQUEST_PLANE_TOKEN": "t0ken"})
        try:
            frontend.wait_ready()  # ready: connected, the stream and registry made
            assert frontend.http_client().get_model_repository_index() == []
        finally:
            frontend.stop()


EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _certificates(tmp: Path) -> Path:
    """A self-signed CA, a server certificate for 127.0.0.1 and a client one. P-256 keys:
    made at once, where three RSA 2048 ones take 1-2 s."""
    certs = tmp / "certs"
    certs.mkdir()
    _openssl("req", "-x509", *EC_KEY, "-nodes", "-days", "1", "-subj",
             "/CN=pbserve test CA", "-keyout", "ca.key", "-out", "ca.pem", cwd=certs)
    (certs / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for name in ("server", "client"):
        _openssl("req", *EC_KEY, "-nodes", "-subj", f"/CN={name}",
                 "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=certs)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "1", "-extfile", "san.ext", "-out",
                 f"{name}.pem", cwd=certs)
    return certs


def test_tls_options_are_passed_to_nats(tmp_path):
    certs = _certificates(tmp_path)
    tls = ["--tlsverify", "--tlscert", str(certs / "server.pem"), "--tlskey",
           str(certs / "server.key"), "--tlscacert", str(certs / "ca.pem")]
    with running_nats(tmp_path / "nats.log", tls) as nats:
        unverified = _joins(nats.url, tmp_path, "unverified", "--request-plane-tls-cert",
                            str(certs / "client.pem"), "--request-plane-tls-key",
                            str(certs / "client.key"))  # no CA: the server is unknown
        assert unverified.proc.wait(30) == 1
        unverified.stop()
        assert "certificate verify failed" in unverified.log_text()
        cluster = Cluster(nats.url, tmp_path, ["w1"], [
            "--request-plane-tls-ca", str(certs / "ca.pem"),
            "--request-plane-tls-cert", str(certs / "client.pem"),
            "--request-plane-tls-key", str(certs / "client.key")])
        try:
            cluster.wait_ready()
            assert _answers(cluster.frontend.http_client())
        finally:
            cluster.stop()


def test_statistics_of_several_workers_add_up_version_by_version():
    from pbserve.distributed.statistics import merge

    def entry(version: str, count: int, last: int, batch: int) -> dict:
        figure = {"count": count, "ns": 10 * count}
        return {"name": "m", "version": version, "last_inference": last,
                "inference_count": count, "execution_count": count,
                "inference_stats": {"success": dict(figure), "queue": dict(figure)},
                "response_stats": {"0": {"success": dict(figure)}},
                "batch_stats": [{"batch_size": batch, "compute_infer": dict(figure)}],
                "memory_usage": []}

    total = merge([[entry("1", 2, 100, 1), entry("2", 1, 50, 1)],
                   [entry("1", 3, 70, 4)], [entry("10", 5, 1, 1)]])
    assert [e["version"] for e in total] == ["1", "2", "10"]
    one = total[0]
    assert (one["inference_count"], one["execution_count"], one["last_inference"]) == (5, 5, 100)
    assert one["inference_stats"]["success"] == {"count": 5, "ns": 50}
    assert one["response_stats"]["0"]["success"] == {"count": 5, "ns": 50}
    assert [(b["batch_size"], b["compute_infer"]["count"]) for b in one["batch_stats"]] == [
        (1, 2), (4, 3)]
    assert total[1]["inference_count"] == 1


def test_stubs_are_started_without_the_servers_secrets(monkeypatch):
    monkeypatch.setenv("PBSERVE_REQUEST_PLANE_PASSWORD", "s3cret")
    monkeypatch.setenv("PBSERVE_REQUEST_PLANE_TOKEN", "t0ken")
    monkeypatch.setenv("SOMETHING_ELSE", "kept")
    env = stub_environment()
    assert "PBSERVE_REQUEST_PLANE_PASSWORD" not in env
    assert "PBSERVE_REQUEST_PLANE_TOKEN" not in env
    assert env["SOMETHING_ELSE"] == "kept"
