"""The receive window the gRPC server on zttp offers its clients.

zttp advertises HTTP/2's default 64 KiB receive window and has no setting for it, so a
client may have 64 KiB of a request in flight before the server's credit for it comes
back: a 16 MiB request crossed in some 400 flow-control rounds. zttp takes DATA past the
window it advertised (it credits every frame as it parses it, and checks no window of its
own), so the server offers a larger one itself, right after zttp's SETTINGS: a second
SETTINGS frame with a larger SETTINGS_INITIAL_WINDOW_SIZE (every stream's window) and a
WINDOW_UPDATE on stream 0 (the connection's). zttp's credit for each frame it reads then
keeps both windows at this size; the client's SETTINGS ACK for the second frame is one
zttp ignores. The window bounds no memory that the message size limit does not already
bound: the server reads what arrives and gathers each message up to that limit.
"""

from __future__ import annotations

import struct

from pbserve.server.grpc.h2.frames import frame, window_update

RECEIVE_WINDOW = 16 * 1024 * 1024  # bytes a client may send before the server's credit
_DEFAULT_WINDOW = 65_535  # HTTP/2's initial window, the one zttp advertises
_SETTINGS = 0x4  # the frame type (RFC 9113 6.5)
_INITIAL_WINDOW_SIZE = 0x4  # the SETTINGS parameter (RFC 9113 6.5.2)


def window_frames(size: int = RECEIVE_WINDOW) -> bytes:
    """The frames that raise a new connection's receive windows (each stream's and the
    connection's) from HTTP/2's default to `size` bytes; sent after zttp's preface."""
    if not _DEFAULT_WINDOW < size < 2**31:  # (a WINDOW_UPDATE of 0 is a protocol error)
        raise ValueError(f"a larger HTTP/2 window is {_DEFAULT_WINDOW + 1} to 2**31-1 "
                         f"bytes, not {size}")
    return (frame(_SETTINGS, 0, 0, struct.pack(">HI", _INITIAL_WINDOW_SIZE, size))
            + window_update(0, size - _DEFAULT_WINDOW))
