"""A bounded message queue in shared memory: a ring of slots and two semaphores.

One process produces, one consumes (threads of the producer share a lock). Messages are
byte strings of any length up to the ring's size; each takes `ceil((4 + len) / SLOT)`
consecutive slots (a 4-byte little-endian length, then the bytes, wrapping around the
end of the ring). The `empty` semaphore counts free slots and gives back-pressure: a
producer waits for room. The `items` semaphore counts whole messages. Head and tail are
private to producer and consumer, so the ring itself needs no lock.
"""

from __future__ import annotations

import struct
import threading
import time

import posix_ipc

from shm.region import Region

SLOT = 64
DEFAULT_CAPACITY = 1 << 20
_LEN = struct.Struct("<I")


class QueueFull(TimeoutError):
    """No room in the queue within the timeout."""


class QueueClosed(RuntimeError):
    """The queue's semaphores are gone (its owner closed it)."""


def _slots(nbytes: int) -> int:
    return -(-(nbytes + _LEN.size) // SLOT)


class MessageQueue:
    """`put` bytes on one side, `get` them on the other."""

    def __init__(self, name: str, region: Region, empty: posix_ipc.Semaphore,
                 items: posix_ipc.Semaphore) -> None:
        self.name = name
        self._region = region
        self._ring = region.map
        self._nslots = region.size // SLOT
        self._empty = empty
        self._items = items
        self._head = 0
        self._tail = 0
        self._put_lock = threading.Lock()

    @classmethod
    def create(cls, name: str, capacity: int = DEFAULT_CAPACITY) -> "MessageQueue":
        nslots = max(2, capacity // SLOT)
        region = Region.create(name, nslots * SLOT)
        empty = posix_ipc.Semaphore(name + "-e", posix_ipc.O_CREX, 0o600, nslots)
        items = posix_ipc.Semaphore(name + "-i", posix_ipc.O_CREX, 0o600, 0)
        return cls(name, region, empty, items)

    @classmethod
    def attach(cls, name: str) -> "MessageQueue":
        region = Region.attach(name)
        return cls(name, region, posix_ipc.Semaphore(name + "-e"),
                   posix_ipc.Semaphore(name + "-i"))

    @property
    def max_message(self) -> int:
        return self._nslots * SLOT - _LEN.size

    def put(self, message: bytes, timeout: float | None = None) -> None:
        """Append `message`; wait for room up to `timeout` s (None: forever)."""
        need = _slots(len(message))
        if need > self._nslots:
            raise ValueError(f"message of {len(message)} bytes exceeds queue {self.name} "
                             f"capacity of {self.max_message} bytes")
        with self._put_lock:
            self._reserve(need, timeout)
            start = self._head * SLOT
            self._write(start, _LEN.pack(len(message)))
            self._write((start + _LEN.size) % (self._nslots * SLOT), message)
            self._head = (self._head + need) % self._nslots
            self._items.release()

    def get(self, timeout: float | None = None) -> bytes | None:
        """The next message, or None when none came within `timeout` s (0: don't wait)."""
        try:
            self._items.acquire(timeout)
        except posix_ipc.BusyError:
            return None
        except posix_ipc.ExistentialError:
            raise QueueClosed(self.name) from None
        ring_size = self._nslots * SLOT
        start = self._tail * SLOT
        (length,) = _LEN.unpack(self._read(start, _LEN.size))
        message = self._read((start + _LEN.size) % ring_size, length)
        need = _slots(length)
        self._tail = (self._tail + need) % self._nslots
        for _ in range(need):
            self._empty.release()
        return message

    def _reserve(self, need: int, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        taken = 0
        try:
            while taken < need:
                self._empty.acquire(
                    None if deadline is None else max(0.0, deadline - time.monotonic()))
                taken += 1
        except posix_ipc.BusyError:
            for _ in range(taken):
                self._empty.release()
            raise QueueFull(f"queue {self.name} stayed full for {timeout} s") from None

    def _write(self, pos: int, data: bytes) -> None:
        ring_size = self._nslots * SLOT
        first = min(len(data), ring_size - pos)
        self._ring[pos:pos + first] = data[:first]
        if first < len(data):
            self._ring[0:len(data) - first] = data[first:]

    def _read(self, pos: int, nbytes: int) -> bytes:
        ring_size = self._nslots * SLOT
        end = pos + nbytes
        if end <= ring_size:
            return self._ring[pos:end]
        return self._ring[pos:ring_size] + self._ring[0:end - ring_size]

    def wake(self) -> None:
        """Producer side only: an empty message, so a consumer blocked in `get` returns."""
        self.put(b"")

    def close(self) -> None:
        for sem in (self._empty, self._items):
            try:
                sem.close()
            except posix_ipc.ExistentialError:
                pass
        self._region.close()

    def unlink(self) -> None:
        """Remove the names (creator's job); mappings stay valid until closed."""
        self._region.unlink()
        for sem in (self._empty, self._items):
            try:
                posix_ipc.unlink_semaphore(sem.name)  # by name: works after close() too
            except posix_ipc.ExistentialError:
                pass
