"""A bounded message queue in shared memory: a ring of slots and two semaphores.

One process produces, one consumes (threads of the producer share a lock). Messages are
byte strings of any length up to the ring's size; each takes `ceil((4 + len) / SLOT)`
consecutive slots (a 4-byte little-endian length, then the bytes, wrapping around the
end of the ring). The `empty` semaphore counts free slots and gives back-pressure: a
producer waits for room. The `items` semaphore counts whole messages. Head and tail are
private to producer and consumer, so the ring itself needs no lock. A wait that a signal
handler interrupts (EINTR) goes on, or ends a `get` with a timeout early (as a timeout).

Every slot costs a semaphore operation on each side, so SLOT is sized for the common
message (an EXECUTE or RESPONSES of a request or two, 100-250 bytes) to take one slot.
"""

from __future__ import annotations

import struct
import threading
import time

import posix_ipc

from shm.region import Region

SLOT = 256
DEFAULT_CAPACITY = 1 << 20
_LEN = struct.Struct("<I")
_SLOT_ROUND = _LEN.size + SLOT - 1  # slots of a message: (len + _SLOT_ROUND) // SLOT
# get(0) asks the semaphore's value first: an empty queue then costs no BusyError.
_PEEK = posix_ipc.SEMAPHORE_VALUE_SUPPORTED


class QueueFull(TimeoutError):
    """No room in the queue within the timeout."""


class QueueClosed(RuntimeError):
    """The queue's semaphores are gone (its owner closed it)."""


class MessageQueue:
    """`put` bytes on one side, `get` them on the other."""

    def __init__(self, name: str, region: Region, empty: posix_ipc.Semaphore,
                 items: posix_ipc.Semaphore) -> None:
        self.name = name
        self._region = region
        self._ring = region.map
        self._nslots = region.size // SLOT
        self._ring_size = self._nslots * SLOT
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
        return self._ring_size - _LEN.size

    def put(self, message: bytes, timeout: float | None = None) -> bool:
        """Append `message`; wait for room up to `timeout` s (None: forever). True when
        it is the only message waiting: the queue was empty, so a consumer that sleeps
        until told (shm/doorbell.py) must be told. False when an earlier one is still
        unread: the consumer's pass that takes it reads this one too (it reads until
        the queue is empty), so no wake-up is lost by not ringing."""
        length = len(message)
        need = (length + _SLOT_ROUND) // SLOT
        if need > self._nslots:
            raise ValueError(f"message of {length} bytes exceeds queue {self.name} "
                             f"capacity of {self.max_message} bytes")
        with self._put_lock:
            if need == 1 and timeout is None:
                try:
                    self._empty.acquire()  # the common case, without _reserve's bookkeeping
                except posix_ipc.SignalError:  # a signal handler ran: wait on
                    self._reserve(1, None)
            else:
                self._reserve(need, timeout)
            start = self._head * SLOT
            # A slot holds the 4-byte length whole: only the body may wrap.
            _LEN.pack_into(self._ring, start, length)
            body = start + _LEN.size
            if body + length <= self._ring_size:
                self._ring[body:body + length] = message
            else:
                first = self._ring_size - body
                self._ring[body:self._ring_size] = message[:first]
                self._ring[:length - first] = message[first:]
            head = self._head + need
            self._head = head if head < self._nslots else head - self._nslots
            self._items.release()
            # Under the lock: two threads putting at once must not both see the other's.
            return not _PEEK or self._items.value <= 1

    def get(self, timeout: float | None = None) -> bytes | None:
        """The next message, or None when none came within `timeout` s (0: don't wait)."""
        items = self._items
        try:
            if timeout == 0 and _PEEK and items.value == 0:
                return None
            items.acquire(timeout)
        except posix_ipc.BusyError:
            return None
        except posix_ipc.SignalError:  # a signal handler ran: early, as a timeout
            return None if timeout is not None else self.get()
        except posix_ipc.ExistentialError:
            raise QueueClosed(self.name) from None
        start = self._tail * SLOT
        (length,) = _LEN.unpack_from(self._ring, start)
        body = start + _LEN.size
        end = body + length
        if end <= self._ring_size:
            message = self._ring[body:end]
        else:
            message = self._ring[body:self._ring_size] + self._ring[:end - self._ring_size]
        need = (length + _SLOT_ROUND) // SLOT
        tail = self._tail + need
        self._tail = tail if tail < self._nslots else tail - self._nslots
        release = self._empty.release
        for _ in range(need):
            release()
        return message

    def pending(self) -> bool:
        """Whether a message waits (no syscall: sem_getvalue reads the semaphore's word);
        what a consumer polls before it sleeps."""
        return self._items.value > 0

    def _reserve(self, need: int, timeout: float | None) -> None:
        """Take `need` slots of room, all within `timeout` (or none: QueueFull)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        taken = 0
        try:
            while taken < need:
                try:
                    self._empty.acquire(
                        None if deadline is None else max(0.0, deadline - time.monotonic()))
                except posix_ipc.SignalError:  # a signal handler ran: wait on
                    continue
                taken += 1
        except posix_ipc.BusyError:
            for _ in range(taken):
                self._empty.release()
            raise QueueFull(f"queue {self.name} stayed full for {timeout} s") from None

    def wake(self) -> bool:
        """Producer side only: an empty message, so a consumer blocked in `get` returns
        (what `put` returns)."""
        return self.put(b"")

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
