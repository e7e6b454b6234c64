"""The clocks of one gRPC connection's timeouts (GrpcLimits), and its bound on the
answers to control frames a client makes the server queue.

zttp answers every PING and SETTINGS itself. A client that sends them and reads nothing
would grow the server's send buffer without bound, so, as nghttp2's bound on its queue
of outbound control frames and nginx's flood checks: once the transport's buffer is full
(it paused writing), at most MAX_CONTROL_BACKLOG more such frames are taken, then the
connection ends with GOAWAY ENHANCE_YOUR_CALM.
"""

from __future__ import annotations

from pbserve.server.grpc.h2.frames import FrameScanner
from pbserve.server.grpc.h2.limits import GrpcLimits

MAX_CONTROL_BACKLOG = 1000  # nghttp2's default bound on outbound control frames
ENHANCE_YOUR_CALM = 0xB  # the HTTP/2 error code (RFC 9113 7)


class Guard:
    """What one connection read and when; which of its timeouts has passed."""

    __slots__ = ("limits", "scanner", "read_at", "header_at", "idle_since",
                 "waiting_since", "backlog")

    def __init__(self, limits: GrpcLimits, now: float) -> None:
        self.limits = limits
        self.scanner = FrameScanner()
        self.read_at = now  # the last read
        self.header_at = now  # when the open header block began
        self.idle_since: float | None = now  # no call since then (None: calls run)
        self.waiting_since: float | None = None  # output the client does not take
        self.backlog = 0  # control frames answered while the send buffer was full

    def read(self, data: bytes, now: float) -> list[tuple] | None:
        """A read at `now`; its pieces for the connection (FrameScanner.feed)."""
        scanner = self.scanner
        opened = scanner.in_header_block
        pieces = scanner.feed(data)
        if scanner.in_header_block and not opened:
            self.header_at = now
        self.read_at = now
        return pieces

    def control_frame(self, send_buffer_full: bool) -> bool:
        """A PING or SETTINGS zttp answers; True: too many while the client reads
        nothing (the connection must end)."""
        if not send_buffer_full:
            self.backlog = 0
            return False
        self.backlog += 1
        return self.backlog > MAX_CONTROL_BACKLOG

    def output(self, waiting: bool, now: float) -> None:
        """Whether responses wait for the client (a full send buffer, bytes parked for
        its window), noted when that changes or the client takes some."""
        if not waiting:
            self.waiting_since = None
        elif self.waiting_since is None:
            self.waiting_since = now

    def expired(self, now: float, reading_paused: bool = False) -> str:
        """Why the connection must close at `now` ('' when it need not); while the
        server itself does not read (back-pressure), no read timeout runs."""
        limits = self.limits
        timeout = limits.header_timeout_s
        if timeout and not reading_paused and self.scanner.in_header_block \
                and now - self.header_at > timeout:
            return f"header block not received within {timeout:g} s"
        timeout = limits.body_timeout_s
        if timeout and not reading_paused and self.scanner.in_frame \
                and now - self.read_at > timeout:
            return f"no frame data received for {timeout:g} s"
        timeout = limits.send_timeout_s
        if timeout and self.waiting_since is not None and now - self.waiting_since > timeout:
            return f"the client took no response data for {timeout:g} s"
        timeout = limits.idle_timeout_s
        if timeout and self.idle_since is not None and now - self.idle_since > timeout:
            return "idle"
        return ""
