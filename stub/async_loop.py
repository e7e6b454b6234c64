"""The stub's dedicated asyncio loop thread for `async def execute`.

Created on first use; the main loop hands coroutines over and goes on. A coroutine's
exception is logged with its traceback by a done callback, and `on_error` lets the
owner fail the requests it left open.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import traceback
from typing import Callable, Coroutine


class AsyncLoopThread:
    def __init__(self, log_error: Callable[[str], None]) -> None:
        self._log_error = log_error
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pending: set[concurrent.futures.Future] = set()

    @property
    def thread_id(self) -> int | None:
        return self._thread.ident if self._thread else None

    def _ensure(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            self._thread = threading.Thread(target=run, name="pbserve-async-execute",
                                            daemon=True)
            self._thread.start()
            ready.wait()
            self._loop = loop
        return self._loop

    def submit(self, coro: Coroutine, on_error: Callable[[BaseException], None]
               ) -> concurrent.futures.Future:
        """Run `coro` on the loop; its exception is logged and passed to `on_error`."""
        future = asyncio.run_coroutine_threadsafe(coro, self._ensure())
        self._pending.add(future)
        future.add_done_callback(lambda f: self._done(f, on_error))
        return future

    def _done(self, future: concurrent.futures.Future,
              on_error: Callable[[BaseException], None]) -> None:
        self._pending.discard(future)
        if future.cancelled():
            on_error(asyncio.CancelledError("the request was cancelled"))
            return
        exc = future.exception()
        if exc is None:
            return
        text = "".join(traceback.TracebackException.from_exception(exc).format())
        self._log_error(f"async execute raised an exception:\n{text.rstrip()}")
        on_error(exc)

    def close(self, timeout: float = 5.0) -> None:
        """Cancel pending coroutines, wait for them, stop and close the loop."""
        loop = self._loop
        if loop is None:
            return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(timeout)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout)
        if not loop.is_running():
            loop.close()
        self._loop = None
