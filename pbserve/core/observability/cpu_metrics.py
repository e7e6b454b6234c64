"""Triton's CPU metrics: `nv_cpu_utilization`, `nv_cpu_memory_total_bytes` and
`nv_cpu_memory_used_bytes`, gauges without labels, read from /proc/stat and
/proc/meminfo as Triton's core reads them (src/metrics.cc).

Utilization is the busy share of the CPU time between two polls: user, nice, system,
irq, softirq and steal are busy, idle and iowait are not (the aggregate `cpu` line;
guest time is already in user and nice). Used memory is MemTotal - MemAvailable.
Triton polls every half `--metrics-interval-ms` on a thread of its own; here a task on
the server's loop does (two small file reads a poll). Until the first poll the
utilization is 0, as Triton's; the memory is read at start (Triton's is 0 until then).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("pbserve.core")

PROC_STAT = Path("/proc/stat")
PROC_MEMINFO = Path("/proc/meminfo")
DEFAULT_INTERVAL_MS = 2000  # tritonserver's --metrics-interval-ms

_FAMILIES = (
    ("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]"),
    ("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes"),
    ("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes"),
)


@dataclass(frozen=True)
class CpuTimes:
    """The aggregate line of /proc/stat, in clock ticks (the fields Triton reads)."""

    user: int = 0
    nice: int = 0
    system: int = 0
    idle: int = 0
    iowait: int = 0
    irq: int = 0
    softirq: int = 0
    steal: int = 0


def read_cpu_times(path: str | Path = PROC_STAT) -> CpuTimes:
    """The first line of /proc/stat; OSError or ValueError (Triton's words) if not one."""
    with open(path) as stat:
        line = stat.readline()
    if not line.startswith("cpu "):
        raise ValueError("Failed to find aggregate CPU info in /proc/stat.")
    fields = line.split()[1:9]
    if len(fields) < 4 or not all(f.isdigit() for f in fields):
        raise ValueError("Failed to parse aggregate CPU info in /proc/stat.")
    return CpuTimes(*(int(f) for f in fields))


def read_memory(path: Path = PROC_MEMINFO) -> tuple[int, int]:
    """(total, used) bytes of /proc/meminfo: MemTotal, and MemTotal - MemAvailable."""
    values = {}
    with open(path) as meminfo:
        for line in meminfo:
            name, _, rest = line.partition(":")
            amount = rest.split()
            if amount and amount[0].isdigit():
                values[name] = int(amount[0]) * 1024  # kB
    total, available = values.get("MemTotal"), values.get("MemAvailable")
    if total is None or available is None:
        raise ValueError("Failed to find desired values in /proc/meminfo.")
    if available > total:
        raise ValueError("Available bytes shouldn't be greater than Total bytes")
    return total, total - available


def utilization(new: CpuTimes, old: CpuTimes) -> float | None:
    """The busy share of the ticks between `old` and `new` [0.0 - 1.0]; None when no
    tick passed. A counter that went back counts 0, as Triton's."""
    def passed(field: str) -> int:
        return max(getattr(new, field) - getattr(old, field), 0)

    busy = sum(passed(f) for f in ("user", "nice", "system", "irq", "softirq", "steal"))
    waiting = passed("idle") + passed("iowait")
    return busy / (busy + waiting) if busy + waiting else None


class CpuMetrics:
    """The three gauges, polled every `interval_ms / 2` once started."""

    def __init__(self, interval_ms: int = DEFAULT_INTERVAL_MS) -> None:
        self.interval_ms = interval_ms
        self.utilization = 0.0
        self.memory_total = 0
        self.memory_used = 0
        self._last: CpuTimes | None = None
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """The first reading (utilization's baseline, the memory), then the polling task;
        a /proc file that cannot be read is named in a warning, its gauges stay 0."""
        try:
            self._last = read_cpu_times()
        except (OSError, ValueError) as exc:
            log.warning("error initializing CPU metrics, CPU utilization may not be "
                        "available: %s", exc)
        try:
            self.memory_total, self.memory_used = read_memory()
        except (OSError, ValueError) as exc:
            log.warning("error initializing CPU metrics, CPU memory metrics may not be "
                        "available: %s", exc)
        log.info("Collecting CPU metrics")
        self._task = asyncio.get_running_loop().create_task(self._poll_forever())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.interval_ms / 2000)
            self.poll()

    def poll(self) -> None:
        """One reading: a file that fails now gives 0, as Triton's poll does."""
        try:
            times = read_cpu_times()
        except (OSError, ValueError):
            self.utilization = 0.0
        else:
            if self._last is not None:
                share = utilization(times, self._last)
                if share is not None:  # no tick since the last poll: keep its value
                    self.utilization = share
            self._last = times
        try:
            self.memory_total, self.memory_used = read_memory()
        except (OSError, ValueError):
            self.memory_total = self.memory_used = 0

    def render(self) -> str:
        """The three families in Prometheus text (numbers as Triton prints them)."""
        values = (self.utilization, self.memory_total, self.memory_used)
        lines = []
        for (family, help_text), value in zip(_FAMILIES, values):
            lines += [f"# HELP {family} {help_text}", f"# TYPE {family} gauge",
                      f"{family} {value:.16g}"]
        return "\n".join(lines) + "\n"
