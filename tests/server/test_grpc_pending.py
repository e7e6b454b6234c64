"""The gRPC transport's back-pressure bound (server/grpc/h2/pending.py) resumes paused
connections fairly: floods that refill the server the moment they are resumed do not
keep another client waiting for good (a test_grpc_backpressure client once waited 30 s
behind three floods)."""

from __future__ import annotations

from pbserve.server.grpc.h2.pending import PendingRequests

PER_CONNECTION, TOTAL = 16, 24


class Reader:
    """A connection holding requests it read ahead: resumed, it takes them at once (as
    GrpcConnection.resume_reading does), up to its own bound. Hashed by `order`, so
    a set of readers iterates floods first, the client last."""

    def __init__(self, bound: PendingRequests, order: int, holds: int) -> None:
        self.bound, self.order, self.holds = bound, order, holds
        self.paused = False
        self.taken = 0

    def __hash__(self) -> int:
        return self.order

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False
        while self.holds and not self.paused:
            self.holds -= 1
            self.taken += 1
            self.bound.take(self)


def test_a_client_behind_floods_that_refill_the_server_gets_its_turn():
    bound = PendingRequests(PER_CONNECTION, TOTAL)
    floods = [Reader(bound, order, holds=10**6) for order in (1, 2, 3)]
    for flood in floods:
        bound.add(flood)  # paused at once if the server is already past its bound
        if not flood.paused:
            flood.resume_reading()  # reads until a bound pauses it
    client = Reader(bound, 7, holds=1)
    bound.add(client)  # the server is past its bound: paused at once
    assert client.paused
    running = [r for r in floods for _ in range(r.taken)]
    for _ in range(1000):  # the model answers one request at a time
        if client.taken:
            break
        answered = running.pop(0)
        before = {r: r.taken for r in floods}
        bound.give(answered)
        running += [r for r in floods for _ in range(r.taken - before[r])]
    assert client.taken == 1, "the client was never resumed"
    assert bound.count <= TOTAL + PER_CONNECTION
