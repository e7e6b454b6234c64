"""How a worker takes a request it pulled: it tells the caller "accepted" (naming itself)
before it acknowledges the message to JetStream, and nothing runs between the two.

A worker SIGKILLed between an ack that reached the NATS server and an "accepted" that
did not left a request nobody answered (never redelivered: acknowledged) and nobody
failed (its frontend did not know whose it was): a client waited forever
(test_cluster_faults' "lost", once in CI). Fakes here, since no real kill lands in a
gap of one event-loop turn on purpose.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from pbserve.core.types import InferRequest, InferResponse
from pbserve.distributed.codec import decode_accepted, encode_request
from pbserve.distributed.request_plane import REPLY_HEADER
from pbserve.distributed.worker import PlaneWorker, _Feed

INBOX = "_INBOX.caller"


class Wire:
    """What reaches the NATS server, in order: a write is what was published before
    the client's flusher ran (nats-py writes its pending buffer then)."""

    def __init__(self) -> None:
        self.pending: list[str] = []
        self.writes: list[list[str]] = []

    async def flusher(self) -> None:
        while True:
            await asyncio.sleep(0)
            if self.pending:
                self.writes.append(self.pending)
                self.pending = []


class Nats:
    max_payload = 1 << 20

    def __init__(self, wire: Wire) -> None:
        self._wire = wire

    async def publish(self, subject: str, payload: bytes) -> None:
        accepted = subject == INBOX and decode_accepted(payload) is not None
        self._wire.pending.append("accepted" if accepted else subject)


class Msg:
    def __init__(self, wire: Wire, inbox: str) -> None:
        self._wire = wire
        self.headers = {REPLY_HEADER: inbox} if inbox else {}
        self.data = encode_request(InferRequest("m"), stream=False)

    async def ack(self) -> None:
        self._wire.pending.append("ack")


class Subscription:
    def __init__(self, msgs: list[Msg]) -> None:
        self._msgs = msgs

    async def fetch(self, count: int, timeout: float) -> list[Msg]:
        if self._msgs:
            msgs, self._msgs = self._msgs, []
            return msgs
        await asyncio.sleep(3600)
        return []


class DataPlane:
    """Inputs and outputs all inline: nothing to pull or hold."""

    async def fill(self, tensors, source: str, max_bytes: int = 0) -> None:
        pass

    def group(self, on_free=None) -> SimpleNamespace:
        return SimpleNamespace(free=lambda: None, close=lambda: None, holding=False)


class Manager:
    async def infer(self, request: InferRequest) -> InferResponse:
        await asyncio.sleep(0.01)  # the model runs
        return InferResponse(request.model_name, "1")


def _take(inbox: str, cancelled: bool = False) -> list[list[str]]:
    """The writes a worker makes for one pulled request (`cancelled`: its caller gave up
    before it was pulled)."""
    wire = Wire()

    async def run() -> None:
        flusher = asyncio.create_task(wire.flusher())
        worker = PlaneWorker(Manager(), Nats(wire), None, SimpleNamespace(
            worker="w1", instance="i1"), 1.0, DataPlane(), 1 << 20)
        if cancelled:
            worker._cancelled[inbox] = None
        feed = _Feed(worker, "m", capacity=1)
        feed._sub = Subscription([Msg(wire, inbox)])
        pull = asyncio.create_task(feed._pull())
        for _ in range(100):
            await asyncio.sleep(0.005)
        pull.cancel()
        flusher.cancel()
        await asyncio.gather(pull, flusher, return_exceptions=True)

    asyncio.run(run())
    return wire.writes


def test_the_caller_hears_accepted_in_the_same_write_as_the_ack_or_before_it():
    writes = _take(INBOX)
    first = writes[0]
    assert first[:2] == ["accepted", "ack"], writes
    assert [w for write in writes for w in write].count("ack") == 1, writes
    assert writes[-1] == [INBOX], writes  # then the response


def test_a_request_dropped_unrun_is_acknowledged_all_the_same():
    assert _take(INBOX, cancelled=True) == [["ack"]]
    assert _take("") == [["ack"]]
