"""Repository load / unload through a frontend (`--model-control-mode explicit`).

The frontend asks every worker of the registry, each on its own subject
(`pbserve.control.<worker>`); a worker whose repository holds the model (or that has it
loaded, or that is sent the model's files) loads or unloads it with its own manager,
puts its registry entries again, then answers. The frontend reads those entries back
before it answers the client, so the index, readiness and metadata it serves next
already show the outcome. A load that no worker's repository holds fails as a local
load of an absent model does; the first error of a worker is the client's.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from typing import Any, Awaitable, Callable

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from pbserve.core.manager import ModelManager
from pbserve.core.repository.repository import (
    check_explicit, check_model_name, scan_repositories)
from pbserve.distributed.registry import RegistryView
from pbserve.distributed.request_plane import token
from pbserve.errors import ErrorCode, ServerError, invalid_arg
from pbserve.task_stop import cancel_and_wait

log = logging.getLogger("pbserve.distributed")

CONTROL_PREFIX = "pbserve.control"
# How long a load may take on a worker that stays in the registry.
LOAD_TIMEOUT_S = 600.0


def control_subject(worker: str) -> str:
    return f"{CONTROL_PREFIX}.{token(worker)}"


class ControlResponder:
    """A worker's side: loads and unloads asked by frontends, then `sync` (its registry
    entries put again) before it answers."""

    def __init__(self, manager: ModelManager, nc: Client, worker: str,
                 sync: Callable[[], Awaitable[None]]) -> None:
        self._manager = manager
        self._nc = nc
        self._worker = worker
        self._sync = sync
        self._sub = None
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> None:
        self._sub = await self._nc.subscribe(control_subject(self._worker), cb=self._on_msg)

    async def stop(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(nats.errors.Error):
                await self._sub.unsubscribe()
        await cancel_and_wait(list(self._tasks))

    async def _on_msg(self, msg: Msg) -> None:
        # Each in its own task: a long load does not hold up the next message.
        task = asyncio.get_running_loop().create_task(self._answer(msg))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _holds(self, name: str) -> bool:
        if name in scan_repositories(self._manager.repositories).names():
            return True
        return any(row["name"] == name and row.get("state")
                   for row in self._manager.repository_index())

    async def _answer(self, msg: Msg) -> None:
        reply: dict[str, Any] = {"held": False, "error": None}
        try:
            ask = json.loads(msg.data)
            name = ask["model"]
            files = {k: base64.b64decode(v) for k, v in (ask.get("files") or {}).items()}
            if files or self._holds(name):
                reply["held"] = True
                if ask["op"] == "load":
                    await self._manager.load_model(name, ask.get("config"), files or None)
                else:
                    await self._manager.unload_model(name, bool(ask.get("unload_dependents")))
        except ServerError as err:
            reply["error"] = [int(err.code), err.message]
        except Exception as err:  # noqa: BLE001 - a bad message never ends the worker
            log.exception("worker '%s': model control failed", self._worker)
            reply["error"] = [int(ErrorCode.INTERNAL), f"{type(err).__name__}: {err}"]
        try:
            await self._sync()
        except (nats.errors.Error, asyncio.TimeoutError) as err:
            log.warning("worker '%s': registry not refreshed: %s", self._worker, err)
        with contextlib.suppress(nats.errors.Error):
            await msg.respond(json.dumps(reply).encode())


class PlaneControl:
    """A frontend's side: the repository API, answered by the workers."""

    def __init__(self, nc: Client, view: RegistryView, control_mode: str,
                 check_s: float) -> None:
        self._nc = nc
        self._view = view
        self._mode = control_mode
        self._check_s = check_s

    async def load(self, name: str, config: str | None = None,
                   files: dict[str, bytes] | None = None) -> None:
        check_explicit(self._mode)
        check_model_name(name)
        ask = {"op": "load", "model": name, "config": config,
               "files": {k: base64.b64encode(v).decode() for k, v in (files or {}).items()}}
        held = await self._ask_all(name, ask)
        if not held:
            raise invalid_arg(f"failed to load '{name}', failed to poll from model "
                              f"repository")

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        check_explicit(self._mode)
        await self._ask_all(name, {"op": "unload", "model": name,
                                   "unload_dependents": unload_dependents})

    async def _ask_all(self, name: str, ask: dict[str, Any]) -> list[str]:
        """Ask every worker; the workers that hold the model. Raises the first error."""
        workers = sorted(self._view.workers)
        payload = json.dumps(ask).encode()
        replies = await asyncio.gather(*(self._ask(w, payload) for w in workers))
        held = [w for w, reply in zip(workers, replies) if reply["held"]]
        await self._view.refresh(name, held)
        for reply in replies:
            if reply["error"]:
                code, message = reply["error"]
                raise ServerError(ErrorCode(code), message)
        return held

    async def _ask(self, worker: str, payload: bytes) -> dict[str, Any]:
        """One worker's answer; UNAVAILABLE if it leaves the registry first."""
        request = asyncio.get_running_loop().create_task(
            self._nc.request(control_subject(worker), payload, timeout=LOAD_TIMEOUT_S))
        try:
            while True:
                done, _ = await asyncio.wait({request}, timeout=self._check_s)
                if done:
                    break
                if worker not in self._view.workers:
                    request.cancel()
                    return {"held": True, "error": [
                        int(ErrorCode.UNAVAILABLE), f"worker '{worker}' is gone: no "
                        f"heartbeat within the registry's TTL"]}
            return json.loads(request.result().data)
        except nats.errors.NoRespondersError:  # left the plane in between
            return {"held": False, "error": None}
        except (nats.errors.Error, asyncio.TimeoutError) as err:
            return {"held": True, "error": [int(ErrorCode.UNAVAILABLE),
                                            f"worker '{worker}' did not answer: "
                                            f"{err or type(err).__name__}"]}
        finally:
            if not request.done():
                request.cancel()
