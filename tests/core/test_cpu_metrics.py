"""Triton's CPU metrics (nv_cpu_utilization, nv_cpu_memory_total_bytes,
nv_cpu_memory_used_bytes): /proc parsed as Triton's core parses it, the flags that turn
them off, and a real server's /metrics polling them on --metrics-interval-ms."""

from __future__ import annotations

import re
import time
import urllib.request

import pytest

from pbserve.cli.parser import build_parser
from pbserve.cli.settings import core_options
from pbserve.core.manager import ModelManager
from pbserve.core.observability.cpu_metrics import (
    CpuMetrics, CpuTimes, read_cpu_times, read_memory, utilization)
from pbserve.core.options import CoreOptions
from pbserve.testing import running_server

STAT = "cpu  100 5 50 800 20 3 2 1 7 0\ncpu0 50 2 25 400 10 1 1 0 3 0\nintr 1\n"
MEMINFO = "MemTotal:       16000 kB\nMemFree:         2000 kB\nMemAvailable:    6000 kB\n"


def test_proc_files_are_read_as_triton_reads_them(tmp_path):
    (tmp_path / "stat").write_text(STAT)
    (tmp_path / "meminfo").write_text(MEMINFO)
    assert read_cpu_times(tmp_path / "stat") == CpuTimes(100, 5, 50, 800, 20, 3, 2, 1)
    assert read_memory(tmp_path / "meminfo") == (16000 * 1024, 10000 * 1024)
    (tmp_path / "stat").write_text("intr 1\n")
    with pytest.raises(ValueError, match="Failed to find aggregate CPU info"):
        read_cpu_times(tmp_path / "stat")
    (tmp_path / "meminfo").write_text("MemTotal: 1 kB\n")
    with pytest.raises(ValueError, match="Failed to find desired values"):
        read_memory(tmp_path / "meminfo")


def test_utilization_is_the_busy_share_of_the_ticks_between_polls():
    old = CpuTimes(100, 0, 100, 700, 100, 0, 0, 0)
    new = CpuTimes(130, 10, 110, 740, 110, 0, 0, 0)  # busy 50, idle + iowait 50
    assert utilization(new, old) == 0.5
    assert utilization(old, old) is None  # no tick: the gauge keeps its value
    assert utilization(CpuTimes(user=90, idle=710), CpuTimes(user=100, idle=700)) == 0.0


def test_render_is_three_unlabelled_gauges():
    gauges = CpuMetrics()
    gauges.utilization, gauges.memory_total, gauges.memory_used = 0.25, 16 << 30, 5 << 30
    text = gauges.render()
    assert "# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]\n" \
           "# TYPE nv_cpu_utilization gauge\nnv_cpu_utilization 0.25\n" in text
    assert f"nv_cpu_memory_total_bytes {16 << 30}\n" in text
    assert "# HELP nv_cpu_memory_used_bytes CPU used memory (RAM), in bytes" in text


@pytest.mark.parametrize("flags, on", [
    ([], True), (["--allow-cpu-metrics", "false"], False),
    (["--allow-metrics", "false"], False)])
def test_allow_cpu_metrics_needs_allow_metrics_too(flags, on):
    args = build_parser().parse_args(["--model-repository", "/tmp", *flags])
    assert core_options(args).cpu_metrics is on


def test_a_core_shows_them_unless_told_not_to(tmp_path):
    assert "\nnv_cpu_utilization 0\n" in ModelManager([tmp_path]).metrics_text()
    assert "nv_cpu" not in ModelManager([tmp_path], CoreOptions(cpu_metrics=False)
                                        ).metrics_text()


def _gauges(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return {name: float(value) for name, value in
            re.findall(r"^(nv_cpu_\w+) (\S+)$", text, re.MULTILINE)}


def test_a_server_polls_cpu_metrics_on_its_interval(tmp_path):
    with running_server(tmp_path, args=["--metrics-interval-ms", "100"]) as server:
        first = _gauges(server.metrics_url)
        assert set(first) == {"nv_cpu_utilization", "nv_cpu_memory_total_bytes",
                              "nv_cpu_memory_used_bytes"}
        assert 0 < first["nv_cpu_memory_used_bytes"] < first["nv_cpu_memory_total_bytes"]
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:  # the host busy between two polls
            pass
        later = _gauges(server.metrics_url)
        assert 0 < later["nv_cpu_utilization"] <= 1  # 0 until a poll has run
