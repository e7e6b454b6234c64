"""shm.queue: a producer and a consumer in different processes over a real ring."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from child_process import run_py
from shm.names import SHM_DIR, entries_with_prefix
from shm.queue import SLOT, MessageQueue, QueueClosed, QueueFull

REPO = Path(__file__).resolve().parents[2]
JOIN = 30  # seconds: generous bound so that a broken queue fails instead of hanging

# Shared by the parent and the child scripts: a deterministic stream of messages whose
# lengths hit the slot boundaries and the ring's maximum, with random contents.
GEN = r"""
import random

from shm.queue import SLOT

def lengths(n, max_len, seed):
    rng = random.Random(seed)
    edge = [0, 1, SLOT - 5, SLOT - 4, SLOT - 3, 2 * SLOT - 5, 2 * SLOT - 4, 2 * SLOT - 3,
            max_len - 1, max_len, 0, 3, 4, 5]
    for i in range(n):
        if i < len(edge):
            yield edge[i]
        elif rng.random() < 0.2:
            yield rng.choice(edge)
        else:
            yield rng.randrange(max_len + 1)

def message(i, length):
    return random.Random(i * 7919 + length).randbytes(length)
"""
_gen: dict = {}
exec(GEN, _gen)  # noqa: S102 - the same source runs in the child scripts
lengths, message = _gen["lengths"], _gen["message"]

CONSUMER = GEN + r"""
import sys
from shm.queue import MessageQueue
name, n, max_len, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
q = MessageQueue.attach(name)
for i, length in enumerate(lengths(n, max_len, seed)):
    got = q.get(timeout=20)
    if got is None:
        sys.exit(f"message {i}: nothing came")
    if got != message(i, length):
        sys.exit(f"message {i}: {len(got)} bytes differ from the {length} expected")
extra = q.get(timeout=0)
if extra is not None:
    sys.exit(f"an extra message of {len(extra)} bytes")
q.close()
print("ok", n)
"""

PRODUCER = GEN + r"""
import sys
from shm.queue import MessageQueue
name, n, max_len, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
q = MessageQueue.attach(name)
for i, length in enumerate(lengths(n, max_len, seed)):
    q.put(message(i, length), timeout=20)
q.close()
print("ok", n)
"""


@pytest.fixture
def make_queue(prefix):
    queues: list[MessageQueue] = []

    def make(capacity: int) -> MessageQueue:
        queue = MessageQueue.create(f"{prefix}-q{len(queues)}", capacity)
        queues.append(queue)
        return queue

    yield make
    for queue in queues:
        queue.unlink()
        queue.close()


@pytest.fixture
def spawn():
    """Start `python -c code args...`; killed and reaped at teardown if still running."""
    children: list[subprocess.Popen] = []

    def start(code: str, *args, stdout=subprocess.PIPE) -> subprocess.Popen:
        child = subprocess.Popen([sys.executable, "-c", code, *map(str, args)], cwd=REPO,
                                 stdout=stdout, stderr=subprocess.PIPE, text=True)
        children.append(child)
        return child

    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
        child.communicate(timeout=JOIN)


def finish(child: subprocess.Popen) -> str:
    out, err = child.communicate(timeout=JOIN)
    assert child.returncode == 0, err
    return out


def drain(queue: MessageQueue) -> list[bytes]:
    out = []
    while (item := queue.get(timeout=0)) is not None:
        out.append(item)
    return out


def unblock(queue: MessageQueue, threads: list[threading.Thread]) -> None:
    """Consume until `threads` (blocked producers) end, so that teardown never closes a
    semaphore a thread still waits on."""
    for thread in threads:
        while thread.is_alive():
            queue.get(timeout=0.05)
            thread.join(0.01)


def test_fifo_order_and_empty_message(make_queue):
    queue = make_queue(4096)
    sent = [b"first", b"", b"x" * 100, b"", b"last"]
    for item in sent:
        queue.put(item)
    assert [queue.get(timeout=1) for _ in sent] == sent
    assert queue.get(timeout=0) is None


def test_get_with_timeout_returns_none_when_nothing_comes(make_queue):
    queue = make_queue(1024)
    assert queue.get(timeout=0) is None
    assert queue.get(timeout=0.05) is None
    queue.put(b"now")
    assert queue.get(timeout=0) == b"now"
    assert queue.get(timeout=0.01) is None


@pytest.mark.parametrize("producer_side", ["parent", "child"])
def test_messages_of_many_sizes_wrap_the_ring_byte_exact(make_queue, spawn, producer_side):
    queue = make_queue(16 * SLOT)  # a tiny ring: every few messages wrap its end
    assert queue.max_message == 16 * SLOT - 4
    n, seed = 3000, 1234
    stream = lengths(n, queue.max_message, seed)
    if producer_side == "parent":
        child = spawn(CONSUMER, queue.name, n, queue.max_message, seed)
        for i, length in enumerate(stream):
            queue.put(message(i, length), timeout=JOIN)
        assert finish(child).split() == ["ok", str(n)]
    else:
        child = spawn(PRODUCER, queue.name, n, queue.max_message, seed)
        for i, length in enumerate(stream):
            got = queue.get(timeout=JOIN)
            assert got is not None, f"message {i} never came"
            assert got == message(i, length), f"message {i} of {length} bytes differs"
        assert finish(child).split() == ["ok", str(n)]
        assert queue.get(timeout=0) is None


def test_message_bigger_than_the_ring_is_a_value_error(make_queue):
    queue = make_queue(4 * SLOT)
    with pytest.raises(ValueError, match=str(queue.max_message)):
        queue.put(b"x" * (queue.max_message + 1))
    with pytest.raises(ValueError):
        queue.put(b"x" * (10 * SLOT), timeout=0)
    # Nothing was reserved or written: the largest message still goes through.
    queue.put(b"y" * queue.max_message, timeout=0)
    assert queue.get(timeout=1) == b"y" * queue.max_message
    assert queue.get(timeout=0) is None


def test_tiny_capacity_still_holds_two_slots(make_queue):
    queue = make_queue(10)
    assert queue.max_message == 2 * SLOT - 4
    queue.put(b"z" * queue.max_message)
    assert queue.get(timeout=1) == b"z" * queue.max_message


FILL_THEN_BLOCK = r"""
import sys
from shm.queue import MessageQueue, QueueFull
q = MessageQueue.attach(sys.argv[1])
for i in range(16):  # one slot each: the ring is full
    q.put(b"m%02d" % i, timeout=0)
for timeout in (0, 0.05):
    try:
        q.put(b"no room", timeout=timeout)
    except QueueFull:
        pass
    else:
        sys.exit("put into a full queue did not raise QueueFull")
print("full", flush=True)
q.put(b"late")  # no timeout: held until the consumer makes room
print("sent", flush=True)
q.close()
"""


def test_full_queue_blocks_the_producer_and_timeout_raises_queue_full(make_queue, spawn):
    queue = make_queue(16 * SLOT)
    producer = spawn(FILL_THEN_BLOCK, queue.name)
    assert producer.stdout.readline().strip() == "full", producer.communicate(timeout=JOIN)
    # Back-pressure: after QueueFull the producer is still usable and now waits for room.
    with pytest.raises(subprocess.TimeoutExpired):
        producer.wait(timeout=0.2)
    fill = [b"m%02d" % i for i in range(16)]
    assert [queue.get(timeout=JOIN) for _ in range(16)] == fill
    assert queue.get(timeout=JOIN) == b"late"
    assert finish(producer).split() == ["sent"]
    assert queue.get(timeout=0) is None
    assert queue._empty.value == 16  # every slot the failed puts took came back


def test_blocked_producer_thread_resumes_when_room_is_made(make_queue):
    queue = make_queue(4 * SLOT)
    for i in range(4):
        queue.put(b"%d" % i, timeout=0)
    done = threading.Event()

    def blocked_put() -> None:
        queue.put(b"late")
        done.set()

    producer = threading.Thread(target=blocked_put, daemon=True)
    producer.start()
    try:
        assert not done.wait(0.1)
        assert queue.get(timeout=0) == b"0"
        assert done.wait(JOIN)
    finally:
        unblock(queue, [producer])
    assert drain(queue) == [b"1", b"2", b"3", b"late"]


def test_queue_full_gives_back_a_partial_reservation(make_queue):
    queue = make_queue(16 * SLOT)
    for i in range(15):
        queue.put(b"%d" % i, timeout=0)
    big = b"b" * (3 * SLOT)  # needs 4 slots, one is free
    with pytest.raises(QueueFull):
        queue.put(big, timeout=0.05)
    assert drain(queue) == [b"%d" % i for i in range(15)]
    for i in range(16):  # the slot the failed put held for a while is free again
        queue.put(b"%d" % i, timeout=0)
    with pytest.raises(QueueFull):
        queue.put(b"", timeout=0)
    assert drain(queue) == [b"%d" % i for i in range(16)]
    queue.put(big, timeout=0)
    assert queue.get(timeout=0) == big


def test_put_timeout_bounds_the_whole_wait_not_each_slot(make_queue):
    """A consumer freeing a slot now and then must not keep put(timeout) waiting for ever."""
    queue = make_queue(16 * SLOT)
    for i in range(16):
        queue.put(b"%d" % i, timeout=0)
    stop = threading.Event()
    got: list[bytes] = []

    def slow_consumer() -> None:
        while not stop.wait(0.25):  # one slot every 0.25 s, well within the timeout
            item = queue.get(timeout=0)
            if item is not None:
                got.append(item)

    consumer = threading.Thread(target=slow_consumer, daemon=True)
    consumer.start()
    try:
        # 16 slots needed; the ring will not be empty for about 4 s. The timeout is 0.6 s.
        with pytest.raises(QueueFull):
            queue.put(b"w" * queue.max_message, timeout=0.6)
    finally:
        stop.set()
        consumer.join(JOIN)
    assert not consumer.is_alive()
    assert got + drain(queue) == [b"%d" % i for i in range(16)]
    queue.put(b"w" * queue.max_message, timeout=0)  # all 16 slots came back
    assert queue.get(timeout=0) == b"w" * queue.max_message


COLLECT = r"""
import sys
from shm.queue import MessageQueue
name, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
q = MessageQueue.attach(name)
items = []
for _ in range(n):
    item = q.get(timeout=20)
    assert item is not None, f"only {len(items)} of {n} came"
    items.append(item.hex())
extra = q.get(timeout=0.2)
assert extra is None, "a message came twice or from nowhere"
with open(out, "w") as f:
    f.write("\n".join(items))
q.close()
"""


def test_many_producer_threads_one_consumer_process_exactly_once(make_queue, spawn, tmp_path):
    queue = make_queue(32 * SLOT)  # small: producers contend for room all the time
    nthreads, per_thread = 8, 250
    total = nthreads * per_thread
    out = tmp_path / "received.txt"
    consumer = spawn(COLLECT, queue.name, total, out)
    barrier = threading.Barrier(nthreads)
    errors: list[BaseException] = []

    def item(tid: int, i: int) -> bytes:
        return f"{tid}:{i}:".encode() + bytes([65 + tid]) * ((i * 37 + tid) % 700)

    def produce(tid: int) -> None:
        try:
            barrier.wait(timeout=JOIN)
            for i in range(per_thread):
                queue.put(item(tid, i), timeout=JOIN)
        except BaseException as err:  # noqa: BLE001 - reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=produce, args=(t,), daemon=True)
               for t in range(nthreads)]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join(JOIN)
        assert not any(t.is_alive() for t in threads)
        assert errors == []
        finish(consumer)
    finally:
        if consumer.poll() is None:
            consumer.kill()
        unblock(queue, threads)
    received = [bytes.fromhex(line) for line in out.read_text().split("\n")]
    assert len(received) == total
    expected = [item(t, i) for t in range(nthreads) for i in range(per_thread)]
    assert Counter(received) == Counter(expected)  # every message exactly once, intact
    for tid in range(nthreads):  # and each thread's messages in the order it put them
        seq = [int(m.split(b":")[1]) for m in received if m.startswith(f"{tid}:".encode())]
        assert seq == list(range(per_thread))


def test_wake_releases_a_blocked_get(make_queue):
    queue = make_queue(1024)
    result: list = []
    reader = threading.Thread(target=lambda: result.append(queue.get(timeout=JOIN)),
                              daemon=True)
    reader.start()
    queue.wake()
    reader.join(JOIN)
    assert result == [b""]


ATTACH_AND_PUT = r"""
import sys
from shm.queue import MessageQueue
q = MessageQueue.attach(sys.argv[1])
q.put(b"from child", timeout=10)
q.close()
"""

ATTACH_AND_GET = r"""
import sys
from shm.queue import MessageQueue
q = MessageQueue.attach(sys.argv[1])
print(q.get(timeout=10).decode())
q.close()
"""


def test_unlink_leaves_nothing_named_with_the_prefix(prefix, spawn):
    name = f"{prefix}-cleanup"
    queue = MessageQueue.create(name, 1024)
    try:
        bare = name.lstrip("/")
        assert sorted(entries_with_prefix(name)) == sorted(
            [bare, f"sem.{bare}-e", f"sem.{bare}-i"])
        for entry in entries_with_prefix(name):
            assert os.stat(os.path.join(SHM_DIR, entry)).st_mode & 0o777 == 0o600
        finish(spawn(ATTACH_AND_PUT, name))
        assert queue.get(timeout=JOIN) == b"from child"
        queue.unlink()
        assert entries_with_prefix(name) == []
    finally:
        queue.unlink()
        queue.close()
    assert entries_with_prefix(name) == []
    assert [e for e in os.listdir(SHM_DIR) if bare in e] == []


def test_unlink_after_close_still_removes_the_semaphores(prefix):
    name = f"{prefix}-closed-first"
    queue = MessageQueue.create(name, 1024)
    queue.close()
    queue.unlink()
    assert entries_with_prefix(name) == []


def test_get_on_a_closed_queue_raises_queue_closed(make_queue):
    queue = make_queue(1024)
    queue.close()
    with pytest.raises(QueueClosed):
        queue.get(timeout=0)


def test_put_says_whether_the_consumer_must_be_woken(make_queue):
    """True only for a message that found the queue empty (shm/doorbell.py rings then)."""
    q = make_queue(1 << 16)
    assert q.put(b"a") is True
    assert q.put(b"b") is False  # "a" unread: the pass that reads it reads "b" too
    assert q.get(0) == b"a"
    assert q.put(b"c") is False  # "b" still unread
    assert q.get(0) == b"b" and q.get(0) == b"c"
    assert q.put(b"d") is True


def test_a_consumer_woken_only_when_told_reads_every_message(make_queue):
    """Four threads put while a consumer sleeps until a put says "wake" and then reads
    until the queue is empty: nothing is left unread (no lost wake-up)."""
    q = make_queue(1 << 16)
    bell = threading.Semaphore(0)
    per_thread, threads = 2000, 4
    received: list[bytes] = []

    def produce(tag: int) -> None:
        for i in range(per_thread):
            if q.put(b"%d-%d" % (tag, i)):
                bell.release()

    def consume() -> None:
        while len(received) < per_thread * threads:
            if not bell.acquire(timeout=10):
                return  # a lost wake-up: the assertion below reports it
            while (raw := q.get(0)) is not None:
                received.append(raw)

    consumer = threading.Thread(target=consume)
    consumer.start()
    producers = [threading.Thread(target=produce, args=(t,)) for t in range(threads)]
    for t in producers:
        t.start()
    for t in producers:
        t.join()
    consumer.join(30)
    assert len(received) == per_thread * threads
    assert len(set(received)) == per_thread * threads


SIGNALLED = r"""
import signal, sys, threading, time
from shm.queue import MessageQueue
from stub.signals import ignore_shutdown_signals

ignore_shutdown_signals()  # as in a stub: SIGTERM runs a handler that does nothing
q = MessageQueue.create(sys.argv[1], 512)  # two slots
main = threading.get_ident()

def later(*steps):
    def run():
        for step in steps:
            time.sleep(0.2)
            step()
    threading.Thread(target=run).start()

def interrupt():
    signal.pthread_kill(main, signal.SIGTERM)  # EINTR in the main thread's wait

later(interrupt, lambda: q.put(b"after"))
assert q.get() == b"after"                      # a wait without a timeout goes on
later(interrupt)
assert q.get(timeout=30) is None                # a timed one ends early, as a timeout
q.put(b"1"); q.put(b"2")                        # full
later(interrupt, lambda: q.get(timeout=0))
q.put(b"3")                                     # a producer waiting for room goes on
assert [q.get(timeout=0) for _ in range(3)] == [b"2", b"3", None]
q.unlink(); q.close()
print("ok")
"""


def test_a_signal_handler_interrupting_a_wait_is_not_an_error(prefix):
    """A stub's SIGTERM handler (stub/signals.py) interrupts semaphore waits with EINTR."""
    assert run_py(SIGNALLED, prefix).strip() == "ok"
