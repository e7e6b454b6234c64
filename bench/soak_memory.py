"""Memory growth as Triton's L0_memory_growth checks it: the RSS of a server's parent and
of each of its stubs, sampled at a fixed period, and the slope of a least-squares line
through the second half of each process's samples (MiB a minute)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable

TARGET_MIB_PER_MIN = 1.0


def _direct_children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(c) for c in text.split()]


def children(pid: int) -> list[int]:
    """The processes below `pid` (a server's stubs): its children, a stub zygote's
    (stub/zygote.py) in place of the zygote."""
    found = []
    for child in _direct_children(pid):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"\0-m\0stub.zygote\0" in command:
            found += _direct_children(child)
        else:
            found.append(child)
    return found


def stub_name(pid: int) -> str:
    """A stub's `--name` (its model instance), or its pid if it has none."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return str(pid)
    if b"--name" in command:
        return command[command.index(b"--name") + 1].decode()
    return str(pid)


def rss_mib(pid: int) -> float:
    """VmRSS of `pid` in MiB (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def slope_per_minute(samples: list[tuple[float, float]]) -> float:
    """The least-squares slope of (seconds, MiB) points, in MiB a minute."""
    n = len(samples)
    if n < 2:
        return 0.0
    mean_t = sum(t for t, _ in samples) / n
    mean_m = sum(m for _, m in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    if var == 0:
        return 0.0
    cov = sum((t - mean_t) * (m - mean_m) for t, m in samples)
    return cov / var * 60.0


class RssSampler:
    """Samples `pid` and its children every `period_s` in a thread; prints each sample."""

    def __init__(self, pid: int, period_s: float, out: Callable[[str], None] = print) -> None:
        self.pid = pid
        self.period_s = period_s
        self.series: dict[str, list[tuple[float, float]]] = {}  # process -> (s, MiB)
        self._out = out
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="rss-sampler")
        self._started = 0.0

    def start(self) -> None:
        self._started = time.monotonic()
        self.sample()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.sample()

    def sample(self) -> None:
        now = time.monotonic() - self._started
        row = {"parent": rss_mib(self.pid)}
        row.update({f"stub {stub_name(c)}": rss_mib(c) for c in children(self.pid)})
        for name, mib in row.items():
            self.series.setdefault(name, []).append((now, mib))
        self._out(f"  t={now:6.0f} s  " + ", ".join(f"{n} {m:.1f}" for n, m in row.items())
                  + " (RSS MiB)")

    def slopes(self) -> dict[str, float]:
        """Each process's slope over the second half of the run, MiB a minute."""
        result = {}
        for name, points in self.series.items():
            end = points[-1][0]
            result[name] = slope_per_minute([p for p in points if p[0] >= end / 2])
        return result

    def report(self) -> list[str]:
        lines = ["RSS slope over the second half (least squares), target under "
                 f"{TARGET_MIB_PER_MIN:.0f} MiB/min:"]
        for name, slope in self.slopes().items():
            first, last = self.series[name][0][1], self.series[name][-1][1]
            verdict = "ok" if slope < TARGET_MIB_PER_MIN else "OVER"
            lines.append(f"  {name:32s} {slope:+7.3f} MiB/min  ({first:.1f} -> {last:.1f} "
                         f"MiB)  {verdict}")
        return lines
