"""A debugger in model.py, driven as a user would: `print()` reaching the server's log,
`breakpoint()` opening pdb on the server's terminal (--model-debug, under a
pseudo-terminal), and debugpy listening for an IDE (--model-debug-port)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from pbserve.testing import free_ports, running_server

CONFIG = """
name: "m"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""
MODEL = """
import os, sys, time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        print("initialized", args["model_instance_name"])

    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            print("first line\\nsecond line")
            print("to stderr", file=sys.stderr)
            gate = os.environ.get("GATE", "")
            while gate and not os.path.exists(gate):
                time.sleep(0.01)
            breakpoint()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x + 1)]))
        return out
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    model = tmp_path / "repo" / "m"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG)
    (model / "1" / "model.py").write_text(textwrap.dedent(MODEL))
    return tmp_path / "repo"


def _infer(url: str) -> list[float]:
    client = httpclient.InferenceServerClient(url, network_timeout=120)
    tensor = httpclient.InferInput("IN", [2], "FP32")
    tensor.set_data_from_numpy(np.array([1, 2], np.float32))
    return client.infer("m", [tensor]).as_numpy("OUT").tolist()


def _wait_for(predicate, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_print_reaches_the_log_line_by_line_with_the_instance_name(
        repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = tmp_path / "gate"
    monkeypatch.setenv("GATE", str(gate))
    with running_server(repo, log_path=tmp_path / "log") as server:
        assert "m_0_0] initialized m_0_0" in server.log_text()
        assert "m_0_1] initialized m_0_1" in server.log_text()
        result: list = []
        request = threading.Thread(target=lambda: result.append(_infer(server.http_url)))
        request.start()
        # the lines are in the log while execute still runs: nothing waits in a buffer
        _wait_for(lambda: "] second line" in server.log_text(), "the printed lines")
        assert not result
        gate.touch()
        request.join(60)
        assert result == [[2.0, 3.0]]
        _wait_for(lambda: "breakpoint() at" in server.log_text(), "the breakpoint warning")
    lines = server.log_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.endswith("] first line"))
    assert lines[first].startswith("I") and "pbserve.stub m_0_" in lines[first]
    assert lines[first + 1].endswith("] second line")
    assert any(line.startswith("W") and line.endswith("] to stderr") for line in lines)
    assert any("model.py:18 ignored: instance m_0_" in line for line in lines)


def test_model_debug_needs_a_terminal(repo: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pbserve", "--model-repository", str(repo),
                           "--model-debug", "m"], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "--model-debug needs pbserve in the foreground of a terminal" in done.stderr


def test_breakpoint_opens_pdb_on_the_servers_terminal(repo: Path) -> None:
    pexpect = pytest.importorskip("pexpect")
    http, grpc, metrics = free_ports(3)
    child = pexpect.spawn(
        sys.executable, ["-m", "pbserve", "--model-repository", str(repo), "--model-debug",
                         "m", "--http-port", str(http), "--grpc-port", str(grpc),
                         "--metrics-port", str(metrics)],
        encoding="utf-8", timeout=90, env={**os.environ, "PYTHONBREAKPOINT": ""})
    try:
        child.expect("runs a single instance, m_0_0")
        # a zygote's child cannot have the terminal: this one stub is started plainly
        child.expect("instance m_0_0 has the server's terminal .*started the plain way")
        child.expect("Started HTTPService")
        result: list = []
        request = threading.Thread(target=lambda: result.append(_infer(f"127.0.0.1:{http}")))
        request.start()
        # the debugged stub writes to the terminal itself (not through the log)
        child.expect("first line")
        child.expect(r"\(Pdb\) ")
        child.sendline("p x.tolist()")
        child.expect(r"\[1\.0, 2\.0\]")
        child.expect(r"\(Pdb\) ")
        child.sendline("where")
        child.expect(r"model\.py\(19\)execute")
        child.expect(r"\(Pdb\) ")
        child.sendline("c")
        request.join(60)
        assert result == [[2.0, 3.0]]
        child.kill(signal.SIGINT)
        child.expect(pexpect.EOF)
    finally:
        if child.isalive():
            os.killpg(child.pid, signal.SIGKILL)
        child.close()
    assert child.exitstatus == 0 or child.signalstatus is None


def _spawn(repo: Path, model: str, ports: list[int]):
    pexpect = pytest.importorskip("pexpect")
    http, grpc, metrics = ports
    return pexpect.spawn(
        sys.executable, ["-m", "pbserve", "--model-repository", str(repo), "--model-debug",
                         model, "--http-port", str(http), "--grpc-port", str(grpc),
                         "--metrics-port", str(metrics)],
        encoding="utf-8", timeout=90, env={**os.environ, "PYTHONBREAKPOINT": ""})


def test_ctrl_c_after_continue_stops_the_server(repo: Path) -> None:
    """Ctrl-C at the terminal (SIGINT to the foreground process group: the server and
    the debugged stub) after `c` at the pdb prompt: the server shuts down cleanly, and
    the stub does not drop into pdb inside pbserve's own code."""
    pexpect = pytest.importorskip("pexpect")
    ports = free_ports(3)
    child = _spawn(repo, "m", ports)
    try:
        child.expect("Started HTTPService")
        result: list = []
        request = threading.Thread(target=lambda: result.append(_infer(f"127.0.0.1:{ports[0]}")))
        request.start()
        child.expect(r"\(Pdb\) ")
        child.sendline("c")
        request.join(60)
        assert result == [[2.0, 3.0]]
        child.sendcontrol("c")
        child.expect("a second Ctrl-C or SIGTERM exits at once")
        child.expect(pexpect.EOF, timeout=60)
        after = child.before
    finally:
        if child.isalive():
            os.killpg(child.pid, signal.SIGKILL)
        child.close()
    assert "(Pdb)" not in after and "SignalError" not in after, after
    assert "did not finalize" not in after, after
    assert child.exitstatus == 0, after


def test_model_debug_naming_no_model_is_refused(repo: Path) -> None:
    pexpect = pytest.importorskip("pexpect")
    child = _spawn(repo, "n", free_ports(3))
    try:
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert "--model-debug 'n': no such model in the model repository (its models: 'm')" \
        in child.before
    assert "successfully loaded" not in child.before
    assert child.exitstatus == 1


def _dap(sock: socket.socket, seq: int, command: str, arguments: dict) -> dict:
    body = json.dumps({"seq": seq, "type": "request", "command": command,
                       "arguments": arguments}).encode()
    sock.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    reader = sock.makefile("rb")
    while True:
        headers = {}
        while (line := reader.readline().strip()):
            key, _, value = line.decode().partition(":")
            headers[key.strip().lower()] = value.strip()
        message = json.loads(reader.read(int(headers["content-length"])))
        if message.get("type") == "response" and message.get("request_seq") == seq:
            return message


def test_debugpy_listens_for_an_ide(repo: Path, tmp_path: Path) -> None:
    pytest.importorskip("debugpy")
    port = free_ports(1)[0]
    with running_server(repo, args=["--model-debug", "m", "--model-debug-port",
                                    f"127.0.0.1:{port}"],
                        log_path=tmp_path / "log") as server:
        assert f"m_0_0: debugpy listening on 127.0.0.1:{port}" in server.log_text()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            response = _dap(sock, 1, "initialize", {"adapterID": "pbserve-test",
                                                    "clientID": "pytest"})
            assert response["success"] and response["command"] == "initialize"
            assert "supportsConfigurationDoneRequest" in response["body"]
        # with no IDE attached, breakpoint() does not stop: the request is answered
        assert _infer(server.http_url) == [2.0, 3.0]
        group = server.pid
    _wait_for(lambda: not _group_alive(group), "the server's processes to end", 30)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
