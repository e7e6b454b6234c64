"""A batcher's clock and its one wake-up, to the microsecond (a timerfd the event loop
watches).

A dynamic batcher waits `max_queue_delay_microseconds` for more requests, often well
under a millisecond (Triton waits that long, to the microsecond). uvloop's clock and
timers count whole milliseconds: `loop.time()` moves in 1 ms steps, and a `call_at`
less than half a millisecond ahead runs on the next turn of the loop. A batcher that
armed its wait that way ran its whole dispatch again on every turn until the
millisecond passed: about a dozen turns a batch, a sixth of the core's CPU under
perf_analyzer's batch row (docs/performance.md). This clock reads `time.monotonic()`
(CLOCK_MONOTONIC), and its wake-up is a timerfd armed at an absolute time: epoll
returns when it expires, however busy or idle the loop is.

The timerfd exists from the first `at` to `close` (the model's unload), or until the
timer is collected.
"""

from __future__ import annotations

import asyncio
import ctypes
import math
import os
import time
import weakref
from collections.abc import Callable

_CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1
_TFD_FLAGS = os.O_NONBLOCK | os.O_CLOEXEC  # TFD_NONBLOCK, TFD_CLOEXEC


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


_libc = ctypes.CDLL(None, use_errno=True)


def _create() -> int:
    """A non-blocking CLOCK_MONOTONIC timerfd (os.timerfd_create from Python 3.13)."""
    if hasattr(os, "timerfd_create"):
        return os.timerfd_create(_CLOCK_MONOTONIC, flags=_TFD_FLAGS)
    fd = _libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_FLAGS)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return fd


def _set(fd: int, deadline_ns: int) -> None:
    """Arm `fd` to expire once at CLOCK_MONOTONIC `deadline_ns` (0 disarms it)."""
    if hasattr(os, "timerfd_settime_ns"):
        os.timerfd_settime_ns(fd, flags=_TFD_TIMER_ABSTIME if deadline_ns else 0,
                              initial=deadline_ns)
        return
    spec = _Itimerspec(_Timespec(0, 0), _Timespec(*divmod(deadline_ns, 1_000_000_000)))
    if _libc.timerfd_settime(fd, _TFD_TIMER_ABSTIME if deadline_ns else 0,
                             ctypes.byref(spec), None) < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


class PreciseTimer:
    """One wake-up at a time on `loop`: `callback` runs from the loop once the earliest
    time asked of `at` has passed. On the loop's thread only."""

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]
                 ) -> None:
        self._loop = loop
        self._callback = callback
        self._fd = -1
        self._when = math.inf  # when it fires (inf: not armed)
        self._close_fd: weakref.finalize | None = None

    @staticmethod
    def now() -> float:
        """The batcher's clock: time.monotonic() seconds, the timer's time."""
        return time.monotonic()

    def at(self, when: float) -> None:
        """Fire at `when` (`now()` seconds), unless armed to fire sooner already. A
        time already passed fires on the loop's next turn."""
        if when >= self._when:
            return
        if self._fd < 0:
            self._open()
        self._when = when
        _set(self._fd, max(1, math.ceil(when * 1e9)))

    def cancel(self) -> None:
        if self._when < math.inf:
            self._when = math.inf
            _set(self._fd, 0)

    def close(self) -> None:
        """Disarmed for good, its descriptor closed (a later `at` opens another)."""
        self._when = math.inf
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            try:
                self._loop.remove_reader(fd)
            except RuntimeError:  # the loop is closed: it watches nothing any more
                pass
            assert self._close_fd is not None
            self._close_fd()

    def _open(self) -> None:
        self._fd = _create()
        self._close_fd = weakref.finalize(self, os.close, self._fd)
        self._loop.add_reader(self._fd, self._fired)

    def _fired(self) -> None:
        try:
            os.read(self._fd, 8)  # the expiry count: clears the fd's readiness
        except BlockingIOError:  # disarmed or re-armed after it expired: not due
            return
        self._when = math.inf
        self._callback()
