"""A window of a shared-memory segment that a client created (Triton's system shared
memory extension): only [offset, offset + byte_size) of it is mapped.

A client registers a region by the key of its POSIX segment, an offset and a size. The
parent maps that window when the region is registered; a stub maps it when a request
first names it, by the same key, and keeps the mapping until the parent says the
region is gone. Tensors in such a window travel between processes as descriptors
whose region is a *token*, `client:<serial>:<offset>:<byte_size>:<key>`: everything a
process needs to map the window, and a serial that no later registration reuses, so a
cached mapping can never stand for another registration.

mmap wants a page-aligned file offset: the mapping starts at the page holding `offset`
and ends at `offset + byte_size`, never further.
"""

from __future__ import annotations

import mmap
import os

import posix_ipc

CLIENT_PREFIX = "client:"
_PAGE = mmap.ALLOCATIONGRANULARITY


class ClientRegionError(OSError):
    """The segment cannot be opened or mapped as asked; `reason` says which check
    failed: "open" (no such segment, no permission), "size" (the window lies outside
    the segment) or "map" (mmap refused)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def client_token(serial: int, key: str, offset: int, byte_size: int) -> str:
    """The descriptor region name of a registered window."""
    return f"{CLIENT_PREFIX}{serial}:{offset}:{byte_size}:{key}"


def is_client_token(region: str) -> bool:
    return region.startswith(CLIENT_PREFIX)


class ClientWindow:
    """A mapping of `byte_size` bytes at `offset` of the segment named `key`. The
    interface of `shm.region.Region` that readers use: `name`, `size`, `view`,
    `close` (it never unlinks: the segment is the client's)."""

    owner = False

    def __init__(self, name: str, size: int, map_: mmap.mmap, start: int) -> None:
        self.name = name
        self.size = size
        self.map = map_
        self._start = start  # where `offset` lies in the page-aligned mapping
        self._whole = memoryview(map_)[start:start + size]

    @classmethod
    def open(cls, key: str, offset: int, byte_size: int, name: str = "") -> "ClientWindow":
        """Map the window; ClientRegionError if the segment is missing, too small or
        cannot be mapped (a window of 0 bytes cannot)."""
        try:
            segment = posix_ipc.SharedMemory(key)
        except (posix_ipc.Error, ValueError, OSError) as err:
            raise ClientRegionError("open", f"cannot open shared memory '{key}': {err}") \
                from None
        try:
            if offset < 0 or byte_size < 0 or offset + byte_size > segment.size:
                raise ClientRegionError(
                    "size", f"[{offset}, {offset + byte_size}) lies outside shared memory "
                            f"'{key}' of {segment.size} bytes")
            if byte_size == 0:
                raise ClientRegionError("map", os.strerror(22))  # mmap's EINVAL, as Triton
            start = offset % _PAGE
            try:
                map_ = mmap.mmap(segment.fd, start + byte_size, offset=offset - start)
            except OSError as err:
                raise ClientRegionError("map", err.strerror or str(err)) from None
        finally:
            segment.close_fd()
        return cls(name or client_token(0, key, offset, byte_size), byte_size, map_, start)

    @classmethod
    def open_token(cls, token: str) -> "ClientWindow":
        """Map the window a descriptor's region token names."""
        _, offset, byte_size, key = token[len(CLIENT_PREFIX):].split(":", 3)
        return cls.open(key, int(offset), int(byte_size), name=token)

    def view(self, offset: int, nbytes: int) -> memoryview:
        """A writable view of `nbytes` at `offset` of the window (no copy)."""
        return self._whole[offset:offset + nbytes]

    def unlink(self) -> None:
        """Never: the segment belongs to the client."""

    def close(self) -> None:
        """Unmap; views still alive keep the mapping until they go (never an error)."""
        self._whole.release()
        try:
            self.map.close()
        except BufferError:
            pass
