"""The NATS request plane: the connection, the subjects, the request stream.

Requests for model M are published to `pbserve.infer.<M>` and kept in a JetStream
work-queue stream; every worker serving M pulls from one shared durable consumer of that
subject. That is a queue group in which a worker asks for work instead of being pushed
it: it pulls only as many requests as it has room for (worker.py). Responses go back on
core NATS to the request's own inbox, one message per response; cancellations are
broadcast on `pbserve.cancel` naming that inbox.

`Plane` is the connection: credentials and TLS (ConnectionOptions) passed through to
nats-py, a first connection that fails at once with a clear error, then reconnection
for ever. The stream and the registry bucket are kept in the server's memory, so a
restarted server has lost them: after every reconnection the plane makes them again and
runs its `on_reconnect` hooks (a worker's pulls and registry entries, a frontend's
registry watcher); `losses` counts the disconnections, so that a request in flight
across one fails instead of waiting for an answer the server dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import re
import ssl
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import nats
import nats.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import BadRequestError
from pbserve.task_stop import cancel_and_wait

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


class PlaneConnectError(RuntimeError):
    """The request plane could not be joined (unreachable, refused credentials, TLS)."""


@dataclass(frozen=True)
class ConnectionOptions:
    """How to authenticate to the NATS server and secure the connection (all optional:
    by default a plain, unauthenticated connection, as nats-server's own default)."""

    creds: str = ""      # a NATS credentials file (JWT and NKey seed)
    user: str = ""
    password: str = ""
    token: str = ""
    tls_ca: str = ""     # CA bundle to verify the server with (TLS on when any tls_* is set)
    tls_cert: str = ""   # client certificate, for a server that verifies clients
    tls_key: str = ""

    @classmethod
    def from_args(cls, args: Any) -> "ConnectionOptions":
        return cls(**{field: getattr(args, f"request_plane_{field}") or ""
                      for field in cls.__dataclass_fields__})

    def given(self) -> list[str]:
        """The flags set, as `--request-plane-...` names."""
        return [f"--request-plane-{f.replace('_', '-')}" for f in self.__dataclass_fields__
                if getattr(self, f)]

    def check(self) -> None:
        """ValueError naming the flag and file when a file cannot be read, or when the
        options do not fit together."""
        for field in ("creds", "tls_ca", "tls_cert", "tls_key"):
            path = getattr(self, field)
            if not path:
                continue
            flag = f"--request-plane-{field.replace('_', '-')}"
            try:
                with open(path, "rb") as f:
                    f.read(1)
            except OSError as err:
                raise ValueError(f"{flag} '{path}' cannot be read: "
                                 f"{err.strerror or err}") from None
        if self.creds and importlib.util.find_spec("nkeys") is None:
            raise ValueError("--request-plane-creds needs the nkeys package "
                             "(pip install nkeys), which nats-py signs with")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("--request-plane-tls-cert and --request-plane-tls-key go "
                             "together (a client certificate and its key)")
        if self.password and not self.user:
            raise ValueError("--request-plane-password needs --request-plane-user")
        if sum(map(bool, (self.creds, self.user, self.token))) > 1:
            raise ValueError("give one of --request-plane-creds, --request-plane-user "
                             "and --request-plane-token")

    def tls_context(self) -> ssl.SSLContext | None:
        if not (self.tls_ca or self.tls_cert):
            return None
        context = ssl.create_default_context(cafile=self.tls_ca or None)
        if self.tls_cert:
            context.load_cert_chain(self.tls_cert, self.tls_key)
        return context

    def connect_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if self.creds:
            kwargs["user_credentials"] = self.creds
        if self.user:
            kwargs["user"], kwargs["password"] = self.user, self.password
        if self.token:
            kwargs["token"] = self.token
        tls = self.tls_context()
        if tls is not None:
            kwargs["tls"] = tls
        return kwargs


Hook = Callable[[], Awaitable[None]]


class Plane:
    """The NATS connection of one pbserve process, surviving the server's restarts."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.nc = Client()
        self.losses = 0  # disconnections so far
        self._hooks: list[Hook] = []
        self._restoring: asyncio.Task | None = None
        self._closing = False

    @property
    def js(self) -> JetStreamContext:
        return self.nc.jetstream()

    @property
    def connected(self) -> bool:
        return self.nc.is_connected

    def on_reconnect(self, hook: Hook) -> None:
        """`hook` runs after each reconnection, once the request stream is there again."""
        self._hooks.append(hook)

    async def connect(self, name: str, options: ConnectionOptions | None = None) -> None:
        """Connect once (PlaneConnectError at once if that fails: a server not there,
        credentials refused, TLS not agreed), then reconnect for ever."""
        errors: list[BaseException] = []

        async def on_error(err: BaseException) -> None:
            errors.append(err)
            del errors[:-1]
            # Each failed try while reconnecting is not worth a warning: the loss was.
            level = logging.DEBUG if self.nc.is_reconnecting else logging.WARNING
            if self.nc.is_connected or self.nc.is_reconnecting:
                log.log(level, "request plane %s: %s", self.url, err or type(err).__name__)

        try:
            # No reconnection while the first connection is made: nats-py would retry
            # it for ever (with max_reconnect_attempts=-1), a refused password too.
            await self.nc.connect(
                self.url, name=name, allow_reconnect=False, max_reconnect_attempts=1,
                reconnect_time_wait=0.5, connect_timeout=5, error_cb=on_error,
                disconnected_cb=self._disconnected, reconnected_cb=self._reconnected,
                **(options or ConnectionOptions()).connect_kwargs())
        except (OSError, nats.errors.Error, asyncio.TimeoutError, ssl.SSLError) as err:
            cause = errors[-1] if errors else err
            raise PlaneConnectError(f"cannot join the request plane {self.url}: "
                                    f"{_describe(cause)}") from None
        self.nc.options["allow_reconnect"] = True
        self.nc.options["max_reconnect_attempts"] = -1

    async def _disconnected(self) -> None:
        self.losses += 1
        if not self._closing:
            log.warning("request plane %s: disconnected; reconnecting", self.url)

    async def _reconnected(self) -> None:
        log.info("request plane %s: reconnected", self.url)
        if self._restoring is None or self._restoring.done():
            self._restoring = asyncio.create_task(self._restore(), name="pbserve-plane")

    async def _restore(self) -> None:
        """The stream (and what the hooks make) again, as a restarted server has lost
        them; tried again while it fails and the connection is up."""
        while self.nc.is_connected:
            try:
                await request_stream(self.nc)
                for hook in self._hooks:
                    await hook()
                return
            except (nats.errors.Error, asyncio.TimeoutError) as err:
                log.warning("request plane %s: not restored yet: %s", self.url,
                            err or type(err).__name__)
                await asyncio.sleep(0.5)

    async def close(self) -> None:
        self._closing = True
        await cancel_and_wait(self._restoring)
        if self.nc.is_connected:
            try:
                await self.nc.drain()
                return
            except (nats.errors.Error, asyncio.TimeoutError):
                pass
        if not self.nc.is_closed:  # cut off (nats-py may find its transport closed)
            with contextlib.suppress(nats.errors.Error, RuntimeError, OSError):
                await self.nc.close()


def _describe(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    if "authorization violation" in text.lower():
        return f"{text} (credentials refused: see --request-plane-creds/-user/-token)"
    if isinstance(err, ssl.SSLError):
        return f"TLS: {text} (see --request-plane-tls-ca/-cert/-key)"
    return text


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
