"""The stub's main thread waiting for its call's answer on its main queue
(stub/direct_replies.py), over a real shm queue: what else comes meanwhile is kept, in
order, for the main loop."""

from __future__ import annotations

import contextlib
import threading

import posix_ipc

from polling import wait_for
from shm.queue import MessageQueue
from stub import protocol as p
from stub.calls import Calls
from stub.direct_replies import DirectReplies
from stub.inbox import PARENT, Inbox, bell_name


@contextlib.contextmanager
def main_queue(prefix):
    """The stub's main queue and its bell; `put` puts and posts, as the parent does."""
    queue = MessageQueue.create(prefix + "-m", 1 << 16)
    bell = posix_ipc.Semaphore(bell_name(prefix), posix_ipc.O_CREX, 0o600, 0)

    def put(raw: bytes) -> None:
        if queue.put(raw):
            bell.release()
    try:
        yield Inbox(queue, bell), put
    finally:
        queue.unlink()
        queue.close()
        bell.unlink()
        bell.close()


def test_the_awaited_reply_is_returned_and_everything_else_kept_in_order(prefix):
    with main_queue(prefix) as (inbox, put):
        replies = DirectReplies(inbox)
        execute = p.encode(p.execute(7, (), ()))
        for raw in (execute, b"", p.encode(p.finalize()), p.encode(p.reply(3, None, "ok"))):
            put(raw)
        assert replies.wait(3) == (None, "ok")
        assert replies.pending()
        assert [replies.next(0) for _ in range(3)] == [
            (PARENT, execute), (PARENT, b""), (PARENT, p.encode(p.finalize()))]
        assert not replies.pending() and replies.next(0) is None


def test_only_the_main_thread_calls_on_the_main_queue(prefix):
    """Calls from another thread go up as CALL and wait for the control thread's hand-over;
    the main thread's go up as CALL_DIRECT and read their answer themselves."""
    with main_queue(prefix) as (inbox, put):
        sent: list[tuple] = []
        calls = Calls(sent.append, DirectReplies(inbox))
        put(p.encode(p.reply(1, None, 42)))
        assert calls.call("op") == 42
        assert sent[-1] == p.call_direct(1, "op", ())
        result = []
        worker = threading.Thread(target=lambda: result.append(calls.call("op", 5)))
        worker.start()
        wait_for(lambda: len(sent) == 2, "the worker's CALL", 5)
        assert sent[-1] == p.call(2, "op", (5,))
        calls.on_reply(2, None, "from control")
        worker.join(5)
        assert result == ["from control"]


def test_a_polled_wait_takes_the_answer_whether_it_comes_during_the_poll_or_after(prefix):
    """`poll_ns` (an announced request): the main thread looks for its answer before it
    sleeps; an answer that comes within the poll and one that comes after both arrive."""
    with main_queue(prefix) as (inbox, put):
        replies = DirectReplies(inbox)
        for poll_ns, delay_s in ((200_000_000, 0.01), (1_000_000, 0.05)):
            replies.poll_ns = poll_ns
            timer = threading.Timer(delay_s, put, (p.encode(p.reply(9, None, poll_ns)),))
            timer.start()
            assert replies.wait(9) == (None, poll_ns)
            timer.join()
        assert not replies.pending()
