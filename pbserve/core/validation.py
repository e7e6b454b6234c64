"""An inference request checked against its model's config, as Triton's core does
before a backend sees it (InferenceRequest::Normalize, ValidateRequestInputs,
ValidateBytesInputs, ValidateCorrelationId in core src/infer_request.cc; the input
and output lookups in src/model.cc).

Checks run in Triton's order and fail with Triton's words, so a client sees the
same first error. `RequestValidator` is built once per loaded model; `validate` is
on every request's path and does dict lookups and tuple compares, nothing more,
unless the request is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2 as mc

from pbserve.core.config.config_checks import WILDCARD_DIM, sequence_control
from pbserve.core.config.model_config import ELEMENT_SIZE, INVALID_DATATYPE, datatype_of
from pbserve.core.types import Buffer, InferRequest, TensorData
from pbserve.errors import invalid_arg
from shm.tensor import BytesLayoutError, bytes_elements

_INT64_MAX = 2**63 - 1
_INVALID_SIZE = -2  # Triton's GetElementCount codes besides WILDCARD_DIM (-1)
_OVERFLOW_SIZE = -3
_UINT32_MASK = 0xFFFFFFFF  # Triton keeps the batch size in a uint32
_UNKNOWN_ID = "<id_unknown>"
_BATCH_NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch "
    "dimension to be prepended to each input shape. If you want to specify the full "
    "shape including the batch dim in your input dims config, try setting "
    "max_batch_size to zero. See the model configuration docs for more info on "
    "max_batch_size.")
# A request's correlation id is UINT64 (int) or STRING (str); which CORRID control
# types accept each.
_CORRID_CONTROL = mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_CORRID
# Kinds of request a validator remembers as passed (then it forgets them all).
PASSED_MAX = 256
_CORRID_ACCEPTS_INT = frozenset({mc.TYPE_UINT64, mc.TYPE_INT64, mc.TYPE_UINT32, mc.TYPE_INT32})


@dataclass(frozen=True, slots=True)
class _InputSpec:
    """One config input, prepared for per-request checks."""

    name: str
    datatype: str  # protocol name: "FP32", "BYTES"
    dims: tuple[int, ...]  # without the batch dimension
    has_wildcard: bool
    expected_text: str  # the "Expected [...]" of Triton's shape error
    reshape: tuple[int, ...] | None
    wildcard_positions: tuple[int, ...]
    element_size: int  # 0 for BYTES


class RequestValidator:
    """Checks requests for one model config (build it once per loaded model)."""

    def __init__(self, cfg: mc.ModelConfig) -> None:
        self.model_name = cfg.name
        self.max_batch_size = cfg.max_batch_size
        self._inputs: dict[str, _InputSpec] = {}
        for io in cfg.input:
            if io.name not in self._inputs:  # Triton's input map keeps the first
                self._inputs[io.name] = self._spec(io)
        self._input_count = len(cfg.input)
        self._required = tuple(io.name for io in cfg.input if not io.optional)
        self._outputs = frozenset(io.name for io in cfg.output)
        self.reshaped_inputs = frozenset(
            name for name, spec in self._inputs.items() if spec.reshape is not None)
        self._corrid_type: int | None = None
        self._corrid_tensor = ""
        # The inputs' names, datatypes, shapes and byte sizes, and the outputs asked
        # for, of requests that passed -> their batch size: a request like one of them
        # passes too (no input of type BYTES, whose check reads its data).
        self._passed: dict[tuple, int] = {}
        if cfg.HasField("sequence_batching"):
            tensor, dtype = sequence_control(cfg.sequence_batching, cfg.name, _CORRID_CONTROL)
            if tensor:
                self._corrid_type, self._corrid_tensor = dtype, tensor

    def _spec(self, io: mc.ModelInput) -> _InputSpec:
        dims = tuple(int(d) for d in io.dims)
        full = ((WILDCARD_DIM,) if self.max_batch_size > 0 else ()) + dims
        datatype = datatype_of(io.data_type)
        return _InputSpec(
            name=io.name, datatype=datatype, dims=dims, has_wildcard=WILDCARD_DIM in dims,
            expected_text=_dims_text(full),
            reshape=tuple(int(d) for d in io.reshape.shape) if io.HasField("reshape") else None,
            wildcard_positions=tuple(i for i, d in enumerate(dims) if d == WILDCARD_DIM),
            element_size=ELEMENT_SIZE.get(datatype, 0))

    # -- the request path ----------------------------------------------------

    def validate(self, request: InferRequest) -> int:
        """Raise ServerError(INVALID_ARG) with Triton's message for the first problem
        Triton would find; return the batch size (0 when the model does not batch)."""
        inputs = request.inputs
        requested = request.requested_outputs
        try:
            seen = (tuple([(t.name, t.datatype, t.shape, _nbytes(t.data)) for t in inputs]),
                    tuple(requested) if requested else ())
            batch = self._passed.get(seen)
        except TypeError:  # a shape given as a list: checked in full
            seen, batch = None, None
        if batch is None:
            batch = self._check(request, inputs, requested)
            if seen is not None and all([self._inputs[t.name].element_size for t in inputs]):
                if len(self._passed) >= PASSED_MAX:
                    self._passed.clear()
                self._passed[seen] = batch
        if self._corrid_type is not None:
            self._check_correlation_id(request)
        return batch

    def _check(self, request: InferRequest, inputs: list[TensorData],
               requested: Sequence[str] | None) -> int:
        """Every check of `validate` but the correlation id's."""
        by_name = {t.name: t for t in inputs}
        if len(by_name) != len(inputs):
            self._fail_repeated(request, [t.name for t in inputs], "input")
        if requested:
            self._check_requested_outputs(request, requested)
        count = len(inputs)
        if count > self._input_count or count < len(self._required):
            self._fail_input_count(request, by_name)
        batch = self._batch_of(request, inputs)
        for name in self._required:
            if name not in by_name:
                # Triton lets this through when an optional input makes up the count;
                # pbserve refuses it in Triton's words for a missing input.
                self._fail_input_count(request, by_name)
        if batch > self.max_batch_size:
            raise invalid_arg(f"{_prefix(request)}inference request batch-size must be <= "
                              f"{self.max_batch_size} for '{self.model_name}'")
        for tensor in inputs:
            self._check_tensor(request, tensor, self._inputs[tensor.name], batch)
        return batch

    def model_shape(self, tensor: TensorData, batch: int) -> tuple[int, ...]:
        """The shape the model sees for a validated input: the config's `reshape`
        applied (batch dim kept), as Triton hands it to the backend. Only inputs
        named in `reshaped_inputs` change."""
        spec = self._inputs[tensor.name]
        full = tuple(tensor.shape)
        if spec.reshape is None:
            return full
        shape = _reshaped(spec, full[1:] if self.max_batch_size > 0 else full)
        return shape if batch == 0 else (batch, *shape)

    def batch_size(self, request: InferRequest) -> int:
        """Triton's batch size of a request: the first input's leading dim (0 when
        the model does not batch); no checks."""
        return batch_size_of(self.max_batch_size, request)

    def _batch_of(self, request: InferRequest, inputs: Sequence[TensorData]) -> int:
        """Every input must be known; with batching each needs the same leading dim."""
        batch = 0
        batching = self.max_batch_size > 0
        for tensor in inputs:
            if tensor.name not in self._inputs:
                raise invalid_arg(f"unexpected inference input '{tensor.name}' for model "
                                  f"'{self.model_name}'")
            if not batching:
                continue
            if len(tensor.shape) == 0:
                raise invalid_arg(f"{_prefix(request)}input '{tensor.name}' has no shape but "
                                  f"model requires batch dimension for '{self.model_name}'")
            if batch == 0:
                batch = tensor.shape[0] & _UINT32_MASK
            elif tensor.shape[0] != batch:
                raise invalid_arg(f"{_prefix(request)}input '{tensor.name}' batch size does not "
                                  f"match other inputs for '{self.model_name}'")
        return batch

    def _check_tensor(self, request: InferRequest, tensor: TensorData, spec: _InputSpec,
                      batch: int) -> None:
        if tensor.datatype != spec.datatype:
            sent = tensor.datatype if tensor.datatype in ELEMENT_SIZE else INVALID_DATATYPE
            raise invalid_arg(f"{_prefix(request)}inference input '{tensor.name}' data-type is "
                              f"'{sent}', but model '{self.model_name}' expects "
                              f"'{spec.datatype}'")
        full = tensor.shape if type(tensor.shape) is tuple else tuple(tensor.shape)
        shape = full[1:] if self.max_batch_size > 0 else full
        if spec.has_wildcard or shape != spec.dims:
            self._check_shape(request, tensor.name, spec, shape, full)
        if spec.reshape is not None:
            shape = _reshaped(spec, shape)
        with_batch = shape if batch == 0 else (batch, *shape)
        if spec.element_size == 0:
            self._check_bytes(request, tensor, with_batch)
            return
        expected = _byte_size(spec.element_size, with_batch, tensor.name)
        got = _nbytes(tensor.data)
        if got != expected:
            raise invalid_arg(f"{_prefix(request)}input byte size mismatch for input "
                              f"'{tensor.name}' for model '{self.model_name}'. Expected "
                              f"{expected}, got {got}")

    def _check_shape(self, request: InferRequest, name: str, spec: _InputSpec,
                     shape: tuple[int, ...], full: tuple[int, ...]) -> None:
        """Dims -1 match any size; a -1 in the request is refused where it is compared."""
        matches = len(shape) == len(spec.dims)
        if matches:
            for want, got in zip(spec.dims, shape):
                if got == WILDCARD_DIM:
                    raise invalid_arg(
                        f"{_prefix(request)}All input dimensions should be specified for input "
                        f"'{name}' for model '{self.model_name}', got {_dims_text(full)}")
                if want != WILDCARD_DIM and want != got:
                    matches = False
                    break
        if not matches:
            note = _BATCH_NOTE if self.max_batch_size > 0 else ""
            raise invalid_arg(f"{_prefix(request)}unexpected shape for input '{name}' for model "
                              f"'{self.model_name}'. Expected {spec.expected_text}, got "
                              f"{_dims_text(full)}. {note}")

    def _check_bytes(self, request: InferRequest, tensor: TensorData,
                     with_batch: tuple[int, ...]) -> None:
        """Walk the 4-byte length prefixes: the item count must match the shape."""
        name = tensor.name
        expected = _element_count(with_batch)
        if expected == _INVALID_SIZE:
            raise invalid_arg(f"tensor '{name}' contains an invalid dimension in shape "
                              f"{_dims_text(with_batch)}")
        if expected == _OVERFLOW_SIZE:
            raise invalid_arg(f"element count for tensor '{name}' exceeds maximum size of "
                              f"{_INT64_MAX}")
        data = tensor.data
        size = _nbytes(data)
        # At most `expected` elements are read: a body of many tiny elements costs no more
        # than the shape says before it is refused.
        try:
            spans = bytes_elements(data, expected)
        except BytesLayoutError as exc:
            if exc.declared is None and exc.left == 0:  # the buffer ended before `expected`
                raise invalid_arg(_count_message(request, name, self.model_name, exc.index,
                                                 expected)) from None
            raise invalid_arg(_layout_message(request, name, self.model_name, exc)) from None
        end = spans[-1][1] if spans else 0
        if end < size:  # more after the elements the shape holds
            if size - end < 4:
                raise invalid_arg(_layout_message(request, name, self.model_name,
                                                  BytesLayoutError("", expected, end, None,
                                                                   size - end, [])))
            raise invalid_arg(_count_message(request, name, self.model_name, expected + 1,
                                             expected))

    def _check_requested_outputs(self, request: InferRequest, requested: Sequence[str]) -> None:
        if len(set(requested)) != len(requested):
            self._fail_repeated(request, list(requested), "output")
        if not self._outputs.issuperset(requested):
            unknown = min(n for n in requested if n not in self._outputs)  # Triton's std::set order
            raise invalid_arg(f"unexpected inference output '{unknown}' for model "
                              f"'{self.model_name}'")

    def _check_correlation_id(self, request: InferRequest) -> None:
        expects = self._corrid_type
        if isinstance(request.correlation_id, str):
            sent = "BYTES" if expects != mc.TYPE_STRING else None
        else:
            sent = "UINT64" if expects not in _CORRID_ACCEPTS_INT else None
        if sent is not None:
            raise invalid_arg(f"{_prefix(request)}sequence batching control "
                              f"'{self._corrid_tensor}' data-type is '{sent}', but model "
                              f"'{self.model_name}' expects '{datatype_of(expects)}'")

    # -- errors that need the whole request ------------------------------------

    def _fail_repeated(self, request: InferRequest, names: list[str], kind: str) -> None:
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise invalid_arg(f"{_prefix(request)}{kind} '{name}' already exists in request")
            seen.add(name)

    def _fail_input_count(self, request: InferRequest, by_name: dict[str, TensorData]) -> None:
        """ValidateRequestInputs' message. Its list of missing inputs is built by
        dropping the last character, so with nothing missing it reads "]" (sic)."""
        missing = "[" + ",".join(f"'{n}'" for n in self._required if n not in by_name)
        missing = (missing if len(missing) > 1 else "") + "]"
        got = "[" + ",".join(f"'{n}'" for n in by_name) + "]"
        total, required = self._input_count, len(self._required)
        if total == required:
            expected = f"expected {total} inputs"
        else:
            expected = f"expected number of inputs between {required} and {total}"
        raise invalid_arg(
            f"{_prefix(request)}{expected} but got {len(by_name)} inputs for model "
            f"'{self.model_name}'. Got input(s) {got}, but missing required input(s) "
            f"{missing}. Please provide all required input(s).")


def validate_request(cfg: mc.ModelConfig, request: InferRequest) -> None:
    """One-off check; servers keep a `RequestValidator` per model instead."""
    RequestValidator(cfg).validate(request)


def batch_size(cfg: mc.ModelConfig, request: InferRequest) -> int:
    """Triton's batch size of a request (0 when the model does not batch)."""
    return batch_size_of(cfg.max_batch_size, request)


def batch_size_of(max_batch_size: int, request: InferRequest) -> int:
    """The first non-zero leading dim of the inputs, as Triton's Normalize takes it."""
    if max_batch_size <= 0:
        return 0
    for tensor in request.inputs:
        if len(tensor.shape) and tensor.shape[0] & _UINT32_MASK:
            return tensor.shape[0] & _UINT32_MASK
    return 0


# ---------------------------------------------------------------------------
# Triton's size arithmetic
# ---------------------------------------------------------------------------

def _prefix(request: InferRequest) -> str:
    """Triton's LogRequest() prefix on request errors."""
    return f"[request id: {request.id or _UNKNOWN_ID}] "


def _layout_message(request: InferRequest, name: str, model: str,
                    exc: BytesLayoutError) -> str:
    """Triton's words for a BYTES input whose length prefix or element is cut."""
    if exc.declared is None:
        return (f"{_prefix(request)}incomplete string length indicator for inference input "
                f"'{name}' for model '{model}', expecting 4 bytes but only {exc.left} bytes "
                "available. Please make sure the string length indicator is in one buffer.")
    # Triton lets a short last item through; pbserve refuses it.
    return (f"{_prefix(request)}string element {exc.index} of inference input '{name}' for "
            f"model '{model}' declares {exc.declared} bytes but only {exc.left} bytes are "
            "left in the buffer")


def _count_message(request: InferRequest, name: str, model: str, items: int,
                   expected: int) -> str:
    """Triton's words for a BYTES input with more or fewer elements than its shape."""
    if items > expected:  # the first prefix past the count fails, whatever follows
        return (f"{_prefix(request)}unexpected number of string elements {items} for "
                f"inference input '{name}' for model '{model}', expecting {expected}")
    return (f"{_prefix(request)}expected {expected} string elements for inference input "
            f"'{name}' for model '{model}', got {items}")


def _dims_text(dims: Sequence[int]) -> str:
    """Triton's DimsListToString: "[1,4]"."""
    return "[" + ",".join(str(d) for d in dims) + "]"


def _reshaped(spec: _InputSpec, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The config's reshape with its -1s filled from the request's variable dims."""
    variable = iter([shape[i] for i in spec.wildcard_positions])
    return tuple(next(variable) if d == WILDCARD_DIM else d for d in spec.reshape or ())


def _element_count(dims: Sequence[int]) -> int:
    """Triton's GetElementCount: -1 for a variable dim, -2 for a negative one, -3 on
    int64 overflow; an empty shape counts 0."""
    count = 0
    for index, dim in enumerate(dims):
        if dim == WILDCARD_DIM:
            return WILDCARD_DIM
        if dim < 0:
            return _INVALID_SIZE
        if index == 0:
            count = dim
        elif dim != 0 and count > _INT64_MAX // dim:
            return _OVERFLOW_SIZE
        else:
            count *= dim
    return count


def _byte_size(element_size: int, dims: tuple[int, ...], name: str) -> int:
    """Triton's GetByteSize for fixed-size types (-1 when a dim is variable)."""
    count = _element_count(dims)
    if count == _INVALID_SIZE:
        raise invalid_arg(f"tensor '{name}' contains an invalid dimension {_dims_text(dims)}")
    if count == _OVERFLOW_SIZE or count > _INT64_MAX // element_size:
        raise invalid_arg(f"byte size for tensor '{name}' exceeds maximum size of {_INT64_MAX}")
    return count if count == WILDCARD_DIM else count * element_size


def _nbytes(data: Buffer) -> int:
    return data.nbytes if isinstance(data, memoryview) else len(data)
