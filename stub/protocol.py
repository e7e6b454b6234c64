"""The messages between the parent and a stub, and how they are encoded.

A message is `(kind, *fields)`: plain tuples, ints, strings, dicts and the tensor
descriptors of `shm.tensor` (tuples), encoded with marshal format version 4. Tensor bytes
never travel in a message, only descriptors. marshal has no way to name a class or a
function, so decoding can only ever build plain data (its one other object, a code
object, is inert: nothing here calls or executes a message). It is half the decoding
cost of a pickle loader that refuses globals. Version 4 is pinned, not the running
Python's default, because a stub may run another Python than the parent's (every
Python since 3.4 reads it). Only exact built-in types encode (an enum or a namedtuple
is a ValueError on the sending side), except that any buffer object arrives as bytes:
a numpy scalar must be converted (int(), float()) before it goes into a message.

Ownership of shm blocks, by message kind:
- EXECUTE: input blocks belong to the parent's pool; the parent frees them when the
  request is complete (final response, error or stub death).
- RESPONSES / SEND: output blocks belong to the stub's pool; the parent hands them back
  in the `frees` field of a later EXECUTE or a RELEASE once the frontend has sent them.
  An output written into a client's region (a window token) belongs to the client.
- EXECUTE inputs and outputs in client regions (window tokens): the parent holds the
  region until the request completes, then may send FORGET_REGION.
- CALL "bls": input blocks belong to the calling stub, which frees them when the call
  has its (final) answer. The answer's output blocks belong to the target stub; the
  parent holds them under a token until the caller sends BLS_RELEASE for it.
- A block on the GPU (its region a CUDA token, shm/cuda_region.py) follows the same
  rules. A block an output names as it came in (a lent GPU input) stays its owner's:
  the stub that gets it back in `frees` finds it is not its own and does nothing.
"""

from __future__ import annotations

import marshal

# parent -> stub
INIT = 1          # (INIT, args: dict[str, str], model_path, decoupled: bool, backend_path)
EXECUTE = 2       # (EXECUTE, batch_id, requests: tuple[RequestMsg], frees)
FINALIZE = 3      # (FINALIZE,)
RELEASE = 4       # control queue: (RELEASE, frees: tuple[(region, offset)])
CANCEL = 5        # control queue: (CANCEL, key)
AUTO_COMPLETE = 6  # (AUTO_COMPLETE, model_path, config_json, backend_path)
REPLY = 7         # control queue: (REPLY, call_id, error: str | None, value); the main
#   queue for a CALL_DIRECT (its main thread waits there, stub/direct_replies.py)
STREAM_ITEM = 8   # control queue: (STREAM_ITEM, call_id, value, final: bool)
SEQUENCE_TERMINATED = 9  # (SEQUENCE_TERMINATED, correlation_id: int | str, reason: str)
#   the model's optional `sequence_terminated(correlation_id, reason)`; no answer
FORGET_REGION = 10  # control queue: (FORGET_REGION, token): a client region was
#   unregistered; unmap the window of that token (shm/client_region.py) if mapped
IS_READY = 11     # control queue: (IS_READY,): run the model's `is_ready()`, answer READINESS
LOG_SETTINGS = 20  # (LOG_SETTINGS, generation, verbose_level, info, warning, error): main
#   queue at start; on a change control queue, and main queue too when nothing waits there
#   (stub/log_levels.py: an older generation than the one applied is ignored)
FORGET_REGIONS = 12  # control queue: (FORGET_REGIONS, names): regions of the parent's or
#   another stub's pool that their owner gave back (Pool.trim); unmap them if mapped
TRIM = 13         # control queue: (TRIM,): /dev/shm is short; give back every empty region
FRONTEND_QUEUES = 14  # (FRONTEND_QUEUES, slot, requests, answers): frontend process
#   `slot` started again: its queues to and from this stub are these now (the old ones'
#   outputs lent to it are freed); main queue
CALLER_QUEUES = 15  # (CALLER_QUEUES, origin, requests, answers, bell): the stub of `origin`
#   sends this stub BLS calls directly (stub/direct_bls.py) on `requests`, is answered on
#   `answers` and woken by posting its semaphore `bell`; main queue
CALLER_GONE = 16  # (CALLER_GONE, origin): that caller's stub ended: its queues are gone,
#   what it was lent is freed; main queue
QUEUED = 17       # (QUEUED, key, request: RequestMsg, batch_size, arrived_ns, frees): from a
#   frontend process, a request for the stub's own batcher (stub/batcher.py); answered in
#   an ANSWERS; `arrived_ns`: when it came to the frontend (time.monotonic_ns)

# stub -> parent
READY = 101       # (READY, pid, pool_prefix)
INIT_DONE = 102   # (INIT_DONE, error: str | None, has_is_ready: bool, warm: tuple[str]):
#   warm = the stub's regions the parent maps before READY (its pool's first)
RESPONSES = 103   # (RESPONSES, batch_id, error: str | None,
#                    responses: tuple[(key, ResponseMsg | None)], rescheduled: tuple[key]):
#                    rescheduled = keys released with RESCHEDULE (not complete)
SEND = 104        # (SEND, key, response: ResponseMsg | None, flags)
BATCH_DONE = 105  # (BATCH_DONE, batch_id, error: str | None, rescheduled: tuple[key])
#                    decoupled execute returned
LOG = 106         # (LOG, level, message, filename, line)
FINALIZED = 107   # (FINALIZED,)
AUTO_COMPLETED = 108  # (AUTO_COMPLETED, error: str | None, config_json: str | None)
CALL = 109        # (CALL, call_id, op, args): the stub asks, the parent answers (stub/calls.py)
CALL_CANCEL = 110  # (CALL_CANCEL, call_id): the stub no longer wants a streamed call
BLS_RELEASE = 111  # (BLS_RELEASE, token): the outputs of a BLS response are no longer used
NOTIFY = 112      # (NOTIFY, op, args): a CALL that wants no answer (metric deletes)
READINESS = 113   # (READINESS, error: str | None, ready: bool): what `is_ready()` said
REGIONS_GONE = 114  # (REGIONS_GONE, names): this stub gave these pool regions back
SHM_PRESSURE = 115  # (SHM_PRESSURE,): this stub found /dev/shm full; the others should trim
CALL_DIRECT = 116  # (CALL_DIRECT, call_id, op, args): a CALL from the main thread, which
#   blocks on the main queue for its REPLY
DROPPED = 117     # (DROPPED, batch_id, error: None, responses, rescheduled: ()): RESPONSES of
#                    a batch answered without `execute` (each of its requests was cancelled
#                    while it waited in the stub's queue): no execution to count
ANSWERS = 118     # (ANSWERS, answers: tuple[(key, ResponseMsg)]): to a frontend process,
#                    the responses of its requests in a batch the parent sent (their keys
#                    are the frontend's: stub/frontends.py); the parent's RESPONSES then
#                    carry each without its outputs; also the answers of a batch of the
#                    stub's own batcher (stub/batcher.py), to each frontend its own
BATCHES = 119     # (BATCHES, sizes: tuple[(batch size, executions, compute ns)],
#                    requests: BatchCounts' figures): what the stub's own batches added
#                    to the model's statistics, before their answers go out; put without
#                    a ring (Stub.send_quietly): the parent reads it before statistics

# The constructors below are the one place each message's fields are put in order; the
# readers unpack them in that order (`_, batch_id, error, ... = message`), and the two
# records that are read in part or rebuilt (RequestMsg, ResponseMsg) have named indices.
# Index 0 is every message's kind. tests/stub/test_protocol_contract.py checks the readers
# against the constructors, and that no reader outside this module reads a message's
# fields by number.

# -- named fields of the messages read in part ------------------------------------------
# `<KIND>_<FIELD>`: the place of the constructor's `<field>` in a message of that kind.
# A REPLY, which the stub's main thread checks for its own call's answer (direct_replies.py):
REPLY_CALL_ID, REPLY_ERROR, REPLY_VALUE = range(1, 4)
# A SEND the parent could not take in: the request it answers fails (ModelInstance).
SEND_KEY = 1


# -- the records inside messages ------------------------------------------------------
# RequestMsg: one request of an EXECUTE.
REQ_KEY, REQ_ID, REQ_CORRELATION_ID, REQ_FLAGS, REQ_PARAMETERS, REQ_TIMEOUT_US, \
    REQ_REQUESTED, REQ_INPUTS, REQ_LENDABLE, REQ_OUTPUT_SHM, REQ_TRACE, REQ_GPU_OUTPUTS = range(12)


def request_msg(*, key: int, request_id: str, correlation_id: int | str, flags: int,
                parameters_json: str, timeout_us: int, requested: tuple[str, ...] | None,
                inputs: tuple, lendable: bool,
                output_shm: dict[str, tuple[str, int, int]] | None,
                trace: tuple[int, str] | None = None, gpu_outputs: bool = False) -> tuple:
    """A RequestMsg. `inputs`: TensorDescs. `lendable`: the input blocks are this
    request's own copies in the parent's pool and its model answers once, so an output
    may name one (stub/borrowed.py) and the parent then frees it with the response.
    `output_shm`: outputs to write into client regions, name -> (token, offset,
    byte_size) (the client's memory: the response names them there, nobody frees them).
    `trace`: the request is traced: (trace id, OpenTelemetry context JSON or "") for
    `request.trace()`; a BLS call made with that trace names the id (a child trace).
    `gpu_outputs`: the caller is a stub that takes GPU tensors (a BLS call whose
    preferred memory is not the CPU): GPU outputs go by CUDA IPC, not to the host."""
    return (key, request_id, correlation_id, flags, parameters_json, timeout_us, requested,
            inputs, lendable, output_shm, trace, gpu_outputs)


def with_inputs(msg: tuple, inputs: tuple, lendable: bool) -> tuple:
    """`msg` with its inputs placed (a request staged into shm as it is dispatched)."""
    return (*msg[:REQ_INPUTS], inputs, lendable, *msg[REQ_OUTPUT_SHM:])


def in_sequence(msg: tuple, correlation_id: int | str, flags: int, controls: tuple) -> tuple:
    """`msg` as the sequence batcher hands it on: the model's view of its correlation id
    and flags, and the control tensors added to its inputs."""
    return (*msg[:REQ_CORRELATION_ID], correlation_id, flags,
            *msg[REQ_PARAMETERS:REQ_INPUTS], msg[REQ_INPUTS] + controls,
            *msg[REQ_LENDABLE:])


# ResponseMsg: one response of RESPONSES or SEND.
RESP_ERROR, RESP_OUTPUTS, RESP_PARAMETERS = range(3)


def response_record(error: tuple[int, str] | None, outputs: tuple, parameters_json: str
                    ) -> tuple:
    """A ResponseMsg: `error` as (code, message) or None, `outputs` as TensorDescs."""
    return (error, outputs, parameters_json)


def output_blocks(outputs: tuple) -> tuple[tuple[str, int], ...]:
    """Where each of a ResponseMsg's outputs (TensorDescs) lies: (region, offset), the
    blocks its reader gives back to the stub that made them."""
    return tuple([(d[3], d[4]) for d in outputs])


def answers_blocks(answers: tuple) -> tuple[tuple[str, int], ...]:
    """`output_blocks` of every response of (key, ResponseMsg or None) answers."""
    return tuple([b for _, msg in answers if msg is not None
                  for b in output_blocks(msg[RESP_OUTPUTS])])


# -- parent -> stub ---------------------------------------------------------------------
def init(args: dict[str, str], model_path: str, decoupled: bool,
         backend_path: str = "") -> tuple:
    """`backend_path`: the model.py of the Python-based backend serving the model, or
    "" (the model's own `model_path`)."""
    return (INIT, args, model_path, decoupled, backend_path)


def execute(batch_id: int, requests: tuple, frees: tuple) -> tuple:
    """`requests`: RequestMsgs; `frees`: (region, offset) of output blocks given back."""
    return (EXECUTE, batch_id, requests, frees)


def queued(key: int, request: tuple, batch_size: int, arrived_ns: int, frees: tuple
           ) -> tuple:
    """A frontend's request for the stub's own batcher: `request` a RequestMsg."""
    return (QUEUED, key, request, batch_size, arrived_ns, frees)


def finalize() -> tuple:
    return (FINALIZE,)


def release(frees: tuple) -> tuple:
    return (RELEASE, frees)


def cancel(key: int) -> tuple:
    return (CANCEL, key)


def auto_complete(model_path: str, config_json: str, backend_path: str = "") -> tuple:
    return (AUTO_COMPLETE, model_path, config_json, backend_path)


def reply(call_id: int, error: str | None, value: object) -> tuple:
    return (REPLY, call_id, error, value)


def stream_item(call_id: int, value: object, final: bool) -> tuple:
    return (STREAM_ITEM, call_id, value, final)


def sequence_terminated(correlation_id: int | str, reason: str) -> tuple:
    return (SEQUENCE_TERMINATED, correlation_id, reason)


def forget_region(token: str) -> tuple:
    return (FORGET_REGION, token)


def is_ready() -> tuple:
    return (IS_READY,)


def log_settings(generation: int, verbose_level: int, info: bool, warning: bool,
                 error: bool) -> tuple:
    return (LOG_SETTINGS, generation, verbose_level, info, warning, error)


def forget_regions(names: tuple[str, ...]) -> tuple:
    return (FORGET_REGIONS, names)


def trim() -> tuple:
    return (TRIM,)


def caller_queues(origin: int, requests: str, answers: str, bell: str) -> tuple:
    return (CALLER_QUEUES, origin, requests, answers, bell)


def caller_gone(origin: int) -> tuple:
    return (CALLER_GONE, origin)


def frontend_queues(slot: int, requests: str, answers: str) -> tuple:
    return (FRONTEND_QUEUES, slot, requests, answers)


# -- stub -> parent ---------------------------------------------------------------------
def ready(pid: int, pool_prefix: str) -> tuple:
    return (READY, pid, pool_prefix)


def init_done(error: str | None, has_is_ready: bool, warm: tuple[str, ...] = ()) -> tuple:
    return (INIT_DONE, error, has_is_ready, warm)


def responses(batch_id: int, error: str | None, answers: tuple, rescheduled: tuple
              ) -> tuple:
    """`answers`: (key, ResponseMsg | None) per request; `rescheduled`: keys."""
    return (RESPONSES, batch_id, error, answers, rescheduled)


def dropped(batch_id: int, answers: tuple) -> tuple:
    """RESPONSES of a batch the stub answered without running it."""
    return (DROPPED, batch_id, None, answers, ())


def answers(entries: tuple) -> tuple:
    """`entries`: (key, ResponseMsg) per request of the frontend's in a parent's batch."""
    return (ANSWERS, entries)


def batches(sizes: tuple, requests: tuple) -> tuple:
    """stub/batcher.py BatchCounts.take()'s."""
    return (BATCHES, sizes, requests)


def send(key: int, response: tuple | None, flags: int) -> tuple:
    return (SEND, key, response, flags)


def batch_done(batch_id: int, error: str | None, rescheduled: tuple) -> tuple:
    return (BATCH_DONE, batch_id, error, rescheduled)


def log(level: int, message: str, filename: str, line: int) -> tuple:
    return (LOG, level, message, filename, line)


def finalized() -> tuple:
    return (FINALIZED,)


def auto_completed(error: str | None, config_json: str | None) -> tuple:
    return (AUTO_COMPLETED, error, config_json)


def call(call_id: int, op: str, args: tuple) -> tuple:
    return (CALL, call_id, op, args)


def call_direct(call_id: int, op: str, args: tuple) -> tuple:
    return (CALL_DIRECT, call_id, op, args)


def call_cancel(call_id: int) -> tuple:
    return (CALL_CANCEL, call_id)


def bls_release(token: int) -> tuple:
    return (BLS_RELEASE, token)


def notify(op: str, args: tuple) -> tuple:
    return (NOTIFY, op, args)


def readiness(error: str | None, ready: bool) -> tuple:
    return (READINESS, error, ready)


def regions_gone(names: tuple[str, ...]) -> tuple:
    return (REGIONS_GONE, names)


def shm_pressure() -> tuple:
    return (SHM_PRESSURE,)


_VERSION = 4


def encode(message: tuple) -> bytes:
    return marshal.dumps(message, _VERSION)


def decode(data: bytes) -> tuple:
    return marshal.loads(data)
