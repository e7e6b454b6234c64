"""Which queued requests may share a dynamic batch: Triton's RequiredEqualInputs (core
src/scheduler_utils.cc) over the inputs its backend model asks it to compare
(src/backend_model.cc, the scheduler's `enforce_equal_shape_tensors`).

Triton batches only requests whose inputs have equal shapes (past the batch dimension)
for every config input that has a variable dimension (-1) and is not marked
`allow_ragged_batch`; an input of fixed dims needs no check. When a config input is
`optional`, the requests of a batch must also name the same inputs. The batcher
(scheduler.py `choose_batch`) closes a forming batch at the first request whose key
differs from the batch's first request's: that batch is sent, and the request starts
the next one. (Shape tensors, whose contents Triton compares too, exist only for
TensorRT models, which pbserve refuses at load.)
"""

from __future__ import annotations

from collections.abc import Hashable

from tritonclient.grpc import model_config_pb2 as mc

from pbserve.core.config.config_checks import WILDCARD_DIM
from pbserve.core.types import InferRequest


class EqualInputs:
    """A model's rule of equal inputs within a batch, built once from its config."""

    __slots__ = ("_batch_dim", "_compared", "_optional", "needed")

    def __init__(self, cfg: mc.ModelConfig) -> None:
        self._batch_dim = cfg.max_batch_size > 0
        # the inputs whose shapes must be equal: variable dims, not ragged
        self._compared = frozenset(io.name for io in cfg.input
                                   if WILDCARD_DIM in io.dims and not io.allow_ragged_batch)
        self._optional = any(io.optional for io in cfg.input)
        # False: every request may join any batch (no key is needed)
        self.needed = bool(self._compared) or self._optional

    def key(self, request: InferRequest) -> Hashable:
        """What must be equal for two requests to share a batch: the shapes of the
        compared inputs (without the batch dim) and, when the model has optional inputs,
        the names of the inputs the request carries. None when the rule is not needed."""
        if not self.needed:
            return None
        skip = 1 if self._batch_dim else 0
        shapes = tuple(sorted((t.name, tuple(t.shape[skip:])) for t in request.inputs
                              if t.name in self._compared))
        if not self._optional:
            return shapes
        return shapes, frozenset(t.name for t in request.inputs)
