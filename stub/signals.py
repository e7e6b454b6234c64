"""The stub's signal dispositions: SIGINT and SIGTERM do nothing.

A signal sent to the server's whole process group (Ctrl-C, `kill -- -PGID`, systemd's
`KillMode=control-group`, `timeout`) reaches every stub too. The parent turns it into a
clean shutdown: it lets the stub finish what it runs and then asks it to `finalize`, so
the stub itself must not die of it. Triton's stub does the same.

A handler that does nothing, not SIG_IGN: an ignored signal stays ignored across exec, so
processes the model starts (`subprocess`) could then not be stopped with SIGTERM; a
handler is reset to the default at exec. A forked child (multiprocessing's workers) gets
the defaults back too. Interrupted system calls are restarted (`siginterrupt(False)`); the
few that never are (timed semaphore waits) are retried by shm/queue.py.
"""

from __future__ import annotations

import os
import signal

SHUTDOWN_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _ignore(signum: int, frame: object) -> None:
    """The parent drives shutdown."""


def ignore_shutdown_signals() -> None:
    set_shutdown_handlers()
    os.register_at_fork(after_in_child=_restore_defaults)


def set_shutdown_handlers() -> None:
    """The handlers alone, without restoring the defaults in forked children: the stub
    zygote's (stub/zygote.py), whose children are stubs and set them up as above."""
    for signum in SHUTDOWN_SIGNALS:
        signal.signal(signum, _ignore)
        signal.siginterrupt(signum, False)


def _restore_defaults() -> None:
    """In a process the model forks: SIGINT raises KeyboardInterrupt, SIGTERM ends it."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
