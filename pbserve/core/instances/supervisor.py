"""The stub process of one model instance over its life: what Triton keeps in
stub_launcher.cc. It launches the stub and waits for its handshake, runs the model's
`auto_complete_config`, `initialize` and `finalize` there, and when the stub dies on its
own it fails what the stub held and starts a new one, trying again with a growing pause
until one runs or the model is unloaded.

It knows nothing of requests: the instance it serves (`StubHost`) keeps those. Everything
here runs on the server's event loop.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass
from typing import Protocol

from pbserve.core.instances.stub_launch import PlainLauncher, StubLauncher
from pbserve.core.instances.stub_process import StubProcess
from pbserve.core.instances.user_readiness import UserReadiness
from pbserve.core.observability.log_settings import SERVER_LOG, LogSettings
from pbserve.errors import ErrorCode, ServerError, internal
from shm.pool import RegionMap, ShmSizes
from stub import protocol as p

log = logging.getLogger("pbserve.core")

START_TIMEOUT_S = 60.0  # interpreter start-up to the stub's handshake
FINALIZE_TIMEOUT_S = 30.0  # `finalize` of the model, then the process is killed
# A stub still in `execute` when shutdown ended its requests (--exit-timeout-secs passed):
# so long more for `execute` to return and `finalize` to run, then it is killed.
ABANDONED_FINALIZE_S = 2.0
RESTART_PAUSE_S = 0.5  # after a failed restart; doubles up to the max
RESTART_PAUSE_MAX_S = 30.0


class InstanceState(enum.Enum):
    STARTING = "STARTING"
    READY = "READY"
    RESTARTING = "RESTARTING"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"


@dataclass(frozen=True, slots=True)
class InstanceSpec:
    """Who an instance is and how its stub is launched (Triton's instance group entry,
    placed). `init_args` are `initialize`'s args but the model config, which comes once
    auto-complete is done (`StubSupervisor.configure`)."""

    model_name: str
    model_version: str
    name: str  # the instance's, e.g. "add_sub_0_0"
    model_path: str  # the model.py the stub imports
    init_args: tuple[tuple[str, str], ...]
    python: str | None = None  # the stub's interpreter (EXECUTION_ENV_PATH); None: ours
    backend_path: str = ""  # a Python-based backend's model.py serving the model, or ""
    debug_args: tuple[str, ...] = ()  # --model-debug's stub arguments (model_debug.py)
    preload: tuple[str, ...] = ()  # the frameworks its backend imports (model_backends)


class StubHost(Protocol):
    """What the supervisor asks of the instance it runs a stub for (instance.py's
    `ModelInstance`). Called on the event loop, never with a lock held."""

    def on_messages(self, batch: list[tuple]) -> None:
        """Messages the stub put on its up queue, in order, read when its doorbell rang.
        Those the host does not handle it gives back with `StubSupervisor.answered`."""

    def stub_started(self) -> None:
        """A stub ran `initialize` and is READY (at load, or after a restart)."""

    def stub_stopping(self) -> None:
        """`stop` is about to send FINALIZE to a live stub: what it owes goes first."""

    def stub_lost(self, message: str, code: ErrorCode, requeue: bool) -> None:
        """The stub died on its own or was stopped: every request sent to it ends with
        this error; with `requeue`, batches that waited in its queue and never started
        go back to the scheduler instead."""

    def stub_gone(self) -> None:
        """The stub is being discarded (killed if alive): its calls and the blocks the
        host was to give back go with it."""

    def stub_down(self, cause: str, restart_failed: bool) -> None:
        """The stub died on its own (`restart_failed` False) or a new one failed to
        start (True); the supervisor is RESTARTING it."""

    def stub_back(self) -> None:
        """A restarted stub is READY and takes batches again."""


class StubSupervisor:
    """Launches, restarts and stops the stub of one instance. `stub` is the running
    StubProcess (None between two), `state` the instance's InstanceState."""

    def __init__(self, spec: InstanceSpec, host: StubHost, regions: RegionMap,
                 sizes: ShmSizes, launcher: StubLauncher | None = None) -> None:
        self.spec = spec
        self._launcher = launcher or PlainLauncher()
        self.state = InstanceState.STOPPED
        self.stub: StubProcess | None = None
        self.restarts = 0
        self.decoupled = False
        self.readiness = UserReadiness(spec.name, self.send_control)
        self._init_args = {"model_config": "", **dict(spec.init_args)}
        self._host = host
        self._regions = regions
        self._sizes = sizes
        self._waiter: asyncio.Future | None = None
        self._retired = False  # unloading or shutting down: a dead stub is not replaced
        self.abandoned = False  # its requests were ended while its stub still ran them
        self._loop = asyncio.get_running_loop()

    def configure(self, config_json: str, decoupled: bool) -> None:
        """The model's completed config, which `initialize` gets (every later start)."""
        self._init_args = {**self._init_args, "model_config": config_json}
        self.decoupled = decoupled

    @property
    def pid(self) -> int | None:
        return self.stub.pid if self.stub else None

    def send_control(self, message: tuple) -> None:
        """A message on the stub's control queue, if the stub is alive."""
        if self.stub is not None and self.stub.alive():
            self.stub.send_control(message)

    def send_main(self, message: tuple) -> None:
        """A message on the stub's main queue, if the stub is alive."""
        if self.stub is not None and self.stub.alive():
            self.stub.send(message)

    def answered(self, message: tuple) -> None:
        """A message the host does not handle: the answer a lifecycle step waits for."""
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(message)

    # -- starting ---------------------------------------------------------------------
    async def start(self) -> None:
        """Start the stub and run the model's `initialize`; ServerError if it fails."""
        if self.stub is None:
            await self.launch()
        try:
            self.stub.send(p.init(self._init_args, self.spec.model_path, self.decoupled,
                                  self.spec.backend_path))
            # No time limit: a model may load for long; a stub that dies ends the wait.
            _, error, has_is_ready, warm = await self._expect(p.INIT_DONE, "initialize",
                                                              None)
            if error is not None:
                # Triton's words: the manager prefixes "load failed for model ..."
                raise ServerError(ErrorCode.INVALID_ARG, f"Internal: {error}")
            self.readiness.defined = bool(has_is_ready)
            self._map_ahead(warm)
        except BaseException:
            await self._discard_stub()
            self.state = InstanceState.STOPPED
            raise
        self.state = InstanceState.READY
        self._host.stub_started()

    def _map_ahead(self, names: tuple[str, ...]) -> None:
        """Map the stub's regions that its first responses will name (its pool's first)
        and fault in their first page, before READY: the first request then costs what
        the tenth does (issue 43). A head start only: a failure is passed over."""
        for name in names:
            try:
                self._regions.view(name, 0, 1)[0]
            except Exception:  # noqa: BLE001 - the first response maps it, or says why
                pass

    async def launch(self) -> None:
        """Start the stub process and wait for its handshake (no model code runs yet)."""
        self.state = InstanceState.STARTING
        try:
            self.stub = await StubProcess.start(
                self.spec.name, self._loop, self._host.on_messages, self._on_exit,
                self._launcher, python=self.spec.python, sizes=self._sizes,
                debug_args=list(self.spec.debug_args), preload=self.spec.preload)
        except BaseException:
            self.state = InstanceState.STOPPED
            raise
        try:
            await self._expect(p.READY, "start")
        except BaseException:
            await self._discard_stub()
            self.state = InstanceState.STOPPED
            raise
        # before anything imports model.py; later changes come on the control queue
        self.stub.send(p.log_settings(*SERVER_LOG.settings.stub_message_fields()))
        SERVER_LOG.attach(self)

    def apply_log_settings(self, settings: LogSettings) -> None:
        """The server's log settings changed: the stub filters its Logger lines anew.
        On the control queue, so that an `execute` running now (or a model's thread)
        logs by them at once, and on the main queue too when nothing waits there (an
        idle stub), so that the requests sent after this call run with them: the control
        thread may read its queue after the main loop has taken the next request."""
        if self.stub is not None and self.stub.alive():
            message = p.log_settings(*settings.stub_message_fields())
            self.stub.send_control(message)
            self.stub.offer(message)

    async def auto_complete(self, config_json: str) -> str | None:
        """Run the model's `auto_complete_config` in this (launched) stub; the completed
        config as JSON, or None when the model does not define it."""
        assert self.stub is not None
        self.stub.send(p.auto_complete(self.spec.model_path, config_json,
                                       self.spec.backend_path))
        _, error, config = await self._expect(p.AUTO_COMPLETED, "auto-complete its config",
                                              None)
        if error is not None:
            await self._discard_stub()
            self.state = InstanceState.STOPPED
            # the stub says `auto_complete_config: ` when the method itself failed
            raise ServerError(ErrorCode.INVALID_ARG,
                              f"failed to load '{self.spec.model_name}': {error}")
        return config

    async def _expect(self, kind: int, what: str, timeout: float | None = START_TIMEOUT_S
                      ) -> tuple:
        self._waiter = self._loop.create_future()
        try:
            reply = await asyncio.wait_for(self._waiter, timeout)
        except asyncio.TimeoutError:
            raise internal(f"model instance '{self.spec.name}' did not {what} within "
                           f"{timeout:.0f} s") from None
        finally:
            self._waiter = None
        if reply[0] != kind:
            raise internal(f"model instance '{self.spec.name}': unexpected message "
                           f"{reply[0]} while waiting to {what}")
        return reply

    # -- stopping ---------------------------------------------------------------------
    async def stop(self) -> None:
        """Run `finalize`, end the process (killed if it does not end), remove its shm."""
        stub = self.stub
        if stub is None:
            self.state = InstanceState.STOPPED
            return
        self.state = InstanceState.STOPPING
        if stub.alive():
            try:
                self._host.stub_stopping()
                stub.send(p.finalize())
                await self._expect(p.FINALIZED, "finalize", ABANDONED_FINALIZE_S
                                   if self.abandoned else FINALIZE_TIMEOUT_S)
            except ServerError as err:
                log.warning("%s", err.message)
            if not await stub.wait_exit(5.0):
                stub.kill()
                await stub.wait_exit(5.0)
        self._host.stub_lost(f"model instance '{self.spec.name}' of model "
                             f"'{self.spec.model_name}' was unloaded",
                             ErrorCode.UNAVAILABLE, False)
        await self._discard_stub()
        self.state = InstanceState.STOPPED

    def retire(self) -> None:
        """The model is being unloaded (or the server stops): what runs goes on, but a
        stub that dies from now on is not replaced, and a restart under way gives up."""
        self._retired = True

    async def _discard_stub(self) -> None:
        stub, self.stub = self.stub, None
        self.readiness.stub_gone()
        if stub is not None:
            self._host.stub_gone()
            stub.kill()
            await stub.wait_exit(5.0)
            stub.close()
            self._regions.forget(stub.prefix)

    # -- restarting -------------------------------------------------------------------
    def _on_exit(self, code: int) -> None:
        """The stub died on its own: fail what it held, then start a new one."""
        status = f"signal {-code}" if code < 0 else f"status {code}"
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(internal(
                f"Stub process '{self.spec.name}' is not healthy. It exited with {status}."))
        if self.state is not InstanceState.READY:
            return  # starting or stopping: the waiting coroutine deals with it
        message = (f"Stub process '{self.spec.name}' is not healthy: it exited with "
                   f"{status} while model '{self.spec.model_name}' was running")
        # with a restart to come, batches that waited in its queue wait for it
        self._host.stub_lost(message, ErrorCode.INTERNAL, not self._retired)
        if self._retired:
            log.error("%s; not restarted: the model is being unloaded or the server stops",
                      message)
            self.state = InstanceState.STOPPING  # `stop` finds the stub gone
            return
        log.error("%s; restarting it", message)
        self.state = InstanceState.RESTARTING
        self._host.stub_down(message, False)
        self._loop.create_task(self._restart())

    async def _restart(self) -> None:
        """Start a new stub; if that fails, whatever the cause (initialize raised, the
        interpreter is gone, no file descriptors left), try again with a growing pause,
        until it works or the model is unloaded. Queued requests wait (bounded by the
        model's outage.py)."""
        pause = RESTART_PAUSE_S
        while True:
            if self._retired:
                return  # shutting down: `stop` ends what is left
            await self._discard_stub()
            self.restarts += 1
            try:
                await self.start()
                break
            except Exception as err:  # noqa: BLE001 - every failure is tried again
                cause = err.message if isinstance(err, ServerError) else \
                    f"{type(err).__name__}: {err}"
                if self._retired:
                    return
                log.error("restart of '%s' failed: %s; trying again in %.1f s",
                          self.spec.name, cause, pause)
                self.state = InstanceState.RESTARTING
                self._host.stub_down(cause, True)
            await asyncio.sleep(pause)
            if self.state is not InstanceState.RESTARTING:
                return  # unloaded meanwhile
            pause = min(pause * 2, RESTART_PAUSE_MAX_S)
        log.info("model instance '%s' of model '%s' is running again", self.spec.name,
                 self.spec.model_name)
        self._host.stub_back()
