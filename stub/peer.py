"""Another process's stub, as a process that sends it requests itself sees it: a
frontend process (pbserve/frontends/direct.py) or a calling stub (stub/direct_bls.py).
One queue from this process to the stub (this process its only producer), the answer
queue back, the stub's bell, posted after a put that found the queue empty
(stub/inbox.py), and its pidfd, readable once the stub ended."""

from __future__ import annotations

import os
import select

import posix_ipc

from shm.queue import MessageQueue
from stub import protocol as p


class StubPeer:
    """`instance`: the model instance the stub runs, for messages. Closing leaves the
    answer queue to its reader's owner."""

    def __init__(self, requests: str, answers: str, bell: str, pid: int,
                 instance: str) -> None:
        self.pidfd = os.pidfd_open(pid)  # first: a stub gone already fails the route
        try:
            if select.select([self.pidfd], [], [], 0)[0]:  # ended, not yet reaped
                raise ProcessLookupError(f"stub process {pid} has ended")
            self.requests = MessageQueue.attach(requests)
            self.answers = MessageQueue.attach(answers)
            self.bell = posix_ipc.Semaphore(bell)
        except BaseException:
            os.close(self.pidfd)
            raise
        self.instance = instance
        self.pid = pid

    def send(self, message: tuple) -> None:
        """Put `message` on the stub's queue (QueueFull if it is full)."""
        if self.requests.put(p.encode(message), timeout=0):
            self.bell.release()

    def close(self) -> None:
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
            self.requests.close()
            self.bell.close()
