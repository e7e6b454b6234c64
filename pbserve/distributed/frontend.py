"""A frontend's InferenceCore backed by the request plane instead of local models.

The index, metadata, config and readiness come from the registry (registry.py); a
request is published to its model's subject and its responses read from its own inbox.
A request whose worker is gone from the registry (killed: no heartbeat within the TTL;
or started again under its name: another process token) fails with UNAVAILABLE naming
that worker. A model whose entries lapsed (its workers went silent) is UNAVAILABLE, not
unknown, and so is every model while no worker has joined (the registry empty). A
request that leaves (client gone, gRPC cancel) broadcasts a cancellation the worker
passes on to the model. While the connection to
the NATS server is down, requests fail at once with UNAVAILABLE naming the plane, and
those in flight when it went down fail too (what the server held is lost with it).
Statistics are the workers' own, summed (statistics.py). Inputs too large to go inline
are held here for the worker to pull (data_plane.py) until the request ends; outputs a
worker holds are pulled from it before the response is returned.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, AsyncIterator, Callable

import nats.errors
from nats.aio.client import Client
from nats.js import JetStreamContext

from pbserve import __version__
from pbserve.core.manager import EXTENSIONS, READY
from pbserve.core.memory.shared_memory import SharedMemoryManager
from pbserve.core.types import InferRequest, InferResponse
from pbserve.distributed.codec import decode_accepted, decode_response, encode_request
from pbserve.distributed.data_plane import DataPlane, HeldGroup
from pbserve.distributed.model_control import PlaneControl
from pbserve.distributed.registry import Entry, RegistryView
from pbserve.distributed.request_plane import (
    CANCEL_SUBJECT, REPLY_HEADER, Plane, infer_subject)
from pbserve.distributed.statistics import gather, gather_metrics
from pbserve.errors import ErrorCode, ServerError, not_found, unavailable
from shm.pool import RegionMap

# What a frontend does not do (yet): shared memory is the workers'. The repository
# extension is there when the workers answer it (model_control.py).
_FRONTEND_EXTENSIONS = [e for e in EXTENSIONS if e != "system_shared_memory"]
FRONTEND_SHM_REFUSED = (
    "Client shared memory is not supported by a pbserve frontend of the request plane "
    "(--request-plane without --model-repository): a client's region is memory of the "
    "host its model runs on. Send the tensors in the request, or register the region "
    "with the worker's own HTTP or gRPC endpoint on that host")


class PlaneCore:
    """InferenceCore for a frontend with no models of its own."""

    def __init__(self, nc: Client, js: JetStreamContext, registry: RegistryView,
                 check_s: float, data_plane: DataPlane, plane: Plane | None = None) -> None:
        self._nc = nc
        self._data_plane = data_plane
        self._plane = plane
        self._js = js
        self._registry = registry
        self._check_s = check_s  # how often a waiting request checks on its worker
        self.control: PlaneControl | None = None  # the repository API (set by Node)
        # Clients' shared memory is local to a worker's host: refused here.
        self.shared_memory = SharedMemoryManager(RegionMap(), lambda token: None,
                                                 allow_client_shm=False,
                                                 refusal=FRONTEND_SHM_REFUSED)

    # -- health and metadata -------------------------------------------------------------
    def is_live(self) -> bool:
        return True

    async def is_ready(self) -> bool:
        return self._nc.is_connected

    def server_metadata(self) -> dict[str, Any]:
        extensions = [e for e in _FRONTEND_EXTENSIONS
                      if e != "model_repository" or self.control is not None]
        return {"name": "triton", "version": __version__, "extensions": extensions}

    def _entry(self, name: str, version: str = "") -> Entry:
        """A ready entry of `name` (holding `version` if one is asked for), with the
        versions of every worker; NOT_FOUND as the local manager says it."""
        entries = self._registry.of_model(name)
        ready = [e for e in entries if e["state"] == READY and e["metadata"]]
        if not ready:
            self._check_plane(name)  # the registry empties while the plane is away
            if not entries:
                self._check_lapsed(name)
            self._check_workers(name)
            suffix = " is not found" if not entries else " has no available versions"
            raise not_found(f"Request for unknown model: '{name}'{suffix}")
        if version:
            ready = [e for e in ready if version in e["versions"]]
            if not ready:
                raise not_found(f"Request for unknown model: '{name}' version {version} "
                                f"is not found")
        return ready[0]

    def _check_lapsed(self, name: str) -> None:
        """UNAVAILABLE for a model whose workers stopped refreshing its entries (killed,
        or not back yet after a NATS server restart): it is not unknown, it is away."""
        gone = sorted({e["worker"] for e in self._registry.lapsed(name)})
        if gone:
            names = ", ".join(f"'{w}'" for w in gone)
            raise unavailable(f"no worker serves model '{name}' now: worker {names} serving "
                              f"it is gone (no heartbeat within the registry's TTL)")

    def _check_workers(self, name: str) -> None:
        """UNAVAILABLE while the registry is empty: no worker has joined (yet, or any
        more), so no model can be said not to exist."""
        if not self._registry.entries:
            where = f" {self._plane.url}" if self._plane is not None else ""
            raise unavailable(f"no worker serves model '{name}': the registry of request "
                              f"plane{where} is empty (no worker has joined)")

    def _versions(self, name: str) -> list[str]:
        versions = {v for e in self._registry.of_model(name) if e["state"] == READY
                    for v in e["versions"]}
        return sorted(versions, key=int)

    async def model_ready(self, name: str, version: str = "") -> bool:
        return self._serves(name, version)

    def _serves(self, name: str, version: str = "") -> bool:
        """Whether a ready worker serves the model (as the registry says)."""
        try:
            self._entry(name, version)
        except ServerError:
            return False
        return True

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        return {**self._entry(name, version)["metadata"], "versions": self._versions(name)}

    def model_config(self, name: str, version: str = "") -> dict[str, Any]:
        return self._entry(name, version)["config"]

    def input_placer(self) -> None:
        """No pool of its own: requests are gathered in memory and sent on."""
        return None

    def model_handle(self, name: str, version: str = "") -> "PlaneModel":
        return PlaneModel(self, name, version, self.is_decoupled(name, version))

    def is_decoupled(self, name: str, version: str = "") -> bool:
        policy = self._entry(name, version)["config"].get("model_transaction_policy") or {}
        return bool(policy.get("decoupled"))

    def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        index = []
        for name in sorted({e["model"] for e in self._registry.entries}):
            versions = self._versions(name)
            if versions:
                index += [{"name": name, "version": v, "state": READY, "reason": ""}
                          for v in versions]
            elif not ready_only:
                entry = self._registry.of_model(name)[0]
                index.append({"name": name, "state": entry["state"],
                              "reason": entry["reason"]})
        return index

    async def load_model(self, name: str, config: str | None = None,
                         files: dict[str, bytes] | None = None) -> None:
        """On the workers whose repository holds the model (model_control.py)."""
        await self._control().load(name, config, files)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        await self._control().unload(name, unload_dependents)

    def _control(self) -> "PlaneControl":
        if self.control is None:
            raise unavailable("explicit model load / unload is not supported here")
        return self.control

    async def model_statistics(self, name: str, version: str = "") -> list[dict[str, Any]]:
        """Triton's statistics extension: the model's figures summed over the workers
        that serve it (NOT_FOUND as `model_metadata` for an unknown model)."""
        self._check_plane(name)  # first: the registry empties while it is away
        self._entry(name, version)
        workers = sorted({e["worker"] for e in self._registry.of_model(name)
                          if e["state"] == READY and (not version or version in e["versions"])})
        return await gather(self._nc, workers, name, version)

    async def metrics_text(self) -> str:  # type: ignore[override]
        """Triton's nv_inference_* families of every model on the plane, each model
        version's counters summed over the workers that serve it (as statistics)."""
        if self._plane is not None and not self._plane.connected:
            return ""  # nothing to say while the plane is away (statistics: UNAVAILABLE)
        return await gather_metrics(self._nc, sorted(self._registry.workers))

    # -- inference ---------------------------------------------------------------------------
    async def infer(self, request: InferRequest) -> InferResponse:
        payload, held = self._encode(request, stream=False)
        call = self._call(request.model_name, payload, held, request.timeout_us)
        async with contextlib.aclosing(call) as responses:
            async for response in responses:
                return response
        raise ServerError(ErrorCode.INTERNAL, "no response from the worker")

    def stream_infer(self, request: InferRequest,
                     on_inbox: Callable[[str], None] | None = None
                     ) -> AsyncIterator[InferResponse]:
        """Refuses an unknown model or a bad request at once, as the local manager.
        `on_inbox` gets the request's inbox once it is sent (for `ask_to_cancel`)."""
        payload, held = self._encode(request, stream=True)
        return self._call(request.model_name, payload, held, request.timeout_us, on_inbox)

    async def ask_to_cancel(self, inbox: str) -> None:
        """Cancel the request of `inbox` while its caller reads on: the worker passes the
        cancellation to the model and ends the stream with a CANCELLED response."""
        with contextlib.suppress(nats.errors.Error):
            await self._nc.publish(CANCEL_SUBJECT, inbox.encode())

    def _encode(self, request: InferRequest, stream: bool) -> tuple[bytes, HeldGroup]:
        """The request's message, and the group holding its large inputs."""
        self._check_plane(request.model_name)  # first: the registry empties while away
        self._entry(request.model_name, request.model_version)
        if request.uses_shm:
            raise ServerError(ErrorCode.UNSUPPORTED, FRONTEND_SHM_REFUSED)
        held = self._data_plane.group()
        try:
            payload = encode_request(request, stream, held)
            if len(payload) > self._nc.max_payload:
                raise ServerError(ErrorCode.UNSUPPORTED, f"request of {len(payload)} bytes"
                                  f" exceeds the request plane's max payload of "
                                  f"{self._nc.max_payload} bytes (its header and "
                                  f"parameters: tensors go by the data plane)")
        except BaseException:
            held.free()
            raise
        held.close()
        return payload, held

    async def _call(self, model: str, payload: bytes, held: HeldGroup, timeout_us: int = 0,
                    on_inbox: Callable[[str], None] | None = None
                    ) -> AsyncIterator[InferResponse]:
        """Publish the request, then yield its responses until the final one. A request
        no worker took within its `timeout_us` fails as a queued one does locally. The
        inputs `held` for the worker are freed when the call ends."""
        deadline = time.monotonic() + timeout_us / 1e6 if timeout_us else None
        try:
            self._check_plane(model)
            losses = self._plane.losses if self._plane is not None else 0
            inbox = self._nc.new_inbox()
            sub = await self._nc.subscribe(inbox)
        except BaseException:
            held.free()
            raise
        if on_inbox is not None:
            on_inbox(inbox)
        worker, instance, done = "", "", False
        try:
            try:
                await self._js.publish(infer_subject(model), payload,
                                       headers={REPLY_HEADER: inbox})
            except (nats.errors.Error, OSError) as err:
                where = f" {self._plane.url}" if self._plane is not None else ""
                raise unavailable(f"request plane{where} unavailable for model '{model}': "
                                  f"{err or type(err).__name__}") from None
            while not done:
                wait = self._check_s
                if not worker and deadline is not None:
                    wait = max(0.001, min(wait, deadline - time.monotonic()))
                try:
                    msg = await sub.next_msg(timeout=wait)
                except nats.errors.TimeoutError:
                    self._check_plane(model, losses)
                    self._check_worker(model, worker, instance)
                    if not worker and deadline is not None and time.monotonic() > deadline:
                        raise unavailable("Request timeout expired") from None
                    continue
                response, sender = decode_response(msg.data)
                if response is None:
                    worker, instance = decode_accepted(msg.data) or (sender, "")
                    continue
                await self._data_plane.fill(response.outputs, f"worker '{sender}'")
                done = response.final
                yield response
        finally:
            held.free()
            if not done:  # the client left, or the worker is gone: tell whoever has it
                with contextlib.suppress(nats.errors.Error):
                    await self._nc.publish(CANCEL_SUBJECT, inbox.encode())
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()

    def _check_plane(self, model: str, losses: int | None = None) -> None:
        """UNAVAILABLE naming the plane while it is not connected, or (`losses`: its
        count when the request was sent) when it was lost since: the server may have
        lost the request or its answer with it."""
        plane = self._plane
        if plane is None:
            return
        if not plane.connected:
            raise unavailable(f"request plane {plane.url} is not connected (reconnecting): "
                              f"model '{model}' cannot be reached")
        if losses is not None and plane.losses != losses:
            raise unavailable(f"request plane {plane.url} connection lost while the "
                              f"request for model '{model}' was in flight")

    def _check_worker(self, model: str, worker: str, instance: str = "") -> None:
        """UNAVAILABLE when the worker that took the request (or, before one did, every
        worker of the model) has left the registry, or was started again under its
        name (its entries hold another process's `instance`)."""
        if worker:
            instances = self._registry.instances(worker)
            if not instances:
                raise unavailable(f"worker '{worker}' serving model '{model}' is gone: "
                                  f"no heartbeat within the registry's TTL")
            if instance and "" not in instances and instance not in instances:
                raise unavailable(f"worker '{worker}' serving model '{model}' is gone: "
                                  f"it was started again (a new process has its name)")
        if not worker and not self._serves(model):
            raise unavailable(f"no worker serves model '{model}' any more")


class PlaneModel:
    """A model some worker serves, resolved for one request (api.ModelHandle)."""

    __slots__ = ("_plane", "_name", "_version", "decoupled")

    def __init__(self, plane: PlaneCore, name: str, version: str, decoupled: bool) -> None:
        self._plane = plane
        self._name = name
        self._version = version
        self.decoupled = decoupled

    def expect(self) -> None:
        """Nothing to get ready here: the model runs on a worker."""

    @property
    def batched(self) -> bool:
        config = self._plane.model_config(self._name, self._version)
        return int(config.get("max_batch_size") or 0) > 0

    def output_labels(self, output: str) -> list[bytes] | None:
        """A label file lies in the model's directory on its worker's host: not here.
        (An ensemble's output labelled by its step's file is not known here: None.)"""
        config = self._plane.model_config(self._name, self._version)
        for io in config.get("output") or ():
            if io.get("name") == output and io.get("label_filename"):
                raise ServerError(
                    ErrorCode.UNSUPPORTED,
                    f"output '{output}' of model '{self._name}' has labels "
                    f"('{io['label_filename']}'), which a frontend of the request plane "
                    f"cannot read: they are in the model's directory on its worker. Ask "
                    f"the worker's own HTTP or gRPC endpoint for its classification")
        return None

    async def infer(self, request: InferRequest, descs: tuple | None = None
                    ) -> InferResponse:
        """`descs` unused: the inputs are sent by value (their `data`)."""
        return await self._plane.infer(request)

    def stream_infer(self, request: InferRequest, descs: tuple | None = None
                     ) -> AsyncIterator[InferResponse]:
        return self._plane.stream_infer(request)
