"""`ResponseIterator`: the stream of responses of a BLS call to a decoupled model.

The runtime feeds it from its own thread with `_put`; the model reads it with a
blocking `for` (Triton's API) or, a pbserve addition, with `async for`, which
waits without blocking the event loop. Every response is yielded, the last one
included (it may be empty); a finished iterator can be iterated again.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from .response import InferenceResponse


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class ResponseIterator:
    """Built by the runtime for `exec(decoupled=True)`; `cancel` asks the callee to stop."""

    def __init__(self, cancel: Callable[[], None] | None = None) -> None:
        self._cancel = cancel
        self._cond = threading.Condition()
        self._responses: list[InferenceResponse] = []
        self._next = 0
        self._finished = False
        self._async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def _put(self, response: InferenceResponse | None, is_last: bool) -> None:
        """Append a response (thread-safe). A flags-only last message is `(None, True)`
        and becomes an empty response, as in Triton."""
        if response is None:
            if not is_last:
                raise TypeError("only the last message of a stream may come without a response")
            response = InferenceResponse._incoming(output_tensors=[])
        with self._cond:
            if self._finished:
                raise RuntimeError("ResponseIterator already received its last response")
            self._responses.append(response)
            self._finished = bool(is_last)
            self._cond.notify_all()
            waiters, self._async_waiters = self._async_waiters, []
        for loop, future in waiters:
            try:
                loop.call_soon_threadsafe(_wake, future)
            except RuntimeError:  # that loop is closed; nobody is waiting any more
                pass

    def __iter__(self) -> ResponseIterator:
        with self._cond:
            if self._finished and self._next >= len(self._responses):
                self._next = 0
        return self

    def __next__(self) -> InferenceResponse:
        """The next response; blocks until it arrives."""
        with self._cond:
            while True:
                if self._next < len(self._responses):
                    response = self._responses[self._next]
                    self._next += 1
                    return response
                if self._finished:
                    raise StopIteration
                self._cond.wait()

    def __aiter__(self) -> ResponseIterator:
        return self.__iter__()

    async def __anext__(self) -> InferenceResponse:
        """The next response, awaited without blocking the event loop."""
        while True:
            with self._cond:
                if self._next < len(self._responses):
                    response = self._responses[self._next]
                    self._next += 1
                    return response
                if self._finished:
                    raise StopAsyncIteration
                future = self._async_waiter()
            await future

    async def _first_response(self) -> None:
        """Until a response (or the end) is in, awaited without blocking the event loop;
        nothing is consumed. `await async_exec(decoupled=True)` resolves then, as Triton's."""
        while True:
            with self._cond:
                if self._responses or self._finished:
                    return
                future = self._async_waiter()
            await future

    def _async_waiter(self) -> asyncio.Future[None]:
        """A future of the running loop that the next `_put` completes (lock held)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._async_waiters.append((loop, future))
        return future

    def cancel(self) -> None:
        """Ask the server to cancel the in-flight BLS request; no-op once finished."""
        with self._cond:
            finished = self._finished
        if not finished and self._cancel is not None:
            self._cancel()

    def _is_finished(self) -> bool:
        with self._cond:
            return self._finished

    def __repr__(self) -> str:
        return (
            f"ResponseIterator(received={len(self._responses)}, finished={self._finished})"
        )
