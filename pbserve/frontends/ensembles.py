"""A frontend process running an ensemble's requests itself: the graph walked here,
each step a request to its model as this frontend sends any (LinkedModel: straight to
the model's stubs where the core offers that, through the core otherwise), so that a
3-step ensemble of such models never passes through the core.

The same `EnsembleRequests` the core runs (core/ensemble/requests.py), with this
process's two seams: the inputs go into this frontend's pool, and what the requests add
to the ensemble's statistics is told to the core with the direct requests' figures
(DirectPath.count). Which ensembles the core lets a frontend run:
EnsembleModel.direct_route.
"""

from __future__ import annotations

from collections.abc import Callable

from tritonclient.grpc import model_config_pb2 as mc

from pbserve.core.ensemble.requests import EnsembleRequests, FindModel
from pbserve.core.ensemble.steps import ensemble_graph
from pbserve.core.observability.metrics import CANCELED
from pbserve.core.types import TensorData
from pbserve.errors import unavailable
from pbserve.frontends.placer import block_of
from shm import Block, Pool, ShmExhausted

# count(model, version, batch size, failed, took ns, steps' ns); cancelled(model,
# version, batch size): DirectPath's
Count = Callable[[str, str, int, bool, int, int], None]
Cancelled = Callable[[str, str, int], None]


class FrontendInputs:
    """An ensemble's inputs in this frontend's pool (EnsembleRequests' InputStore):
    the block a decoder gathered a tensor into, or a copy."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def store(self, tensor: TensorData) -> Block:
        try:
            return block_of(tensor, self._pool)
        except ShmExhausted as err:
            raise unavailable(f"no room in shared memory for the request's inputs: {err}"
                              ) from None

    def view(self, block: Block) -> memoryview:
        return self._pool.view(block)

    def free(self, block: Block) -> None:
        self._pool.free(block.region, block.offset)


class FrontendCounts:
    """An ensemble's statistics as this frontend adds them up (EnsembleCounts). The
    pending count is the core's alone; a run aborted by something else than its
    client (no room for its inputs) is counted by nobody, as for a direct request."""

    def __init__(self, name: str, version: str, count: Count, cancelled: Cancelled
                 ) -> None:
        self._name, self._version = name, version
        self._count = count
        self._cancelled = cancelled

    def started(self) -> None:
        pass

    def ended(self) -> None:
        pass

    def ran(self, batch: int, took_ns: int, step_ns: int, failed: bool) -> None:
        self._count(self._name, self._version, batch, failed, took_ns,
                    0 if failed else step_ns)

    def aborted(self, reason: str) -> None:
        if reason == CANCELED:
            self._cancelled(self._name, self._version, 1)


def frontend_ensemble(name: str, version: str, cfg: mc.ModelConfig, find_model: FindModel,
                      pool: Pool, count: Count, cancelled: Cancelled) -> EnsembleRequests:
    """The requests of ensemble `name` as this frontend runs them; `find_model`: a step's
    model as this frontend reaches it (LinkedCore.model_handle)."""
    return EnsembleRequests(name, version, cfg, ensemble_graph(cfg), find_model,
                            FrontendInputs(pool), FrontendCounts(name, version, count,
                                                                 cancelled))
