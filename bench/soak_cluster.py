"""The soak's cluster under faults: a real nats-server, two workers and a frontend; a
worker SIGKILLed (and started again, as a supervisor would) and later nats-server
killed and started again, while the clients run through the frontend.

w1 serves add_sub, repeat and bls_pipeline; w2 serves add_sub, repeat and identity, so
bls_pipeline on w1 calls add_sub at home and identity on w2, across the plane. The
worker killed is w2: requests in flight on it fail (UNAVAILABLE, naming it), new
unary and decoupled ones go to w1, and BLS calls wait for w2 to be back.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pbserve.testing import RunningNats, RunningServer
from soak_clients import Outcome

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = {"w1": ("add_sub", "repeat", "bls_pipeline"), "w2": ("add_sub", "repeat", "identity")}
VICTIM = "w2"
HEARTBEAT_S = 1.0


class Cluster:
    """nats-server, workers w1 and w2 (models as LAYOUT says), and a frontend."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.nats = RunningNats(tmp / "nats.log")
        self.workers: dict[str, RunningServer] = {}
        self.frontend: RunningServer | None = None
        try:
            self.nats.wait_ready()
            self.plane = ["--request-plane", self.nats.url, "--plane-heartbeat-secs",
                          str(HEARTBEAT_S), "--log-info=false"]
            for name in LAYOUT:
                self.workers[name] = self._worker(name)
            self.frontend = RunningServer([], self.plane, tmp / "frontend.log")
        except BaseException:
            self.stop()
            raise

    def _worker(self, name: str) -> RunningServer:
        repo = self.tmp / f"repo-{name}"
        for model in LAYOUT[name]:
            if not (repo / model).exists():
                shutil.copytree(ROOT / "models" / "examples" / model, repo / model)
        return RunningServer([repo], [*self.plane, "--worker-name", name],
                             self.tmp / f"{name}.log")

    def wait_ready(self, timeout: float = 120.0) -> None:
        for server in (*self.workers.values(), self.frontend):
            assert server is not None
            server.wait_ready(timeout)
        assert self.frontend is not None
        client = self.frontend.http_client()
        deadline = time.monotonic() + timeout
        models = {m for ms in LAYOUT.values() for m in ms}
        while not all(client.is_model_ready(m) for m in models):
            if time.monotonic() > deadline:
                raise TimeoutError("the frontend does not see every model ready")
            time.sleep(0.1)

    def kill_worker(self, name: str) -> float:
        """SIGKILL the worker (its stubs see it gone and end); start it again under the
        same name at once. Returns how long the new one took to be ready."""
        old = self.workers[name]
        os.kill(old.pid, signal.SIGKILL)
        old.proc.wait(10)
        old.stop()  # closes its log
        started = time.monotonic()
        self.workers[name] = self._worker(name)
        self.workers[name].wait_ready(120)
        return time.monotonic() - started

    def stop(self) -> None:
        for server in (self.frontend, *self.workers.values()):
            if server is not None:
                server.stop()
        self.nats.stop()


@dataclass
class Fault:
    """A fault: when it began, when what it took away was back, what it was."""
    name: str
    began: float
    back: float  # the worker ready again / nats-server listening again

    def report(self, outcomes: list[Outcome], until: float) -> list[str]:
        """Failures it caused (requests ended from the fault until `until`, the next
        fault: in flight at it, or sent during it), lost requests, and the time from the
        fault (and from `back`) until every path answered again."""
        window = [o for o in outcomes if self.began <= o.ended < until]
        failed = [o for o in window if o.result == "failed"]
        in_flight = [o for o in failed if o.sent < self.began]
        lines = [f"{self.name}: {len(failed)} failed ({len(in_flight)} in flight at the "
                 f"fault, {len(failed) - len(in_flight)} sent during it), "
                 f"{sum(o.result == 'lost' for o in window)} lost"]
        recovered = self.began
        for path in sorted({o.path for o in window}):
            mine = [o for o in window if o.path == path]
            failures = [o for o in mine if o.result != "ok"]
            if not failures:
                continue
            last = max(failures, key=lambda o: o.sent)  # every request sent after it ...
            first_ok = min((o.ended for o in mine if o.result == "ok" and
                            o.sent >= last.sent), default=None)  # ... is answered from here
            if first_ok is None:
                lines.append(f"  {path}: not back before the next fault or the end")
                recovered = float("inf")
                continue
            lines.append(f"  {path}: last failed request sent {last.sent - self.began:.2f} s "
                         f"after the fault, answered right again from "
                         f"{first_ok - self.began:.2f} s; last failure ended "
                         f"{max(o.ended for o in failures) - self.began:.2f} s")
            recovered = max(recovered, first_ok)
        lines.append(f"  service back {recovered - self.began:.2f} s after the fault "
                     f"({recovered - self.back:+.2f} s after it was repaired at "
                     f"{self.back - self.began:.2f} s)")
        return lines


def faults_timeline(cluster: Cluster, seconds: float, nats_gap_s: float,
                    sleep_until) -> list[Fault]:
    """Kill VICTIM at a quarter of the run, nats-server at 0.6 of it; `sleep_until(s)`
    waits until `s` seconds into the run. Returns the faults as they happened."""
    faults = []
    sleep_until(seconds * 0.25)
    began = time.monotonic()
    restart_s = cluster.kill_worker(VICTIM)
    faults.append(Fault(f"worker {VICTIM} SIGKILLed (started again: ready in "
                        f"{restart_s:.1f} s)", began, began + restart_s))
    sleep_until(seconds * 0.6)
    began = time.monotonic()
    cluster.nats.kill()
    time.sleep(nats_gap_s)
    cluster.nats.start()
    faults.append(Fault(f"nats-server SIGKILLed, started again {nats_gap_s:.1f} s later",
                        began, time.monotonic()))
    return faults


def new_cluster() -> tuple[Cluster, tempfile.TemporaryDirectory]:
    tmp = tempfile.TemporaryDirectory(prefix="pbserve-soak-cluster-")
    return Cluster(Path(tmp.name)), tmp
