"""A soak: mixed models from many clients for a set time, then again with a stub killed.

    python bench/soak.py [--seconds 60] [--clients 32] [--timeout 30]

Starts pbserve on models/examples and runs two phases of `--seconds` each, every client
a thread with its own connection, one of three kinds in turn:
- unary: `add_sub` over HTTP;
- decoupled: `repeat` over a gRPC stream (3 responses per request);
- BLS: `bls_pipeline` over gRPC (it calls `add_sub` and `identity`).
In the second phase `add_sub`'s stub is SIGKILLed half-way. For each phase it prints
requests sent, answered, failed (an error, or a wrong answer) and lost (sent, never
answered within `--timeout`), the failures' messages, and the server's RSS (parent and
stubs), open fds and shm entries before and after. Target: 0 lost; 0 failed without a
fault; with one, only the killed stub's in-flight requests fail. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import collections
import os
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pbserve.testing import RunningServer  # noqa: E402
from shm.names import SHM_DIR, owner_of  # noqa: E402

MODELS = ("add_sub", "repeat", "bls_pipeline", "identity")
KINDS = ("unary", "decoupled", "bls")
KILLED = "add_sub"


@dataclass
class Tally:
    sent: int = 0
    answered: int = 0
    failed: int = 0
    lost: int = 0
    errors: collections.Counter = field(default_factory=collections.Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, outcome: str, error: str = "") -> None:
        with self.lock:
            self.sent += 1
            if outcome == "lost":
                self.lost += 1
            else:
                self.answered += 1
            if outcome == "failed":
                self.failed += 1
                self.errors[error[:160]] += 1


def _unary(server: RunningServer, stop: threading.Event, tally: Tally, timeout: float
           ) -> None:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(server.http_url, network_timeout=timeout)
    a = np.arange(16, dtype=np.float32)
    inputs = [httpclient.InferInput(n, [16], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    while not stop.is_set():
        try:
            result = client.infer("add_sub", inputs)
            ok = np.array_equal(result.as_numpy("OUTPUT0"), a + a)
            tally.add("ok" if ok else "failed", "add_sub: wrong answer")
        except Exception as err:  # noqa: BLE001 - every failure is counted
            _count_error(tally, err)
    client.close()


def _bls(server: RunningServer, stop: threading.Event, tally: Tally, timeout: float) -> None:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc_url)
    x = np.arange(16, dtype=np.float32)
    tensor = grpcclient.InferInput("INPUT", [16], "FP32")
    tensor.set_data_from_numpy(x)
    want = 3 * (x - x.mean())
    while not stop.is_set():
        try:
            result = client.infer("bls_pipeline", [tensor], client_timeout=timeout)
            ok = np.allclose(result.as_numpy("OUTPUT"), want)
            tally.add("ok" if ok else "failed", "bls_pipeline: wrong answer")
        except Exception as err:  # noqa: BLE001
            _count_error(tally, err)
    client.close()


def _decoupled(server: RunningServer, stop: threading.Event, tally: Tally, timeout: float
               ) -> None:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc_url)
    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    values = np.array([7, 8, 9], dtype=np.int32)
    tensor = grpcclient.InferInput("IN", [3], "INT32")
    tensor.set_data_from_numpy(values)
    while not stop.is_set():
        client.async_stream_infer("repeat", [tensor])
        got, error = [], ""
        try:
            while len(got) < len(values) and not error:
                result, err = answers.get(timeout=timeout)
                if err is not None:
                    error = str(err)
                else:
                    got.append(int(result.as_numpy("OUT")[0]))
        except queue.Empty:
            tally.add("lost")
            break  # the stream's answers no longer match its requests
        if error:
            tally.add("failed", error)
        else:
            tally.add("ok" if got == values.tolist() else "failed", "repeat: wrong answers")
    client.stop_stream()
    client.close()


def _count_error(tally: Tally, err: Exception) -> None:
    text = str(err)
    timed_out = "timed out" in text.lower() or "deadline" in text.lower()
    tally.add("lost" if timed_out else "failed", text)


RUNNERS = {"unary": _unary, "decoupled": _decoupled, "bls": _bls}


def _children(pid: int) -> list[int]:
    """The server's stubs (its children, or its stub zygote's)."""
    from pbserve.testing import stub_pids

    return stub_pids(pid)


def _stub_of(server_pid: int, model: str) -> int | None:
    for child in _children(server_pid):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--name" in command and \
                command[command.index(b"--name") + 1].decode().startswith(model + "_"):
            return child
    return None


def _rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def snapshot(server_pid: int) -> str:
    """The server's RSS (parent, stubs), fds and shm entries, as one line."""
    stubs = _children(server_pid)
    fds = len(os.listdir(f"/proc/{server_pid}/fd"))
    owned = {server_pid, *stubs}
    entries = [n for n in os.listdir(SHM_DIR) if "pbserve" in n and owner_of(n) in owned]
    shm_bytes = sum(os.stat(os.path.join(SHM_DIR, n)).st_size for n in entries)
    return (f"RSS parent {_rss_mib(server_pid):.1f} MiB, {len(stubs)} stubs "
            f"{sum(_rss_mib(s) for s in stubs):.1f} MiB; fds {fds}; shm entries "
            f"{len(entries)} ({shm_bytes / (1 << 20):.1f} MiB)")


def run_phase(server: RunningServer, name: str, seconds: float, clients: int,
              timeout: float, kill_at: float | None) -> None:
    tallies = {kind: Tally() for kind in KINDS}
    stop = threading.Event()
    threads = [threading.Thread(target=RUNNERS[KINDS[i % 3]], daemon=True,
                                args=(server, stop, tallies[KINDS[i % 3]], timeout))
               for i in range(clients)]
    print(f"\n== {name}: {clients} clients, {seconds:.0f} s")
    print(f"before: {snapshot(server.pid)}")
    started = time.monotonic()
    for thread in threads:
        thread.start()
    killed = None
    if kill_at is not None:
        time.sleep(kill_at)
        killed = _stub_of(server.pid, KILLED)
        if killed is not None:
            os.kill(killed, signal.SIGKILL)
            print(f"killed {KILLED}'s stub (pid {killed}) at {kill_at:.1f} s")
    time.sleep(max(0.0, seconds - (time.monotonic() - started)))
    stop.set()
    for thread in threads:
        thread.join(timeout + 5)
    stuck = sum(thread.is_alive() for thread in threads)
    total = Tally()
    for kind in KINDS:
        t = tallies[kind]
        print(f"{kind:10s} sent {t.sent:7d}  answered {t.answered:7d}  failed {t.failed:4d}"
              f"  lost {t.lost:4d}")
        total.sent += t.sent
        total.answered += t.answered
        total.failed += t.failed
        total.lost += t.lost
        total.errors.update(t.errors)
    print(f"{'all':10s} sent {total.sent:7d}  answered {total.answered:7d}  failed "
          f"{total.failed:4d}  lost {total.lost:4d}  ({total.sent / seconds:.0f} req/s)"
          + (f"; {stuck} clients still waiting" if stuck else ""))
    for message, count in total.errors.most_common(5):
        print(f"  {count} x {message}")
    time.sleep(3.0)  # released blocks and idle regions given back (1-2 s idle)
    print(f"after:  {snapshot(server.pid)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each phase")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="a request not answered by then is lost")
    args = parser.parse_args()
    load = [f"--load-model={m}" for m in MODELS]
    server = RunningServer([ROOT / "models" / "examples"],
                           ["--model-control-mode=explicit", *load, "--log-info=false"])
    try:
        server.wait_ready(60)
        run_phase(server, "no fault", args.seconds, args.clients, args.timeout, None)
        run_phase(server, f"{KILLED}'s stub killed half-way", args.seconds, args.clients,
                  args.timeout, args.seconds / 2)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
