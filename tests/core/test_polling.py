"""Polling instead of sleeping (pbserve/core/latency): the machine's spare CPU as
/proc/stat tells it, with the parent's own polling counted as idle, and the event loop's
linger after a request."""

from __future__ import annotations

import asyncio
import os

from pbserve.core.latency import linger as linger_module
from pbserve.core.latency import spare_cpu
from pbserve.core.latency.linger import Linger
from pbserve.core.latency.spare_cpu import SpareCpu

TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def test_spare_cpu_reads_the_idle_share_of_proc_stat(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 100 100 0 0 0 0 0 0\ncpu0 1 2 3\n")
    monkeypatch.setattr(spare_cpu, "SAMPLE_NS", 0)
    cpu = SpareCpu(str(stat))
    stat.write_text("cpu  110 0 110 180 0 0 0 0 0 0\n")  # idle 80 of 100 ticks
    assert cpu.spare()
    stat.write_text("cpu  190 0 190 190 10 0 0 0 0 0\n")  # idle 20 of 180 (iowait counts)
    assert not cpu.spare()
    stat.write_text("cpu  240 0 240 190 10 0 0 0 0 0\n")  # idle 0 of 100 ...
    cpu.credit(30 * TICK_NS)  # ... but 30 of them this process polled, yielding
    assert cpu.spare()
    stat.write_text("cpu  290 0 290 190 10 0 0 0 0 0\n")  # the credit went with its sample
    assert not cpu.spare()
    assert not SpareCpu(str(tmp_path / "missing")).spare()  # unreadable: never


class _Machine:
    def __init__(self, spare: bool) -> None:
        self.value = spare
        self.credited = 0

    def spare(self) -> bool:
        return self.value

    def credit(self, ns: int) -> None:
        self.credited += ns


async def test_the_loop_lingers_after_a_request_only_while_cpu_is_spare(monkeypatch):
    monkeypatch.setattr(linger_module, "LINGER_NS", 30_000_000)
    machine = _Machine(spare=False)
    linger = Linger(machine)  # type: ignore[arg-type]
    linger.after_request()
    assert not linger._turning  # no spare CPU: the loop sleeps as usual

    machine.value = True
    loop = asyncio.get_running_loop()
    start = loop.time()
    linger.after_request()
    linger.after_request()  # a second request extends the one chain of turns
    assert linger._turning
    ticks = 0
    while linger._turning:  # other work runs between its turns
        ticks += 1
        await asyncio.sleep(0)
    assert loop.time() - start >= 0.03
    assert ticks > 10
    assert machine.credited > 0  # its idle turns were counted as idle CPU
