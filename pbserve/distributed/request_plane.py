"""The NATS request plane: the connection, the subjects, the request stream.

Requests for model M are published to `pbserve.infer.<M>` and kept in a JetStream
work-queue stream; every worker serving M pulls from one shared durable consumer of that
subject. That is a queue group in which a worker asks for work instead of being pushed
it: it pulls only as many requests as it has room for (worker.py). Responses go back on
core NATS to the request's own inbox, one message per response; cancellations are
broadcast on `pbserve.cancel` naming that inbox.
"""

from __future__ import annotations

import logging
import re

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import BadRequestError

log = logging.getLogger("pbserve.distributed")

STREAM = "PBSERVE_REQUESTS"
INFER_PREFIX = "pbserve.infer"
CANCEL_SUBJECT = "pbserve.cancel"
# A request nobody pulled for this long is dropped by the stream (its caller gave up long
# before: see frontend.py).
REQUEST_MAX_AGE_S = 120.0
# Headers of a request message.
REPLY_HEADER = "Pbserve-Reply"

_SAFE = re.compile(r"[A-Za-z0-9_-]+")


def token(name: str) -> str:
    """`name` as one NATS subject token, KV key token and consumer name: itself when it
    is plain, else `x` and its UTF-8 in hex (a '.', '*' or space would split or widen a
    subject)."""
    if _SAFE.fullmatch(name) and not name.startswith("x"):
        return name
    return "x" + name.encode().hex()


def infer_subject(model: str) -> str:
    return f"{INFER_PREFIX}.{token(model)}"


async def connect(url: str, name: str) -> Client:
    """A connection that keeps trying to reconnect when the server goes away."""
    return await nats.connect(url, name=name, max_reconnect_attempts=-1,
                              reconnect_time_wait=0.5, connect_timeout=5)


async def request_stream(nc: Client) -> JetStreamContext:
    """JetStream, with the request stream created if it is not there yet (by whichever
    worker or frontend comes first; the same config is accepted again)."""
    js = nc.jetstream()
    config = StreamConfig(name=STREAM, subjects=[f"{INFER_PREFIX}.>"],
                          retention=RetentionPolicy.WORK_QUEUE, storage=StorageType.MEMORY,
                          max_age=REQUEST_MAX_AGE_S)
    try:
        await js.add_stream(config)
    except BadRequestError as err:  # created by another process with other settings
        log.debug("request stream exists: %s", err)
    return js
