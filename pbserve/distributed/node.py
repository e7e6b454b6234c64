"""One process on the plane: its connection, and its worker or frontend role.

`pbserve --request-plane URL --model-repository REPO` is a worker (its models served to
the plane, and its own HTTP/gRPC as before); with no repository it is a frontend whose
InferenceCore is the plane (frontend.py). A worker reaches the models it does not have
through the plane too (remote_models.py): from its HTTP/gRPC and from its models' BLS
calls.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from nats.js import JetStreamContext

from pbserve.core.manager import ModelManager
from pbserve.distributed.data_plane import DataPlane, split_address
from pbserve.distributed.frontend import PlaneCore
from pbserve.distributed.model_control import ControlResponder, PlaneControl
from pbserve.distributed.remote_models import PlaneModels, RoutingCore
from pbserve.distributed.registry import Registry, RegistryView, open_bucket
from pbserve.distributed.request_plane import ConnectionOptions, Plane, request_stream
from pbserve.distributed.worker import PlaneWorker
from pbserve.distributed.worker_log import WorkerLog

# The registry TTL is this many heartbeats: one late beat does not drop a worker.
TTL_BEATS = 3
# Bytes of a message kept for its JSON header: inline tensors get the rest.
HEADER_ROOM = 64 * 1024


@dataclass(frozen=True)
class DataPlaneSettings:
    """The data plane's flags: `--data-plane-address`, `--plane-inline-max-bytes`,
    `--data-plane-ttl-secs`, and `--http-max-input-size` (the most bytes a worker
    pulls for one request)."""

    address: str = "127.0.0.1"
    inline_max: int = 64 * 1024
    ttl_s: float = 60.0
    max_input_bytes: int = 64 * 1024 * 1024


def default_worker_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Node:
    def __init__(self, plane: Plane, worker: PlaneWorker | None,
                 core: PlaneCore | RoutingCore | None, view: RegistryView | None,
                 data_plane: DataPlane) -> None:
        self._plane = plane
        self._data_plane = data_plane
        self.worker = worker
        self.core = core
        self._view = view
        self._control: ControlResponder | None = None  # a worker's load/unload answers

    @classmethod
    async def start(cls, url: str, manager: ModelManager | None, heartbeat_s: float,
                    name: str = "", options: ConnectionOptions | None = None,
                    control_mode: str = "none",
                    data_plane: DataPlaneSettings | None = None) -> "Node":
        """Connect (PlaneConnectError if that fails); serve `manager`'s models, or
        (None) be a frontend whose repository API (`control_mode` explicit) asks the
        workers."""
        name = name or default_worker_name()
        settings = data_plane or DataPlaneSettings()
        plane = Plane(url)
        await plane.connect(f"pbserve {'worker' if manager else 'frontend'} {name}", options)
        nc = plane.nc
        ttl_s = TTL_BEATS * heartbeat_s
        data = None
        try:
            host, port = split_address(settings.address)
            # What goes inline in all: what a message may carry, less room for its header.
            budget = max(0, nc.max_payload - HEADER_ROOM)
            data = DataPlane(host, port, min(settings.inline_max, budget), budget,
                             settings.ttl_s)
            await data.start()
            js = await request_stream(nc)
            kv = await open_bucket(js, ttl_s)
            # a frontend logs the workers it sees come and go (worker_log.py)
            view = RegistryView(kv, ttl_s=ttl_s,
                                on_change=WorkerLog(ttl_s).changed if manager is None else None)
            await view.start()
            core = PlaneCore(nc, js, view, check_s=heartbeat_s / 2, data_plane=data,
                             plane=plane)
            if manager is None:
                core.control = PlaneControl(nc, view, control_mode, heartbeat_s / 2)
                plane.on_reconnect(lambda: _restore_view(js, ttl_s, view))
                return cls(plane, None, core, view, data)
            worker = PlaneWorker(manager, nc, js, Registry(kv, name), heartbeat_s, data,
                                 settings.max_input_bytes)
            manager.route_missing_to(PlaneModels(core))
            node = cls(plane, worker, RoutingCore(manager, core), view, data)
            node._control = ControlResponder(manager, nc, name, worker.sync)
            await worker.start()
            await node._control.start()
            plane.on_reconnect(lambda: _restore_worker(js, ttl_s, worker, view))
            return node
        except BaseException:
            if data is not None:
                await data.stop()
            await plane.close()
            raise

    async def stop_serving(self, grace_s: float) -> None:
        """A worker leaves the registry and finishes its requests (before the models go)."""
        if self._control is not None:
            await self._control.stop()
        if self.worker is not None:
            await self.worker.stop(grace_s)
            # Outputs of the last responses, held for their callers: pulled, or freed
            # (with the shared memory they are in) before the models go.
            await self._data_plane.drain(grace_s)
            await self._data_plane.stop()

    async def close(self) -> None:
        if self._view is not None:
            await self._view.stop()
        await self._data_plane.stop()
        await self._plane.close()


async def _restore_worker(js: JetStreamContext, ttl_s: float, worker: PlaneWorker,
                          view: RegistryView) -> None:
    """After a reconnection: the bucket again, this worker's entries in it at once, and
    its view of the other workers' models (for routing) watched again."""
    await open_bucket(js, ttl_s)
    await worker.sync()
    await view.restart()


async def _restore_view(js: JetStreamContext, ttl_s: float, view: RegistryView) -> None:
    await open_bucket(js, ttl_s)
    await view.restart()
