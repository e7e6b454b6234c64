"""What one gRPC client may make the zttp transport hold: time (a header block, a message
body, an idle connection, a response it does not read), requests taken and not answered
yet, connections. One `GrpcLimits` per listening server; see docs/grpc_limits.md.
"""

from __future__ import annotations

from dataclasses import dataclass

# nginx's client_header_timeout and client_body_timeout, as the HTTP side (http/limits.py)
DEFAULT_HEADER_TIMEOUT_S = 60.0
DEFAULT_BODY_TIMEOUT_S = 60.0
# grpc-core has no idle bound by default (GRPC_ARG_MAX_CONNECTION_IDLE_MS); clients
# reconnect after a graceful GOAWAY, so a long one costs them nothing.
DEFAULT_IDLE_TIMEOUT_S = 300.0
DEFAULT_SEND_TIMEOUT_S = 60.0  # nginx's send_timeout
# Requests read from clients and not answered yet: past either bound the connection
# stops reading (the client's HTTP/2 window is no longer credited), as the HTTP side
# stops at its MAX_PENDING pipelined requests.
DEFAULT_MAX_PENDING_PER_CONNECTION = 256
DEFAULT_MAX_PENDING = 4096


@dataclass(frozen=True)
class GrpcLimits:
    """* `header_timeout_s`: from a header block's first frame to its last (HEADERS
      without END_HEADERS, then CONTINUATION);
    * `body_timeout_s`: the longest pause within a frame, or within a request message
      (a unary call's request, from its HEADERS to its END_STREAM);
      past either, the connection (a header block) or the call (a message) is ended.
    * `idle_timeout_s`: how long a connection with no call in progress stays open (then
      a graceful GOAWAY); pings do not keep it open.
    * `send_timeout_s`: how long a response may wait for a client that reads nothing
      (a full socket, or a window it does not open); then the connection is closed.
      0 turns a timeout off.
    * `max_connections`: open connections at most (None: derived from the process's
      file descriptor limit); past it, a new connection takes the place of the one idle
      the longest, or is refused (GOAWAY ENHANCE_YOUR_CALM) when none is idle.
    * `max_pending_per_connection`, `max_pending`: requests read and not answered yet,
      on one connection and on the whole server; past either the connection stops
      reading until half of them have answered."""

    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S
    max_connections: int | None = None
    max_pending_per_connection: int = DEFAULT_MAX_PENDING_PER_CONNECTION
    max_pending: int = DEFAULT_MAX_PENDING

    def __post_init__(self) -> None:
        for flag, value in (("header", self.header_timeout_s), ("body", self.body_timeout_s),
                            ("idle", self.idle_timeout_s), ("send", self.send_timeout_s)):
            if value < 0:
                raise ValueError(f"--grpc-{flag}-timeout-secs must not be negative")
        if self.max_connections is not None and self.max_connections <= 0:
            raise ValueError("--grpc-max-connections must be greater than 0")
        if self.max_pending_per_connection <= 0 or self.max_pending <= 0:
            raise ValueError("--grpc-max-pending-per-connection and --grpc-max-pending "
                             "must be greater than 0")

    def timeouts(self) -> list[float]:
        """The timeouts that are on (the sweeper's round follows the shortest)."""
        return [t for t in (self.header_timeout_s, self.body_timeout_s,
                            self.idle_timeout_s, self.send_timeout_s) if t > 0]
