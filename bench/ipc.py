"""IPC cost of pbserve's parent <-> stub hop, against its floor, measured in one run.

    python bench/ipc.py [--seconds 2]

(a) the floor: a two-process posix-semaphore ping-pong, and memcpy bandwidth into shm;
(b) a parent -> stub -> parent `execute` round trip (Model.infer on the parent's event
    loop, identity model) with a 16-float tensor and with a 64 MiB tensor, and the bare
    hop (EXECUTE -> RESPONSES with the parent thread blocking on the up queue);
(c) the same `execute` called in-process (pb_utils objects, no IPC).
Prints each figure (the median over slices of the run) and the ratios to the floor, and
the CPU time each side spends on a small call. Nothing is asserted.

The floor is measured in slices alternating with those of the small calls, and each ratio
is the median of per-slice ratios: on a VM the cost of waking the other vCPU changes over
minutes (5 us or 12 us a ping-pong here, as the host idles it or not), and a figure is
only comparable with the floor taken at the same time. The spread of the floor over the
run is printed with it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import posix_ipc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pbserve.core.manager import ModelManager  # noqa: E402
from pbserve.core.instances.stub_process import stub_environment  # noqa: E402
from pbserve.core.types import InferRequest, TensorData  # noqa: E402
from shm.names import new_prefix, unlink_prefix  # noqa: E402
from proc_cpu import cpu_s  # noqa: E402
from shm.pool import Pool, RegionMap  # noqa: E402
from shm.queue import MessageQueue  # noqa: E402
from stub import protocol as p  # noqa: E402
from stub.stub import queue_names  # noqa: E402
from shm.region import Region  # noqa: E402

MIB = 1 << 20
BIG = 64 * MIB
MODEL = '''
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
'''
CONFIG = '''
name: "ident"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
'''


CHUNKS = 20  # a figure is the median of the mean call time over this many chunks


def timed(fn, seconds: float, min_iters: int = 3) -> float:
    """Seconds per call of `fn`: the median over CHUNKS slices of about `seconds` in all
    (after one warm-up call), so that a scheduling hiccup of the 2-core VM moves a
    figure less than a mean would."""
    fn()
    return statistics.median(_slice(fn, seconds / CHUNKS, min_iters) for _ in range(CHUNKS))


def pin_process(pid: int, cpu: int | None) -> None:
    """Every thread of `pid` on `cpu` (affinity is per thread on Linux; threads started
    later inherit it from their creator). None: leave it to the scheduler."""
    if cpu is not None:
        for tid in os.listdir(f"/proc/{pid}/task"):
            os.sched_setaffinity(int(tid), {cpu})


class PingPong:
    """The floor: a partner process that answers each post of one posix semaphore with a
    post of another. It waits between slices, so the floor can be measured in slices
    alternating with another measurement's."""

    def __init__(self, cpu: int | None) -> None:
        prefix = new_prefix()
        self._ping = posix_ipc.Semaphore(prefix + "-a", posix_ipc.O_CREX, 0o600, 0)
        self._pong = posix_ipc.Semaphore(prefix + "-b", posix_ipc.O_CREX, 0o600, 0)
        self._pid = os.fork()
        if self._pid == 0:
            try:
                pin_process(os.getpid(), cpu)
                while True:
                    self._ping.acquire()
                    self._pong.release()
            finally:
                os._exit(0)

    def round_trip(self) -> None:
        self._ping.release()
        self._pong.acquire()

    def close(self) -> None:
        os.kill(self._pid, 9)
        os.waitpid(self._pid, 0)
        for sem in (self._ping, self._pong):
            sem.unlink()


class Paired(NamedTuple):
    """A figure measured in slices alternating with the floor's: medians in seconds, and
    the median of the per-slice ratios."""

    floor: float
    value: float
    ratio: float
    floor_low: float  # the floor's lowest and highest slice
    floor_high: float


def _slice(fn, seconds: float, min_iters: int = 3) -> float:
    n, start = 0, time.perf_counter()
    while n < min_iters or time.perf_counter() - start < seconds:
        fn()
        n += 1
    return (time.perf_counter() - start) / n


async def _async_slice(fn, seconds: float, min_iters: int = 3) -> float:
    n, start = 0, time.perf_counter()
    while n < min_iters or time.perf_counter() - start < seconds:
        await fn()
        n += 1
    return (time.perf_counter() - start) / n


def _paired(floors: list[float], values: list[float]) -> Paired:
    return Paired(statistics.median(floors), statistics.median(values),
                  statistics.median(v / f for f, v in zip(floors, values)),
                  min(floors), max(floors))


def paired(fn, floor: PingPong, seconds: float) -> Paired:
    """`fn` per call against the floor, each over CHUNKS slices taking turns."""
    fn()
    floors, values = [], []
    for _ in range(CHUNKS):
        floors.append(_slice(floor.round_trip, seconds / CHUNKS / 2))
        values.append(_slice(fn, seconds / CHUNKS / 2))
    return _paired(floors, values)


async def async_paired(fn, floor: PingPong, seconds: float) -> Paired:
    """`paired` for a coroutine function."""
    await fn()
    floors, values = [], []
    for _ in range(CHUNKS):
        floors.append(_slice(floor.round_trip, seconds / CHUNKS / 2))
        values.append(await _async_slice(fn, seconds / CHUNKS / 2))
    return _paired(floors, values)


def memcpy_bandwidth(seconds: float) -> float:
    region = Region.create(new_prefix() + "-bench", BIG)
    try:
        dst = np.frombuffer(region.view(0, BIG), np.uint8)
        src = np.ones(BIG, np.uint8)
        per_copy = timed(lambda: np.copyto(dst, src), seconds)
        dst = None  # the view must go before the region is closed
        return BIG / per_copy
    finally:
        region.unlink()
        region.close()


def request(array: np.ndarray) -> InferRequest:
    return InferRequest("ident", inputs=[TensorData("INPUT0", "FP32", array.shape,
                                                    memoryview(array).cast("B"))])


async def parent_stub_round_trips(repo: Path, seconds: float, stub_cpu: int | None,
                                  floor: PingPong) -> tuple[Paired, float, tuple]:
    """Model.infer on the parent's event loop: the small call against the floor, the big
    call's seconds, and the CPU seconds per small call of (the parent, the stub)."""
    manager = ModelManager([repo])
    await manager.start()
    try:
        small, big = np.arange(16, dtype=np.float32), np.ones(BIG // 4, np.float32)
        stub_pid = manager.model("ident").instances[0].pid
        pin_process(stub_pid, stub_cpu)

        async def once(array: np.ndarray) -> None:
            response = await manager.infer(request(array))
            assert response.error is None, response.error
            response.release()

        small_call = await async_paired(lambda: once(small), floor, seconds)
        await once(big)
        big_call = statistics.median([await _async_slice(lambda: once(big), seconds / CHUNKS)
                                      for _ in range(CHUNKS)])
        n = 5000
        parent0, stub0 = time.process_time(), cpu_s(stub_pid)
        for _ in range(n):
            await once(small)
        cpu = ((time.process_time() - parent0) / n, (cpu_s(stub_pid) - stub0) / n)
        return small_call, big_call, cpu
    finally:
        await manager.stop()


def direct_hop(repo: Path, seconds: float, stub_cpu: int | None, floor: PingPong) -> Paired:
    """EXECUTE -> RESPONSES with the parent blocking on the up queue itself: the hop
    without the event loop's thread handoff (what a synchronous parent would pay)."""
    prefix = new_prefix()
    main_name, control_name, up_name = queue_names(prefix)
    queues = [MessageQueue.create(n) for n in (main_name, control_name, up_name)]
    main_q, _, up_q = queues
    pool = Pool(prefix + "-parent")
    regions = RegionMap()
    proc = subprocess.Popen([sys.executable, "-m", "stub", "--prefix", prefix, "--parent-pid",
                             str(os.getpid()), "--name", "ident_0_0"], env=stub_environment())
    pin_process(proc.pid, stub_cpu)  # before the stub starts any thread
    try:
        assert p.decode(up_q.get(30))[0] == p.READY
        main_q.put(p.encode(p.init({}, str(repo / "ident" / "1" / "model.py"), False)))
        assert p.decode(up_q.get(30))[:2] == (p.INIT_DONE, None)
        small = np.arange(16, dtype=np.float32)
        frees: list = []

        def round_trip() -> None:
            block = pool.alloc(small.nbytes)
            np.frombuffer(pool.view(block), np.float32)[:] = small
            desc = ("INPUT0", "FP32", (16,), block.region, block.offset, small.nbytes)
            request = p.request_msg(key=1, request_id="", correlation_id=0, flags=0,
                                    parameters_json="{}", timeout_us=0, requested=None,
                                    inputs=(desc,), lendable=False, output_shm=None)
            main_q.put(p.encode(p.execute(1, (request,), tuple(frees))))
            frees.clear()
            reply = p.decode(up_q.get(10))
            (_, (_, outputs, _)), = reply[3]
            name, _, shape, region, offset, nbytes = outputs[0]
            out = np.frombuffer(regions.view(region, offset, nbytes), np.float32)
            assert out[1] == 1.0
            frees.append((region, offset))
            pool.free(block.region, block.offset)

        return paired(round_trip, floor, seconds)
    finally:
        proc.kill()
        proc.wait()
        for queue in queues:
            queue.unlink()
            queue.close()
        pool.close()
        regions.close()
        unlink_prefix(prefix)


def in_process(repo: Path, seconds: float) -> tuple[float, float]:
    import importlib.util

    import triton_python_backend_utils as pb_utils

    spec = importlib.util.spec_from_file_location("bench_ident", repo / "ident" / "1" / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.TritonPythonModel()
    results = []
    for array in (np.arange(16, dtype=np.float32), np.ones(BIG // 4, np.float32)):
        def call(array: np.ndarray = array) -> None:
            req = pb_utils.InferenceRequest(
                model_name="ident", inputs=[pb_utils.Tensor("INPUT0", array)],
                requested_output_names=["OUTPUT0"])
            out = model.execute([req])[0].output_tensors()[0].as_numpy()
            assert out.nbytes == array.nbytes
        results.append(timed(call, seconds))
    return results[0], results[1]


PLACEMENTS = (("different cores", 0, 1), ("one core", 0, 0), ("unpinned", None, None))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    args = parser.parse_args()
    try:
        import uvloop
        run = uvloop.run
    except ImportError:
        run = asyncio.run
    cpus = sorted(os.sched_getaffinity(0))
    placements = [(name, None if p is None else cpus[p], None if c is None else cpus[c])
                  for name, p, c in PLACEMENTS if len(cpus) > 1 or c != 1]
    own_affinity = os.sched_getaffinity(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        (repo / "ident" / "1").mkdir(parents=True)
        (repo / "ident" / "config.pbtxt").write_text(CONFIG)
        (repo / "ident" / "1" / "model.py").write_text(MODEL)
        try:
            for name, parent_cpu, stub_cpu in placements:
                os.sched_setaffinity(0, own_affinity if parent_cpu is None else {parent_cpu})
                floor = PingPong(stub_cpu)
                try:
                    hop = direct_hop(repo, args.seconds, stub_cpu, floor)
                    small, big, cpu = run(parent_stub_round_trips(repo, args.seconds,
                                                                  stub_cpu, floor))
                finally:
                    floor.close()
                rows.append((name, hop, small, big, cpu))
        finally:
            os.sched_setaffinity(0, own_affinity)
        bandwidth = memcpy_bandwidth(args.seconds)
        local_small, local_big = in_process(repo, args.seconds)

    print("Parent and stub (and the ping-pong partner) placed on:")
    for name, hop, small, big, (parent_cpu_s, stub_cpu_s) in rows:
        big_bw = BIG / big
        print(f"  {name}:")
        for label, figure in (("ping-pong slices beside the hop", hop),
                              ("ping-pong slices beside the call", small)):
            print(f"(a) semaphore ping-pong round trip      {figure.floor * 1e6:9.1f} us   "
                  f"(floor; {figure.floor_low * 1e6:.1f}-{figure.floor_high * 1e6:.1f} us "
                  f"over its {label})")
            if figure is hop:
                print(f"(b) stub hop, parent blocking on queue  {hop.value * 1e6:9.1f} us   "
                      f"= {hop.ratio:.2f}x the ping-pong")
        print(f"(b) parent->stub->parent, 16 x FP32     {small.value * 1e6:9.1f} us   "
              f"= {small.ratio:.2f}x the ping-pong  (target <= 3x); "
              f"{(small.value - small.floor) * 1e6:.1f} us above it")
        print(f"    CPU per 16 x FP32 call: parent {parent_cpu_s * 1e6:.1f} us, "
              f"stub {stub_cpu_s * 1e6:.1f} us")
        print(f"(b) parent->stub->parent, 64 MiB        {big * 1e3:9.2f} ms   "
              f"= {big_bw / 1e9:.2f} GB/s = {big_bw / bandwidth:.2f}x memcpy  "
              f"(target >= 0.5x)")
    print(f"(a) memcpy into shm                     {bandwidth / 1e9:9.2f} GB/s (floor)")
    print(f"(c) in-process execute, 16 x FP32       {local_small * 1e6:9.1f} us")
    print(f"(c) in-process execute, 64 MiB          {local_big * 1e3:9.2f} ms")


if __name__ == "__main__":
    main()
