"""The messages between a frontend process and the core: tuples of plain data, marshal
format version 4 (as stub/protocol.py: no class or function can be named in one).

Tensor bytes never travel in a message but for the few a response holds in process
memory (a cache hit's): an input is a block of the frontend's own shm pool, named by its
descriptor; an output is a block of a stub's pool (or of the core's), named the same way.

Up (frontend -> core):
- INFER: request id, stream, model, version, id, inputs, requested outputs, parameters
  (JSON), correlation id, flags, priority, timeout (us), trace headers, output regions,
  and the RELEASE tokens gathered since the last message (one wake-up fewer a request)
- QUEUE: model, version, batch size, priority, the stub's request message
  (stub/protocol.py request_msg: its key is the request id, one of the frontend's), and
  the RELEASE tokens: a request for a model whose batcher the core runs and whose stub
  answers the frontend itself (direct.py DirectRoute.queues_made), validated and made
  here as a direct request is; the core only queues it
- CANCEL: request id: its client is gone (the model sees `is_cancelled()`)
- RELEASE: response tokens: the frontend wrote those responses' outputs
- CALL: call id, method, args: anything else a frontend asks (calls.py)
- REGIONS_GONE: the frontend trimmed these pool regions (stubs unmap them)
- STARTED: the frontend serves its endpoints (the server is ready once all do)
- EXPECT: model, version: a request for it is being decoded (the core's hint to an idle
  instance; sent only while the frontend has no request in flight)

Down (core -> frontend):
- RESPONSE: request id, token, model, version, id, outputs, parameters (JSON), error
  (code, message[, raised before the model]), final, inputs done
- INPUTS_DONE: request id: no process reads its input blocks any more (free them)
- REPLY: call id, error, value
- FORGET_REGIONS: names: unmap those regions (their owner gave them back)
- TRIM: /dev/shm is short: give back every empty region of the pool now
- LOG_SETTINGS: the server's log settings changed (log_settings.py `as_dict`)

An input is `(name, datatype, shape, region, offset, nbytes, shm)`, `shm` None or a client
region's `(name, offset, byte_size)` (then region is ""). An output is `(name, datatype,
shape, where, a, b)`: OUT_BLOCK `(region, (offset, nbytes))`, OUT_INLINE `(bytes, 0)`,
OUT_CLIENT_SHM `(token, (offset, byte_size))` (written into the client's region).
"""

from __future__ import annotations

import marshal
from typing import Any


_VERSION = 4

INFER = 1
CANCEL = 2
RELEASE = 3
CALL = 4
REGIONS_GONE = 5
STARTED = 6
EXPECT = 7
DIRECT_STATS = 8
CANCEL_DIRECT = 9
QUEUE = 10
RESPONSE = 21
INPUTS_DONE = 22
REPLY = 23
LOG_SETTINGS = 24
FORGET_REGIONS = 25
TRIM = 26

OUT_BLOCK, OUT_INLINE, OUT_CLIENT_SHM = 0, 1, 2
# The SharedMemoryManager methods a CALL "shared_memory" may name (calls.py).
SHARED_MEMORY_METHODS = frozenset({"register", "unregister", "status", "register_cuda",
                                   "unregister_cuda", "cuda_status", "check_allowed"})


def encode(message: tuple) -> bytes:
    return marshal.dumps(message, _VERSION)


def decode(data: bytes) -> Any:
    return marshal.loads(data)


def infer(rid: int, stream: bool, model: str, version: str, request_id: str,
          inputs: tuple, requested: tuple | None, parameters_json: str,
          correlation_id: int | str, flags: int, priority: int, timeout_us: int,
          trace_headers: tuple | None, output_shm: tuple | None, releases: tuple) -> tuple:
    """`releases`: tokens of responses written since the last message (a RELEASE
    of their own when no request follows soon)."""
    return (INFER, rid, stream, model, version, request_id, inputs, requested,
            parameters_json, correlation_id, flags, priority, timeout_us, trace_headers,
            output_shm, releases)


def queue(model: str, version: str, batch_size: int, priority: int, msg: tuple,
          releases: tuple) -> tuple:
    return (QUEUE, model, version, batch_size, priority, msg, releases)


def cancel(rid: int) -> tuple:
    return (CANCEL, rid)


def release(tokens: tuple) -> tuple:
    return (RELEASE, tokens)


def call(call_id: int, method: str, args: tuple) -> tuple:
    return (CALL, call_id, method, args)


def expect(model: str, version: str) -> tuple:
    return (EXPECT, model, version)


def direct_stats(entries: tuple, responses: tuple) -> tuple:
    """What this frontend's direct requests (direct.py) add to each model's statistics:
    entries (model, version, batch size, requests, failures, success ns, failure ns,
    compute ns), and a decoupled model's response statistics, responses (model, version,
    ResponseStats.figures())."""
    return (DIRECT_STATS, entries, responses)


def cancel_direct(model: str, version: str, instance: str, key: int) -> tuple:
    """A direct request's client left (direct.py): the core tells its stub."""
    return (CANCEL_DIRECT, model, version, instance, key)


def started() -> tuple:
    return (STARTED,)


def regions_gone(names: tuple) -> tuple:
    return (REGIONS_GONE, names)


def response(rid: int, token: int, model: str, version: str, request_id: str,
             outputs: tuple, parameters_json: str, error: tuple | None, final: bool,
             inputs_done: bool) -> tuple:
    return (RESPONSE, rid, token, model, version, request_id, outputs, parameters_json,
            error, final, inputs_done)


def inputs_done(rid: int) -> tuple:
    return (INPUTS_DONE, rid)


def reply(call_id: int, error: tuple | None, value: Any) -> tuple:
    return (REPLY, call_id, error, value)


def log_settings(settings: dict) -> tuple:
    return (LOG_SETTINGS, changeable(settings))


def changeable(settings: dict) -> dict:
    """The log settings another process may take (`log_file` is each one's own, and
    cannot be changed over the network anyway)."""
    return {name: value for name, value in settings.items() if name != "log_file"}


def forget_regions(names: tuple) -> tuple:
    return (FORGET_REGIONS, names)


def trim() -> tuple:
    return (TRIM,)
