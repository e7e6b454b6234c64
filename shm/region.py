"""A named POSIX shared-memory segment mapped into this process."""

from __future__ import annotations

import errno
import mmap
import os

import posix_ipc


# The words Triton's Python backend starts this error with: clients and tests match them.
POOL_GROWTH_FAILED = "Failed to increase the shared memory pool size"


class ShmExhausted(MemoryError):
    """No more shared memory: /dev/shm is full or the pool reached its limit. Its message
    starts with POOL_GROWTH_FAILED."""


class Region:
    """One segment. The creator owns the name (and unlinks it); others attach by name."""

    def __init__(self, name: str, size: int, map_: mmap.mmap, owner: bool) -> None:
        self.name = name
        self.size = size
        self.map = map_
        self.owner = owner
        self._whole = memoryview(map_)  # sliced by `view`: one memoryview less per view

    @classmethod
    def create(cls, name: str, size: int) -> "Region":
        """Create a segment of `size` bytes, mode 0600, backed by real pages.

        The pages are reserved with posix_fallocate so that a full /dev/shm is a clear
        error here instead of a SIGBUS at the first write.
        """
        shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o600)
        try:
            try:
                os.posix_fallocate(shm.fd, 0, size)
            except OSError as err:
                posix_ipc.unlink_shared_memory(name)
                if err.errno in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
                    raise ShmExhausted(
                        f"{POOL_GROWTH_FAILED}: cannot allocate {size} bytes of shared "
                        f"memory in /dev/shm "
                        f"({os.strerror(err.errno)}); free space in /dev/shm or raise its "
                        f"size (e.g. docker --shm-size)") from None
                raise
            map_ = mmap.mmap(shm.fd, size)
        finally:
            shm.close_fd()
        return cls(name, size, map_, owner=True)

    @classmethod
    def attach(cls, name: str) -> "Region":
        """Map an existing segment created by another process."""
        shm = posix_ipc.SharedMemory(name)
        try:
            size = shm.size
            map_ = mmap.mmap(shm.fd, size)
        finally:
            shm.close_fd()
        return cls(name, size, map_, owner=False)

    def view(self, offset: int, nbytes: int) -> memoryview:
        """A writable view of `nbytes` at `offset` (no copy)."""
        return self._whole[offset:offset + nbytes]

    def unlink(self) -> None:
        try:
            posix_ipc.unlink_shared_memory(self.name)
        except posix_ipc.ExistentialError:
            pass

    def close(self) -> None:
        """Unmap; views still alive keep the mapping until they go (never an error)."""
        self._whole.release()  # its slices hold the mapping on their own
        try:
            self.map.close()
        except BufferError:
            pass
