"""Run README.md's and docs/*.md's runnable commands and snippets together (the rules
are tests/doc_runner.py's): every server at once, then the clients, four at a time, then
every server stopped; an outcome per command or snippet."""

from __future__ import annotations

import concurrent.futures
import time
from pathlib import Path

from doc_commands import Command, Snippet
from doc_runner import (DEFAULT_PORTS, NATS_URL, DocServer, Outcome, Process, flag_value,
                        run_curl, run_python, start_nats, stop_all, substitute, wait_all,
                        wait_listening)

from pbserve.testing import free_ports


def is_client(snippet: Snippet) -> bool:
    """A snippet that talks to a running server."""
    return any(f"{host}:{port}" in snippet.code for host in ("127.0.0.1", "localhost")
               for port in DEFAULT_PORTS)


def is_test_module(snippet: Snippet) -> bool:
    return "def test_" in snippet.code


def is_frontend(command: Command) -> bool:
    """A request-plane frontend: `pbserve --request-plane URL` with no repository."""
    return flag_value(command.argv, "--request-plane") is not None and \
        flag_value(command.argv, "--model-repository") is None


FRONTEND = " [through the cluster frontend]"
NOT_READY = "the server it needs is not ready (see that command's own test)"


def frontend_snippets(commands: list[Command], snippets: list[Snippet]) -> list[Snippet]:
    """README's client snippets that its cluster's frontend must answer too ("the
    examples above work unchanged, but for client shared memory")."""
    if not any(c.path == "README.md" and is_frontend(c) for c in commands):
        return []
    return [s for s in snippets if s.path == "README.md" and is_client(s)
            and "shared_memory" not in s.code]


class DocRun:
    """Runs the given (runnable) commands and snippets; `outcomes` by their ids."""

    def __init__(self, commands: list[Command], snippets: list[Snippet], root: Path,
                 tmp: Path) -> None:
        self.root, self.tmp = root, tmp
        self.commands, self.snippets = commands, snippets
        self.outcomes: dict[str, Outcome] = {}
        self.servers: list[DocServer] = []
        self.nats: list[Process] = []
        self._logs = 0
        self._ports: list[int] = []

    def run(self) -> dict[str, Outcome]:
        try:
            self._start_servers()
            ready = wait_all(self.servers)
            for server, error in ready.items():
                self.outcomes[server.command.id] = Outcome(error is None, error or "ready")
            self._run_clients({s for s, error in ready.items() if error is None})
        finally:
            self._stop()
        return self.outcomes

    def _take(self, count: int) -> list[int]:
        taken, self._ports = self._ports[:count], self._ports[count:]
        return taken

    def _log(self, name: str) -> Path:
        self._logs += 1
        return self.tmp / f"{self._logs:02d}-{name}.log"

    def _start_servers(self) -> None:
        blocks: dict[tuple[str, int], list[Command]] = {}
        for command in self.commands:
            if command.program in ("pbserve", "nats-server"):
                blocks.setdefault((command.path, command.block), []).append(command)
        # all at once: ports chosen one call apart could be the same
        self._ports = free_ports(4 * sum(len(b) for b in blocks.values()))
        for block in blocks.values():
            nats_ports = self._start_nats([c for c in block if c.program == "nats-server"])
            for command in (c for c in block if c.program == "pbserve"):
                plane = flag_value(command.argv, "--request-plane")
                match = NATS_URL.match(plane or "")
                if plane and (match is None or match.group(1) not in nats_ports):
                    self.outcomes[command.id] = Outcome(
                        False, f"its request plane {plane} is no nats-server of its block")
                    continue
                self.servers.append(DocServer(command, self.root, self._log("pbserve"),
                                              self._take(4), nats_ports))

    def _start_nats(self, commands: list[Command]) -> dict[str, int]:
        ports: dict[str, int] = {}
        for command in commands:
            store = self.tmp / f"nats-store-{len(self.nats)}"
            [port] = self._take(1)
            process, documented = start_nats(command, self.root, self._log("nats"), store,
                                             port)
            self.nats.append(process)
            error = wait_listening(process, port)
            self.outcomes[command.id] = Outcome(error is None, error or "listening")
            ports[documented] = port
        return ports

    def _examples_server(self, ready: set[DocServer]) -> DocServer | None:
        """The server of README's first pbserve command, if it is ready."""
        first = next((s for s in self.servers if s.command.path == "README.md"), None)
        return first if first in ready else None

    def _frontend(self, ready: set[DocServer]) -> DocServer | None:
        """README's cluster frontend, once it serves every model its workers do."""
        frontend = next((s for s in self.servers if s.command.path == "README.md"
                         and is_frontend(s.command)), None)
        if frontend is None:
            return None
        workers = [s for s in self.servers if s is not frontend and
                   (s.command.path, s.command.block) == (frontend.command.path,
                                                         frontend.command.block)]
        if frontend not in ready or not all(w in ready for w in workers):
            return None
        wanted = set().union(*(w.ready_models() for w in workers))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not wanted <= frontend.ready_models():
            time.sleep(0.2)
        return frontend

    def _run_clients(self, ready: set[DocServer]) -> None:
        examples, frontend = self._examples_server(ready), self._frontend(ready)
        jobs: dict[str, concurrent.futures.Future] = {}
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            for command in (c for c in self.commands if c.program == "curl"):
                jobs[command.id] = pool.submit(self._curl, examples, command)
            for n, snippet in enumerate(self.snippets):
                path = self.tmp / f"snippet_{n:02d}" / f"test_snippet_{n:02d}.py"
                path.parent.mkdir()
                server = None if is_test_module(snippet) else examples
                jobs[snippet.id] = pool.submit(self._python, server, snippet, path)
            for n, snippet in enumerate(frontend_snippets(self.commands, self.snippets)):
                path = self.tmp / f"frontend_{n:02d}.py"
                jobs[snippet.id + FRONTEND] = pool.submit(self._python, frontend, snippet,
                                                          path)
        for key, job in jobs.items():
            self.outcomes[key] = job.result()

    def _curl(self, server: DocServer | None, command: Command) -> Outcome:
        if server is None:
            return Outcome(False, NOT_READY)
        return run_curl(command, self.root, server.substitutions())

    def _python(self, server: DocServer | None, snippet: Snippet, path: Path) -> Outcome:
        """A client snippet against `server`, or a test module (no server) under pytest."""
        if is_test_module(snippet):
            return run_python(snippet.code, self.root, path, pytest=True)
        if server is None:
            return Outcome(False, NOT_READY)
        return run_python(substitute(snippet.code, server.substitutions()), self.root, path,
                          pytest=False)

    def _stop(self) -> None:
        statuses = stop_all(list(self.servers))
        for server, status in statuses.items():
            outcome = self.outcomes.get(server.command.id, Outcome())
            if outcome.ok and not server.exits and status != 0:
                self.outcomes[server.command.id] = Outcome(False, server.failure(
                    f"exited with status {status} on SIGINT (expected 0)"))
        stop_all(self.nats)
