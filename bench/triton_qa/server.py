"""Start pbserve where Triton's clients look for it: ports 8000/8001/8002."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from pbserve.testing import stop_process_group

PORTS = (8000, 8001, 8002)


def ports_free(host: str) -> bool:
    """True when every port of PORTS can be bound on `host`."""
    with contextlib.ExitStack() as stack:
        for port in PORTS:
            s = stack.enter_context(socket.socket())
            # As the server binds: a port whose old connections linger in TIME_WAIT is free.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


def pick_host(wait_s: float = 10.0) -> str | None:
    """127.0.0.1 when Triton's ports are free there (waiting up to `wait_s` for them), else
    another loopback address (clients that read TRITONSERVER_IPADDR follow it; a few
    hard-code localhost), else None. TRITON_QA_HOST names the one address to use (several
    harnesses at once, each on its own: bench/gpu_run.sh)."""
    only = os.environ.get("TRITON_QA_HOST")
    deadline = time.monotonic() + wait_s
    while not ports_free(only or "127.0.0.1"):
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for host in (only,) if only else ("127.0.0.1", "127.0.0.2", "127.0.0.3"):
        if ports_free(host):
            return host
    return None


class Server:
    """A pbserve process serving one repository on `host`, log in `log_path`."""

    def __init__(self, repository: Path, host: str, log_path: Path,
                 args: tuple[str, ...] = ()) -> None:
        self.host = host
        self.log_path = log_path
        command = [sys.executable, "-m", "pbserve", "--model-repository", str(repository),
                   "--http-address", host, "--grpc-address", host, "--metrics-address", host,
                   "--http-port", str(PORTS[0]), "--grpc-port", str(PORTS[1]),
                   "--metrics-port", str(PORTS[2]), "--log-verbose", "1", *args]
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def wait(self, path: str, timeout: float) -> bool:
        """True once GET `path` answers 200; False if the server exits or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                url = f"http://{self.host}:{PORTS[0]}{path}"
                with urllib.request.urlopen(url, timeout=1):
                    return True
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.1)
        return False

    def post(self, path: str, body: str) -> int:
        """POST `body` to `path`; the HTTP status."""
        request = urllib.request.Request(f"http://{self.host}:{PORTS[0]}{path}",
                                         data=body.encode(), method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    def stop(self, timeout: float = 20.0) -> None:
        """SIGINT the server's group, SIGKILL it if it does not end in time."""
        stop_process_group(self.proc, timeout)
        self._log.close()

    def log_text(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")
