"""bench/soak.py's memory growth measure (Triton's L0_memory_growth): a process that
leaks is reported over the target, and a short soak of a real server samples the
parent and every stub on every path (HTTP, gRPC unary and stream, decoupled, BLS) and
loses nothing. The 600 s figures are in docs/performance.md."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from soak_memory import TARGET_MIB_PER_MIN, RssSampler, slope_per_minute  # noqa: E402

# Grows 2 MiB every 0.1 s (up to 80 MiB), with a child that does not grow (it has
# started: "ready" comes after its own line, so its start-up is not sampled as growth).
LEAKY = textwrap.dedent("""
    import subprocess, sys, time
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "up"
    print("ready", flush=True)
    kept = []
    for _ in range(40):
        kept.append(bytearray(2 << 20))
        time.sleep(0.1)
    time.sleep(30)
""")


def test_slope_is_the_least_squares_fit_in_mib_a_minute():
    assert slope_per_minute([(0, 10.0), (30, 10.5), (60, 11.0)]) == pytest.approx(1.0)
    assert slope_per_minute([(0, 5.0), (30, 7.0), (60, 3.0), (90, 5.0)]) == \
        pytest.approx(-0.8)
    assert slope_per_minute([(0, 5.0)]) == 0.0


def test_a_leaking_process_is_reported_over_the_target_and_its_child_is_not():
    proc = subprocess.Popen([sys.executable, "-c", LEAKY], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        sampler = RssSampler(proc.pid, 0.25, out=lambda line: None)
        sampler.start()
        time.sleep(1.5)  # 7 samples; the slope is over the last 0.75 s (>= 4 of them)
        sampler.stop()
        slopes = sampler.slopes()
        assert set(slopes) == {"parent", next(n for n in slopes if n.startswith("stub "))}
        assert slopes["parent"] > 100 * TARGET_MIB_PER_MIN
        (child,) = [v for n, v in slopes.items() if n != "parent"]
        assert abs(child) < TARGET_MIB_PER_MIN
        report = "\n".join(sampler.report())
        assert re.search(r"parent\s+\+\d+\.\d+ MiB/min .* OVER", report), report
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def test_a_short_soak_samples_the_parent_and_every_stub_on_every_path():
    """2 s of clients sampled every 0.4 s: 6 samples or more (4 are asked for), and
    every path sent to; no settling before the "after" line, which is not checked."""
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench/soak.py"), "--phases", "memory", "--seconds", "2",
         "--sample-every", "0.4", "--settle", "0", "--clients", "5", "--timeout", "30"],
        capture_output=True, text=True, timeout=180)
    out = run.stdout
    for path in ("http", "grpc", "grpc_stream", "decoupled", "bls"):
        counts = re.search(
            rf"^{path}\s+sent\s+(\d+)\s+answered\s+(\d+)\s+failed\s+(\d+)\s+lost\s+(\d+)",
            out, re.M)
        assert counts is not None, out + run.stderr[-3000:]
        sent, answered, failed, lost = map(int, counts.groups())
        assert sent > 0 and failed == 0 and lost == 0, out
    samples = [line for line in out.splitlines() if "(RSS MiB)" in line]
    assert len(samples) >= 4, out
    for model in ("add_sub", "repeat", "bls_pipeline", "identity"):
        assert f"stub {model}_0_0 " in samples[-1], out
        assert re.search(rf"stub {model}_0_0\s+[+-]\d+\.\d+ MiB/min", out), out
    assert re.search(r"parent\s+[+-]\d+\.\d+ MiB/min", out), out
