"""A stub ends with its parent, even in the middle of `execute` (or a hung one).

The kernel does it: PR_SET_PDEATHSIG makes it SIGKILL the stub when the parent ends, so
nothing in the stub has to run (a model stuck in C code holding the GIL still goes). The
request is made after the stub started, so the parent may already be gone by then: the
parent pid is checked right after, which closes that race. What the stub leaves in
/dev/shm is removed by the next server's start (shm/names.py, `sweep_dead_owners`).

"The parent" is, for the kernel, the thread that started the stub: the server starts
stubs on its event-loop thread, which lives as long as the server. Where prctl is not
available a thread polls the parent pid instead, which needs the GIL to run.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
POLL_S = 0.3  # the fallback's period (Triton's stub checks its parent every 300 ms)


def die_with_parent(parent_pid: int) -> None:
    """From now on this process ends when `parent_pid`, its parent, does."""
    if not _set_pdeathsig(signal.SIGKILL):
        threading.Thread(target=_poll_parent, args=(parent_pid,), daemon=True,
                         name="pbserve-stub-parent").start()
    if os.getppid() != parent_pid:  # it ended before the request: nobody would signal
        os._exit(1)


def _set_pdeathsig(signum: int) -> bool:
    try:
        libc = ctypes.CDLL(None)  # the interpreter's own symbols: libc's among them
        return libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux, or no prctl
        return False


def _poll_parent(parent_pid: int) -> None:
    event = threading.Event()
    while os.getppid() == parent_pid:
        event.wait(POLL_S)
    os._exit(1)
