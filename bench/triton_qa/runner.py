"""Run one case: build its repository, start pbserve, check its load, run its clients."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import clients
import repository
from result import FAIL, PASS, SKIP, Result
from server import Server, pick_host
from spec import Case

READY_S = 30
LOAD_ERROR_S = 15
# The shm leak probe reads the Python backend's own regions through `triton_shm_monitor`,
# a C extension built in Triton's container; pbserve has no such regions. TEST_JETSON=1
# is the switch Triton's scripts read to turn the probe off (it also leaves out the
# CUDA shared-memory tests).
CLIENT_ENV = {"TEST_JETSON": "1"}


def run_case(case: Case, roots: dict[str, Path], work: Path) -> list[Result]:
    """The case's rows; its repository, server log and client logs stay under `work`."""
    if case.skip:
        return [Result(case.name, SKIP, case.skip)]
    host = pick_host()
    if host is None:
        return [Result(case.name, SKIP, "ports 8000-8002 busy on every loopback address")]
    folder = work / case.name
    folder.mkdir(parents=True, exist_ok=True)
    repo = folder / case.repo_path
    repository.build(case.models, roots, case.checkout, repo)
    if case.setup is not None:
        case.setup(folder, repo, roots)
    log = roots[case.checkout] / case.log_name if case.log_name else folder / "server.log"
    saved = {k: os.environ.get(k) for k in case.server_env}
    os.environ.update({k: v.format(case_dir=folder) for k, v in case.server_env.items()})
    try:
        server = Server(repo, host, log,
                        tuple(a.format(case_dir=folder) for a in case.server_args))
    finally:
        _restore(saved)
    try:
        if case.load_error:
            return [_check_load_error(case, server)]
        rows = _serve(case, server, roots, folder, host)
        if not case.clients and not rows:
            rows = [Result(f"{case.name}:server_ready", PASS)]
    finally:
        server.stop()
    return rows + _check_log_after(case, server)


def run_cases(cases: list[Case], roots: dict[str, Path], work: Path,
              rows: list[Result]) -> None:
    """Run each case in turn, its results appended to `rows` as they come (a run cut short
    keeps what it got) and told on stderr."""
    for case in cases:
        print(f"... {case.name}", file=sys.stderr, flush=True)
        case_rows = run_case(case, roots, work)
        for row in case_rows:
            print(f"    {row.status} {row.case} {row.reason}", file=sys.stderr, flush=True)
        rows += case_rows


def _check_load_error(case: Case, server: Server) -> Result:
    server.wait("/v2/health/live", READY_S)
    deadline = time.monotonic() + LOAD_ERROR_S
    while time.monotonic() < deadline and case.load_error not in server.log_text():
        time.sleep(0.2)
    ready = server.wait("/v2/health/ready", 0.5)
    if case.load_error in server.log_text() and not ready:
        return Result(case.name, PASS)
    if ready:
        return Result(case.name, FAIL, "server became ready; expected a failed load")
    return Result(case.name, FAIL, f"log lacks {case.load_error!r}; it has: "
                  f"{_log_error(server.log_text())}")


def _serve(case: Case, server: Server, roots: dict[str, Path], folder: Path,
           host: str) -> list[Result]:
    if not server.wait("/v2/health/ready", READY_S):
        return [Result(case.name, FAIL, "server not ready: " + _log_error(server.log_text()))]
    for path, body in case.http_posts:
        status = server.post(path, body)
        if status != 200:
            return [Result(case.name, FAIL, f"POST {path} {body} answered {status}")]
    env = {**CLIENT_ENV, "TRITONSERVER_IPADDR": host, "SERVER_LOG": str(server.log_path)}
    rows: list[Result] = []
    for number, client in enumerate(case.clients):
        cwd = roots[client.checkout] / client.cwd
        client_log = folder / f"client{number}.log"
        rows += clients.run(client, case.name, cwd, env, client_log)
    return rows


def _check_log_after(case: Case, server: Server) -> list[Result]:
    if not case.log_after and not case.log_lacks:
        return []
    text = server.log_text()
    missing = [t for t in case.log_after if t not in text]
    if missing:
        return [Result(f"{case.name}:server_log", FAIL, f"log lacks {missing!r}")]
    present = [t for t in case.log_lacks if t in text]
    if present:
        return [Result(f"{case.name}:server_log", FAIL, f"log has {present!r}")]
    return [Result(f"{case.name}:server_log", PASS)]


def _log_error(text: str) -> str:
    """The server log's first error line (`E<date> ...`), else its last line."""
    for line in text.splitlines():
        if line[:1] == "E" and line[1:5].isdigit():
            return clients.short(line.split(" ", 3)[-1])
    return clients.first_error(text) or "(empty log)"


def _restore(saved: dict[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
