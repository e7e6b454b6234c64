"""The shared memory a stub works in, handed to what needs it (runtime, BLS, responses)
instead of the whole `Stub`."""

from __future__ import annotations

from dataclasses import dataclass

from shm.pool import Pool, RegionMap
from stub.borrowed import BorrowedBlocks
from stub.gpu_memory import GpuMemory


@dataclass(frozen=True, slots=True)
class StubMemory:
    """`pool`: this stub's own blocks (outputs, BLS inputs), freed when the parent gives
    them back; `regions`: the other processes' regions it maps (the parent's pool, other
    stubs', clients' windows, GPU memory by CUDA IPC); `borrowed`: blocks of theirs it
    hands on as outputs; `gpu`: its CUDA pools (stub/gpu_memory.py), used only once a
    GPU tensor comes or goes. Each is safe to use from any thread."""

    pool: Pool
    regions: RegionMap
    borrowed: BorrowedBlocks
    gpu: GpuMemory
