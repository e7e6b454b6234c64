"""The server's frontend processes, wired to its core (app.py calls `start`)."""

from __future__ import annotations

from collections.abc import Sequence

from pbserve.core.api import InferenceCore
from pbserve.core.manager import ModelManager
from pbserve.core.observability.log_settings import SERVER_LOG
from pbserve.core.stub_calls.remote import in_parent_blocks
from pbserve.core.types import InferResponse
from pbserve.frontends.calls import CoreCalls
from pbserve.frontends.channel import CoreEnd
from pbserve.frontends.link import FrontendLink
from pbserve.frontends.processes import FrontendProcesses
from pbserve.frontends.slots import FrontendSlots
from pbserve.server.endpoints import Endpoints


async def start(slots: FrontendSlots, core: InferenceCore, manager: ModelManager,
                endpoints: Endpoints, argv: Sequence[str]) -> FrontendProcesses:
    """A frontend process in each of `slots`, serving `core` (the manager's models, or a
    worker's node) on the HTTP and gRPC sockets of `endpoints`; `argv`: the server's
    flags."""
    peers = manager.peers

    def in_core_blocks(response: InferResponse) -> InferResponse:
        assert peers.refs is not None
        return in_parent_blocks(response, peers.refs)

    def make_link(name: str, channel: CoreEnd, calls: CoreCalls) -> FrontendLink:
        link = FrontendLink(name, channel, core, peers.regions, in_core_blocks, calls)
        link.on_regions_gone = peers.regions_gone  # type: ignore[assignment]
        return link

    def on_link(old: FrontendLink | None, new: FrontendLink | None) -> None:
        if old is not None:
            SERVER_LOG.detach(old)
            peers.remove(old, old.channel.prefix)
        if new is not None:
            peers.add(new)
            SERVER_LOG.attach(new)

    processes: FrontendProcesses | None = None
    calls = CoreCalls(SERVER_LOG.update,
                      serving=lambda: processes is not None and processes.serving)
    processes = FrontendProcesses(slots, core, endpoints, argv, make_link, calls)
    processes.on_link = on_link
    processes.on_slot_gone = manager.frontend_gone
    await processes.start()
    return processes
