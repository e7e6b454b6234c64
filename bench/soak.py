"""A soak: mixed paths from many clients for a set time; memory, a stub killed, a cluster
under faults.

    python bench/soak.py [--seconds 60] [--clients 32] [--timeout 30]
                         [--sample-every 30] [--phases memory,stub,cluster]
                         [--cluster-seconds 60] [--nats-gap 2] [--settle 3]

Every client is a thread with its own connection, on one path in turn
(bench/soak_clients.py): HTTP unary, gRPC unary, gRPC stream, decoupled (gRPC stream,
3 responses a request), BLS (bls_pipeline over gRPC: it calls add_sub and identity).
Each phase prints requests sent, answered, failed (an error or a wrong answer) and lost
(never answered within `--timeout`), and the commonest failures.

- memory (`--seconds`): pbserve on models/examples, every path, no fault; the RSS of the
  parent and of every stub every `--sample-every` seconds, and each one's least-squares
  slope over the second half (Triton's L0_memory_growth; target under 1 MiB a minute).
- stub (`--seconds`): the same server, add_sub's stub SIGKILLed half-way (it is
  restarted); only its in-flight requests may fail.
- cluster (`--cluster-seconds`): a real nats-server, two workers and a frontend
  (bench/soak_cluster.py), unary / decoupled / BLS across workers through the frontend;
  worker w2 SIGKILLed at a quarter (started again at once, as a supervisor would), then
  nats-server killed at 0.6 and started again `--nats-gap` seconds later. For each fault:
  failures (in flight at it / sent during it), lost, and when each path answered again.
Target: 0 lost; failures only from a fault, UNAVAILABLE naming it. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pbserve.testing import RunningServer  # noqa: E402
from shm.names import SHM_DIR, owner_of, sweep_dead_owners  # noqa: E402
from soak_clients import PATHS, Record, start_clients, summarize  # noqa: E402
from soak_memory import RssSampler, children, rss_mib, stub_name  # noqa: E402

MODELS = ("add_sub", "repeat", "bls_pipeline", "identity")
KILLED = "add_sub"
CLUSTER_PATHS = ("http", "decoupled", "bls")


def snapshot(server_pid: int) -> str:
    """The server's RSS (parent, stubs), fds and shm entries, as one line."""
    stubs = children(server_pid)
    fds = len(os.listdir(f"/proc/{server_pid}/fd"))
    owned = {server_pid, *stubs}
    entries = [n for n in os.listdir(SHM_DIR) if "pbserve" in n and owner_of(n) in owned]
    shm_bytes = sum(os.stat(os.path.join(SHM_DIR, n)).st_size for n in entries)
    return (f"RSS parent {rss_mib(server_pid):.1f} MiB, {len(stubs)} stubs "
            f"{sum(rss_mib(s) for s in stubs):.1f} MiB; fds {fds}; shm entries "
            f"{len(entries)} ({shm_bytes / (1 << 20):.1f} MiB)")


class Run:
    """Clients on `paths` against `urls` until `stop`; the outcomes in `record`."""

    def __init__(self, paths: tuple[str, ...], clients: int, urls: dict[str, str],
                 timeout: float) -> None:
        self.paths, self.timeout = paths, timeout
        self.record, self.stop_event = Record(), threading.Event()
        self.started = time.monotonic()
        self.threads = start_clients(paths, clients, urls, self.stop_event, self.record,
                                     timeout)

    def sleep_until(self, seconds: float) -> None:
        time.sleep(max(0.0, self.started + seconds - time.monotonic()))

    def finish(self) -> float:
        """Stop the clients, print the tally; the run's length in seconds."""
        elapsed = time.monotonic() - self.started
        self.stop_event.set()
        for thread in self.threads:
            thread.join(self.timeout + 5)
        stuck = sum(thread.is_alive() for thread in self.threads)
        for line in summarize(self.record.snapshot(), self.paths, elapsed):
            print(line)
        if stuck:
            print(f"{stuck} clients still waiting")
        return elapsed


def _stub_of(server_pid: int, model: str) -> int | None:
    for child in children(server_pid):
        if stub_name(child).startswith(model + "_"):
            return child
    return None


def phase_memory(server: RunningServer, args) -> None:
    print(f"\n== memory: {args.clients} clients on {', '.join(PATHS)}, {args.seconds:.0f} s,"
          f" RSS every {args.sample_every:g} s")
    print(f"before: {snapshot(server.pid)}")
    sampler = RssSampler(server.pid, args.sample_every)
    sampler.start()
    run = Run(PATHS, args.clients, _urls(server), args.timeout)
    run.sleep_until(args.seconds)
    sampler.stop()  # before the tally is printed: one line a print, not two interleaved
    run.finish()
    for line in sampler.report():
        print(line)
    time.sleep(args.settle)  # released blocks and idle regions given back (1-2 s idle)
    print(f"after:  {snapshot(server.pid)}")


def phase_stub(server: RunningServer, args) -> None:
    print(f"\n== {KILLED}'s stub killed half-way: {args.clients} clients, "
          f"{args.seconds:.0f} s")
    print(f"before: {snapshot(server.pid)}")
    run = Run(PATHS, args.clients, _urls(server), args.timeout)
    run.sleep_until(args.seconds / 2)
    killed = _stub_of(server.pid, KILLED)
    if killed is not None:
        os.kill(killed, signal.SIGKILL)
        print(f"killed {KILLED}'s stub (pid {killed}) at {args.seconds / 2:.1f} s")
    run.sleep_until(args.seconds)
    run.finish()
    time.sleep(args.settle)
    print(f"after:  {snapshot(server.pid)}")


def phase_cluster(args) -> None:
    from soak_cluster import faults_timeline, new_cluster

    seconds = args.cluster_seconds
    print(f"\n== cluster: nats-server, 2 workers, a frontend; {args.clients} clients on "
          f"{', '.join(CLUSTER_PATHS)}, {seconds:.0f} s")
    cluster, tmp = new_cluster()
    try:
        cluster.wait_ready()
        run = Run(CLUSTER_PATHS, args.clients, _urls(cluster.frontend), args.timeout)
        faults = faults_timeline(cluster, seconds, args.nats_gap, run.sleep_until)
        run.sleep_until(seconds)
        run.finish()
        outcomes = run.record.snapshot()
        ends = [f.began for f in faults[1:]] + [time.monotonic()]
        for fault, until in zip(faults, ends):
            for line in fault.report(outcomes, until):
                print(line)
    finally:
        cluster.stop()
        tmp.cleanup()
        sweep_dead_owners()  # the killed worker's shared memory, as its next start does


def _urls(server: RunningServer) -> dict[str, str]:
    return {"http": server.http_url, "grpc": server.grpc_url}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="length of the memory and stub phases")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="a request not answered by then is lost")
    parser.add_argument("--sample-every", type=float, default=30.0,
                        help="RSS sampling period of the memory phase, seconds")
    parser.add_argument("--phases", default="memory,stub,cluster",
                        help="which phases, comma-separated: memory, stub, cluster")
    parser.add_argument("--cluster-seconds", type=float, default=60.0)
    parser.add_argument("--nats-gap", type=float, default=2.0,
                        help="seconds nats-server stays down in the cluster phase")
    parser.add_argument("--settle", type=float, default=3.0,
                        help="seconds idle after a phase's clients, before its 'after' line")
    args = parser.parse_args()
    phases = args.phases.split(",")
    if {"memory", "stub"} & set(phases):
        load = [f"--load-model={m}" for m in MODELS]
        server = RunningServer([ROOT / "models" / "examples"],
                               ["--model-control-mode=explicit", *load, "--log-info=false"])
        try:
            server.wait_ready(120)
            if "memory" in phases:
                phase_memory(server, args)
            if "stub" in phases:
                phase_stub(server, args)
        finally:
            server.stop()
    if "cluster" in phases:
        phase_cluster(args)


if __name__ == "__main__":
    main()
