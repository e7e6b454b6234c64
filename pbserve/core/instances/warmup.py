"""Model warmup (`model_warmup` in config.pbtxt), run as Triton runs it.

Each sample with a `batch_size` above 0 becomes `batch_size` requests of batch 1 (the
batch dimension only when the model batches), executed together on every instance,
`count` times (at least once), after `initialize` and before the model is READY. Its
inputs are zeros (`zero_data`), random bytes (`random_data`; BYTES get zeros, i.e.
empty strings, as in Triton) or the file `warmup/<input_data_file>` of the model's
directory (BYTES: the file is the serialized tensor, 4-byte lengths and all). A sample
whose responses carry an error fails the load: `failed to run warmup sample '<name>':
<error>; ...`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tritonclient.grpc import model_config_pb2 as mc

from pbserve.core.config.model_config import ELEMENT_SIZE, datatype_of
from pbserve.core.types import InferRequest, InferResponse, TensorData
from pbserve.errors import ErrorCode, ServerError

if TYPE_CHECKING:
    from pbserve.core.instances.instance import ModelInstance
    from pbserve.core.pending import PendingRequest

log = logging.getLogger("pbserve.core")

WARMUP_DIR = "warmup"
_LENGTH_BYTES = 4  # a BYTES element's length prefix; zeros make an empty string


@dataclass
class WarmupSample:
    name: str
    count: int
    requests: list[InferRequest] = field(default_factory=list)


def warmup_samples(cfg: mc.ModelConfig, model_dir: Path) -> list[WarmupSample]:
    """The config's samples, their requests built (Triton's errors for bad settings)."""
    samples = []
    for setting in cfg.model_warmup:
        if setting.batch_size == 0:
            log.debug("Skipping batch 0 warmup sample '%s'", setting.name)
            continue
        log.debug("Generating warmup sample data for '%s'", setting.name)
        tensors = [_tensor(name, spec, cfg, model_dir)
                   for name, spec in sorted(setting.inputs.items())]
        sample = WarmupSample(setting.name, max(setting.count, 1))
        for _ in range(setting.batch_size):
            sample.requests.append(InferRequest(model_name=cfg.name, inputs=list(tensors)))
        samples.append(sample)
    return samples


def _tensor(name: str, spec: mc.ModelWarmup.Input, cfg: mc.ModelConfig,
            model_dir: Path) -> TensorData:
    dims = [int(d) for d in spec.dims]
    if any(d < 0 for d in dims):
        raise _error("warmup setting expects all variable-size dimensions are specified "
                     f"for input '{name}'")
    datatype = datatype_of(spec.data_type)
    elements = 1
    for d in dims:
        elements *= d
    is_bytes = datatype == "BYTES"
    size = elements * (_LENGTH_BYTES if is_bytes else ELEMENT_SIZE.get(datatype, 0))
    choice = spec.WhichOneof("input_data_type")
    if choice == "zero_data" or (choice == "random_data" and is_bytes):
        data = bytes(size)
    elif choice == "random_data":
        data = os.urandom(size)
    elif choice == "input_data_file":
        data = _file_data(model_dir, spec.input_data_file, size, is_bytes)
    else:
        raise _error(f"warmup setting expects input '{name}' to have input_data_type set")
    shape = ([1] if cfg.max_batch_size > 0 else []) + dims
    return TensorData(name, datatype, tuple(shape), data)


def _file_data(model_dir: Path, file_name: str, size: int, is_bytes: bool) -> bytes:
    path = model_dir / WARMUP_DIR / file_name
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _error(f"failed to open text file for read {path}: {exc.strerror}") from None
    if is_bytes:
        return data
    if size > len(data):
        # Triton's words, its missing space included
        raise _error(f"warmup setting expects {size} bytes, but the data provided from "
                     f"{file_name}only has {len(data)} bytes")
    return data[:size]


async def warm_up(instance: "ModelInstance", samples: list[WarmupSample],
                  prepare: Callable[[InferRequest], "PendingRequest"]) -> None:
    """Run every sample on `instance`; ServerError (INVALID_ARG) at the first that fails.
    `prepare` validates a request and places its inputs in shared memory."""
    for sample in samples:
        for iteration in range(1, sample.count + 1):
            log.debug("model '%s' instance %s is running warmup sample '%s' for iteration %d",
                      instance.model_name, instance.name, sample.name, iteration)
            try:
                # The previous iteration's final response may have come before its
                # `execute` returned (a decoupled model): wait for the instance.
                await instance.until_ready()
                batch = [prepare(request) for request in sample.requests]
            except ServerError as err:
                raise _failed(sample, [err.message]) from None
            instance.execute(batch)
            errors: list[str] = []
            for pending in batch:
                for response in await _responses(pending):
                    if response.error is not None:
                        errors.append(response.error.message)
                    response.release()
            if errors:
                log.debug("model '%s' instance %s failed to run warmup sample '%s'",
                          instance.model_name, instance.name, sample.name)
                raise _failed(sample, errors)


def _failed(sample: WarmupSample, errors: list[str]) -> ServerError:
    text = "".join(f"{error}; " for error in errors)
    return _error(f"failed to run warmup sample '{sample.name}': {text}")


def _error(message: str) -> ServerError:
    """A load error in Triton's words: its status code's name, then the message."""
    return ServerError(ErrorCode.INVALID_ARG, f"Invalid argument: {message}")


async def _responses(pending: "PendingRequest") -> list[InferResponse]:
    """Every response of a request, up to its final one."""
    if pending.future is not None:
        return [await pending.future]
    assert pending.stream is not None
    responses = []
    while True:
        response = await pending.stream.get()
        responses.append(response)
        if response.final:
            return responses
