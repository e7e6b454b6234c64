"""Calls made at once from threads, so that the server may batch them."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")


def at_once(call: Callable[[int], T], keys: Sequence[int]) -> dict[int, T]:
    """`call(k)` for each of `keys`, each in its own thread, all started together: their
    results by key; the first error is raised when all have ended."""
    with ThreadPoolExecutor(len(keys)) as pool:
        futures = {k: pool.submit(call, k) for k in keys}
    return {k: future.result() for k, future in futures.items()}
