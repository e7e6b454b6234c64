"""Back-pressure: requests the transport has read and the servicer not yet answered,
bounded per connection and per server. A connection past either bound stops reading
(asyncio's pause_reading): zttp then credits no more of the client's HTTP/2 window and
the socket's buffers fill, so the client's sends block. It reads again once its own
count and the server's are back to half their bounds. Paused connections are resumed
in the order they were paused: a resumed one reads what it holds at once and may take
the server past its bound again, so the longest waiting goes first, and a connection
that keeps the server busy waits behind the others (none is starved).
"""

from __future__ import annotations

from typing import Protocol


class Reader(Protocol):
    """What the bound needs of a connection (a GrpcConnection)."""

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class PendingRequests:
    """One server's count of requests read and not answered, and each connection's."""

    def __init__(self, per_connection: int, total: int) -> None:
        self.per_connection = per_connection
        self.total = total
        self.count = 0
        self._counts: dict[Reader, int] = {}
        self._readers: set[Reader] = set()
        self._paused: dict[Reader, None] = {}  # in the order they were paused
        self._over = False  # the server reached `total`: reading resumes at half of it

    def of(self, reader: Reader) -> int:
        return self._counts.get(reader, 0)

    def add(self, reader: Reader) -> None:
        """A new connection (paused at once if the server is past its bound)."""
        self._readers.add(reader)
        if self._over:
            self._pause(reader)

    def take(self, reader: Reader, n: int = 1) -> None:
        """`reader` has read `n` more requests."""
        mine = self._counts[reader] = self._counts.get(reader, 0) + n
        self.count += n
        if self.count >= self.total and not self._over:
            self._over = True  # every connection stops, not just this one
            for other in list(self._readers):
                self._pause(other)
        if mine >= self.per_connection:
            self._pause(reader)

    def give(self, reader: Reader, n: int = 1) -> None:
        """`n` of `reader`'s requests have answered (or were dropped)."""
        mine = self._counts.get(reader, 0) - n
        if mine > 0:
            self._counts[reader] = mine
        else:
            self._counts.pop(reader, None)
        self.count -= n
        if not self._paused:
            return
        readers = [reader]
        if self._over:
            if self.count > self.total // 2:
                return
            self._over = False  # the server is back to half its bound: every reader
            readers = list(self._paused)
        self._resume(readers)

    def forget(self, reader: Reader) -> None:
        """`reader` is closed: its requests no longer count, and it is never resumed."""
        self.count -= self._counts.pop(reader, 0)
        self._readers.discard(reader)
        self._paused.pop(reader, None)
        if self._over and self.count <= self.total // 2:
            self._over = False
            self._resume(list(self._paused))

    def _resume(self, readers: list[Reader]) -> None:
        """Resume those of `readers` back under their own bound, in their order. A
        resumed reader reads at once, and may take the server past its bound again: then
        the rest wait (first in line next time)."""
        for paused in readers:
            if self._over:
                return
            if paused in self._paused and self.of(paused) <= self.per_connection // 2:
                del self._paused[paused]
                paused.resume_reading()

    def _pause(self, reader: Reader) -> None:
        if reader not in self._paused:
            self._paused[reader] = None
            reader.pause_reading()
