"""One process on the plane: its connection, and its worker or frontend role.

`pbserve --request-plane URL --model-repository REPO` is a worker (its models served to
the plane, and its own HTTP/gRPC as before); with no repository it is a frontend whose
InferenceCore is the plane (frontend.py). A worker reaches the models it does not have
through the plane too (remote_models.py): from its HTTP/gRPC and from its models' BLS
calls.
"""

from __future__ import annotations

import contextlib
import os
import socket

import nats.errors
from nats.aio.client import Client

from pbserve.backend.manager import ModelManager
from pbserve.distributed.frontend import PlaneCore
from pbserve.distributed.model_control import ControlResponder, PlaneControl
from pbserve.distributed.remote_models import PlaneModels, RoutingCore
from pbserve.distributed.registry import Registry, RegistryView, open_bucket
from pbserve.distributed.request_plane import connect, request_stream
from pbserve.distributed.worker import PlaneWorker

# The registry TTL is this many heartbeats: one late beat does not drop a worker.
TTL_BEATS = 3


def default_worker_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Node:
    def __init__(self, nc: Client, worker: PlaneWorker | None,
                 core: PlaneCore | RoutingCore | None, view: RegistryView | None) -> None:
        self._nc = nc
        self.worker = worker
        self.core = core
        self._view = view
        self._control: ControlResponder | None = None  # a worker's load/unload answers

    @classmethod
    async def start(cls, url: str, manager: ModelManager | None, heartbeat_s: float,
                    name: str = "", control_mode: str = "none") -> "Node":
        """Connect; serve `manager`'s models, or (None) be a frontend whose repository
        API (`control_mode` explicit) asks the workers."""
        name = name or default_worker_name()
        nc = await connect(url, f"pbserve {'worker' if manager else 'frontend'} {name}")
        try:
            js = await request_stream(nc)
            kv = await open_bucket(js, TTL_BEATS * heartbeat_s)
            view = RegistryView(kv, ttl_s=TTL_BEATS * heartbeat_s)
            await view.start()
            plane = PlaneCore(nc, js, view, check_s=heartbeat_s / 2)
            if manager is None:
                plane.control = PlaneControl(nc, view, control_mode, heartbeat_s / 2)
                return cls(nc, None, plane, view)
            worker = PlaneWorker(manager, nc, js, Registry(kv, name), heartbeat_s)
            manager.route_missing_to(PlaneModels(plane))
            node = cls(nc, worker, RoutingCore(manager, plane), view)
            node._control = ControlResponder(manager, nc, name, worker.sync)
            await worker.start()
            await node._control.start()
            return node
        except BaseException:
            await nc.close()
            raise

    async def stop_serving(self, grace_s: float) -> None:
        """A worker leaves the registry and finishes its requests (before the models go)."""
        if self._control is not None:
            await self._control.stop()
        if self.worker is not None:
            await self.worker.stop(grace_s)

    async def close(self) -> None:
        if self._view is not None:
            await self._view.stop()
        with contextlib.suppress(nats.errors.Error):
            await self._nc.drain()
