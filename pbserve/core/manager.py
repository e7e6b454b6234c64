"""The model manager: repositories, model states, load/unload, and the request entry.

It implements `pbserve.core.api.InferenceCore` for the frontends. Model control
follows tritonserver's `--model-control-mode`: `none` loads every model at start and
refuses the load/unload API; `explicit` loads the `--load-model` names (`*` = all) and
lets the API load and unload; `poll` loads every model at start and then follows the
repositories' files (repository_poller.py). Config precedence: config_sources.py.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator

from pbserve import __version__
from pbserve.core.cache.stores import new_store
from pbserve.core.observability import metrics
from pbserve.core.observability.cpu_metrics import CpuMetrics
from pbserve.core.model import Model, ModelServices
from pbserve.core.options import CoreOptions
from pbserve.core.config.config_checks import ENSEMBLE_PLATFORM, validate_io_config
from pbserve.core.ensemble.model import EnsembleModel
from pbserve.core.ensemble.remote_step import RemoteStep
from pbserve.core.load_progress import LoadProgress
from pbserve.core.loaded_model import LoadedModel
from pbserve.core.memory.input_placer import InputPlacer
from pbserve.core.memory.block_refs import BlockRefs
from pbserve.core.config.config_sources import ConfigSources
from pbserve.core.repository.file_override import (
    remove_override, sweep_dead_overrides, write_override)
from pbserve.core.config.gpus import visible_gpus
from pbserve.core.instances.instance import InstanceServices, ModelInstance
from pbserve.core.scheduling.rate_limiter import RateLimiter
from pbserve.core.memory.peers import ShmPeers
from pbserve.core.memory.shm_upkeep import ShmUpkeep
from pbserve.core.latency.hop import RunningInstances
from pbserve.core.latency.linger import Linger
from pbserve.core.config.model_config import complete_defaults, config_to_dict, model_metadata
from pbserve.core.repository.repository import (
    RepositoryScan, check_explicit, check_model_name, find_model, scan_repositories,
    served_versions)
from pbserve.core.stub_calls.remote import RemoteModels
from pbserve.core.repository.dependencies import (
    CircularDependency, WaitingEnsembles, check_not_loading, loading)
from pbserve.core.repository.namespaces import Namespaces
from pbserve.core.repository.repository_poller import RepositoryPoller, fingerprint
from pbserve.core.memory.shared_memory import SharedMemoryManager
from pbserve.core.stub_calls.dispatch import StubCalls
from pbserve.core.instances.stub_launch import PlainLauncher, StubLauncher
from pbserve.core.instances.stub_process import stub_environment
from pbserve.core.instances.zygote_launcher import ZygoteLauncher
from pbserve.core.types import InferRequest, InferResponse
from pbserve.errors import ErrorCode, ServerError, invalid_arg, not_found
from shm.names import new_prefix, sweep_dead_owners
from shm.pool import Pool, RegionMap

log = logging.getLogger("pbserve.core")

READY, UNAVAILABLE, LOADING, UNLOADING = "READY", "UNAVAILABLE", "LOADING", "UNLOADING"
# Only what pbserve implements (Triton also lists CUDA shared memory, which pbserve
# refuses with a message saying so); classification first, as Triton lists it.
EXTENSIONS = ["classification", "model_repository", "schedule_policy",
              "model_configuration", "sequence",
              "system_shared_memory", "statistics", "binary_tensor_data", "parameters",
              "generate", "logging", "trace"]


@dataclass
class ModelEntry:
    """What the index says of one model name, and its loaded versions."""

    name: str
    state: str = UNAVAILABLE
    reason: str = ""
    versions: dict[str, Model | EnsembleModel] = field(default_factory=dict)
    failed: bool = False
    fingerprint: tuple = ()  # of its files at the last load attempt (poll mode)
    override_dir: Path | None = None  # the files it was loaded from (file_override.py)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # loaded for itself (at start or by the load API), not only as an ensemble's step:
    # unload_dependents leaves such a model loaded, as Triton does
    explicit: bool = False
    # an ensemble's step names -> the keys they resolved to (namespaces.py)
    step_keys: dict[str, str] = field(default_factory=dict)

    @property
    def composing(self) -> list[str]:
        """The models this ensemble's steps call ([] for a model that is not one)."""
        model = self.latest
        if not isinstance(model, EnsembleModel):
            return []
        return [self.step_keys.get(n, n) for n in model.graph.model_names]

    @property
    def latest(self) -> Model | EnsembleModel | None:
        if not self.versions:
            return None
        return self.versions[max(self.versions, key=int)]


class ModelManager:
    def __init__(self, repositories: list[Path], options: CoreOptions = CoreOptions(),
                 config_sources: ConfigSources | None = None,
                 refresh: Callable[[], Awaitable[None]] | None = None) -> None:
        """`options`: the command line's (core/options.py). `refresh`: brings the
        repositories' local copies up to date (cloud repositories), before each poll and
        each load request."""
        self.repositories = [Path(r).resolve() for r in repositories]
        self.options = options
        self.config_sources = config_sources or ConfigSources()
        self.response_cache = new_store(options.response_cache)
        self._limiter = RateLimiter(options.rate_limit.resources) \
            if options.rate_limit.on else None
        self._services: ModelServices | None = None  # made by start(), with the pool
        self._refresh = refresh
        self._ns = Namespaces(self.repositories, options.model_namespacing)
        self._poller = RepositoryPoller(
            self.repositories, options.poll_secs, self._poll_load, self._poll_unload,
            lambda: {n: e.fingerprint for n, e in self._entries.items() if e.fingerprint},
            refresh=refresh, namespacing=options.model_namespacing) \
            if options.control_mode == "poll" else None
        self._entries: dict[str, ModelEntry] = {}
        self._pool: Pool | None = None
        self._regions = RegionMap()
        # frontend processes (pbserve/frontends/) map the server's shm too
        self.peers = ShmPeers(self._regions, self._all_instances)
        self._upkeep = ShmUpkeep(self.config_sources.shm_sizes, self._regions,
                                 self._all_instances, lambda: self.peers)
        self.peers.on_regions_gone = self._upkeep.regions_gone
        self._calls = StubCalls(self.model, self._regions.view, self)
        self._running = RunningInstances()  # whether a reply is watched for (latency/hop.py)
        self._linger = Linger()  # the loop turns on for a while after each request
        self._waiting = WaitingEnsembles()  # unloaded with a model they compose
        self._background: set[asyncio.Task] = set()
        self.shared_memory = SharedMemoryManager(self._regions, self._forget_client_window,
                                                 options.allow_client_shm, visible_gpus)
        self._live = False
        self._launcher: StubLauncher = PlainLauncher()
        self.cpu_metrics = CpuMetrics(options.metrics_interval_ms) \
            if options.cpu_metrics else None

    # -- server lifecycle -------------------------------------------------------------
    async def start(self, frontend_bells: tuple[int, ...] = ()) -> None:
        """Remove shm a killed server left, then load the start-up models in parallel.
        `frontend_bells`: the frontend processes' doorbells, for every stub
        (frontends/slots.py)."""
        if self.response_cache is not None:  # a redis cache connects (ServerError if not)
            await self.response_cache.open()
        removed = sweep_dead_owners()
        if removed:
            log.info("removed %d shared-memory entries left by dead processes", len(removed))
        for directory in sweep_dead_overrides():
            log.info("removed %s, model files a dead server was loaded from", directory)
        self._launcher = ZygoteLauncher(frontend_bells) if self.options.stub_zygote \
            else PlainLauncher(frontend_bells)
        sizes = self.config_sources.shm_sizes
        self._pool = Pool(new_prefix() + "-parent", sizes.default, sizes.growth)
        self._refs = BlockRefs(self._pool)
        self._calls.blocks = self._refs
        self.peers.refs = self._refs
        self._placer = InputPlacer(self._refs)
        self._upkeep.start(self._pool, self._placer.relieve)
        if self.cpu_metrics is not None:
            self.cpu_metrics.start()
        self._services = ModelServices(
            InstanceServices(self._regions, self._calls, self._running, self._refs,
                             self._upkeep, self._launcher),
            self.options.restart_wait_s, self.response_cache, self._limiter,
            self.options.model_debug, self.options.backend_directory,
            self._linger.after_request)
        self._live = True
        names = self._startup_names()
        if names and isinstance(self._launcher, ZygoteLauncher):
            self._launcher.prepare(sys.executable, stub_environment())
        # Each load logs its outcome; a model that fails stays UNAVAILABLE in the index.
        slots = asyncio.Semaphore(max(1, self.options.load_thread_count))
        progress = LoadProgress(len(names))
        failed_before = {n for n in names if n in self._entries and self._entries[n].failed}

        async def load(name: str) -> None:
            async with slots:
                entry = self._entry(name)
                entry.explicit = True
                progress.begin(name)
                try:
                    await self._load_unless_tried(entry, name in failed_before)
                finally:
                    progress.end(name)
        await asyncio.gather(*(load(n) for n in names), return_exceptions=True)
        progress.close()
        if self._poller is not None:
            self._poller.start()

    async def _load_unless_tried(self, entry: ModelEntry, failed_before: bool) -> None:
        """A start-up load of a model an ensemble's load may have loaded (or tried to)
        meanwhile, or be loading now: its outcome stands, not loaded (and logged) again.
        `failed_before`: it had failed before the start-up loads began (a duplicate)."""
        if entry.lock.locked():
            async with entry.lock:
                pass
        if entry.state != READY and (failed_before or not entry.failed):
            await self._load(entry.name)

    def _startup_names(self) -> list[str]:
        scanned = self._scan()
        for name in scanned.duplicates:
            entry = self._entry(name)
            entry.failed = True
            entry.reason = "failed to poll from model repository: model is not unique"
        startup = self.options.startup_models
        if self.options.control_mode != "explicit" or "*" in startup:
            return list(scanned.models)
        return list(dict.fromkeys(k for n in startup
                                  for k in self._ns.keys_of(n, scanned.models) or [n]))

    def repository_models(self) -> list[str]:
        """The names of the models in the repositories now (loaded or not)."""
        return list(self._scan().models)

    def _scan(self) -> RepositoryScan:
        return scan_repositories(self.repositories, self._ns.enabled)

    def route_missing_to(self, remote: RemoteModels) -> None:
        """BLS calls to models not loaded here go to `remote` (other processes' models,
        stub_calls/remote.py); set by the layer above, which the core never imports."""
        self._calls.remote = remote

    def begin_stop(self) -> None:
        """Shutdown has begun: requests in flight go on, but no stub that dies from now on
        is restarted (a signal to the whole process group must not look like a crash)."""
        for entry in self._entries.values():
            for model in entry.versions.values():
                model.retire()

    def end_requests(self, error: ServerError) -> int:
        """Shutdown's time is up (`--exit-timeout-secs`): every request still queued or
        running gets `error`, which the frontends deliver. How many there were."""
        return sum(model.end_requests(error) for entry in self._entries.values()
                   for model in entry.versions.values())

    def requests_in_flight(self) -> int:
        """Inference requests queued or running in every model (ensembles' own count
        beside their steps')."""
        return sum(model.stats.pending for entry in self._entries.values()
                   for model in entry.versions.values())

    async def stop(self) -> None:
        """Unload every model (finalize runs), then remove the parent's shm."""
        self.begin_stop()
        self._live = False
        if self._poller is not None:
            await self._poller.stop()
        self._waiting.clear()
        await asyncio.gather(*(self._unload(e) for e in list(self._entries.values())),
                             return_exceptions=True)
        await self._launcher.close()
        self.shared_memory.close()
        self._upkeep.stop()
        if self.cpu_metrics is not None:
            self.cpu_metrics.stop()
        if self._pool is not None:
            self._pool.close()
        self._regions.close()
        if self.response_cache is not None:
            await self.response_cache.close()

    # -- InferenceCore: health and metadata -------------------------------------------
    def is_live(self) -> bool:
        return self._live

    async def is_ready(self) -> bool:
        """Strict readiness, as Triton's: every model loaded, and each one ready."""
        if not self.options.strict_readiness:  # false: ready whenever live
            return self._live
        if not self._live or any(e.failed for e in self._entries.values()):
            return False
        models = [(e.name, m) for e in self._entries.values() if e.state == READY
                  for m in e.versions.values()]
        return all(await asyncio.gather(*(self._ready(name, m) for name, m in models)))

    def failed_models(self) -> list[str]:
        """The models whose last load failed (and that serve no version)."""
        return sorted(name for name, e in self._entries.items() if e.failed)

    def server_metadata(self) -> dict[str, Any]:
        return {"name": "triton", "version": __version__, "extensions": EXTENSIONS}

    async def model_ready(self, name: str, version: str = "") -> bool:
        try:
            model = self.model(name, version)
        except ServerError:
            return False
        return await self._ready(name, model)

    @staticmethod
    async def _ready(name: str, model: Model) -> bool:
        reason = await model.not_ready_reason()
        if reason is not None:
            log.debug("Model '%s' version %s is not ready: %s", name, model.version, reason)
        return reason is None

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        model = self.model(name, version)
        entry = self._entries[self._ns.resolve(name, self._entries)]
        return model_metadata(model.cfg, sorted(entry.versions, key=int))

    def model_config(self, name: str, version: str = "") -> dict[str, Any]:
        return config_to_dict(self.model(name, version).cfg)

    def is_decoupled(self, name: str, version: str = "") -> bool:
        return self.model(name, version).decoupled

    def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        scanned = self._scan()
        keys = set(scanned.names()) | set(self._entries)
        place = {k: s.repository for k, s in scanned.models.items()}
        index = []
        for key in sorted(keys, key=lambda k: self._ns.index_order(k, place.get(k))):
            entry, name = self._entries.get(key), self._ns.name(key)
            if entry is None:
                if not ready_only:
                    index.append({"name": name})
                continue
            if ready_only and entry.state != READY:
                continue
            if entry.versions:
                for version in sorted(entry.versions, key=int):
                    index.append({"name": name, "version": version, "state": entry.state,
                                  "reason": entry.reason})
            else:
                index.append({"name": name, "state": entry.state, "reason": entry.reason})
        return index

    def model_statistics(self, name: str, version: str = "") -> list[dict[str, Any]]:
        """Triton's statistics extension: every loaded version, or the one asked for."""
        if version:
            return [_counted(self.model(name, version)).statistics()]
        if len(self._ns.keys_of(name, self._entries)) > 1:
            raise invalid_arg(f"requested model '{name}' is not available")
        self.model(name)  # NOT_FOUND for an unknown model, as Triton
        entry = self._entries[self._ns.resolve(name, self._entries)]
        return [_counted(m).statistics() for _, m in sorted(entry.versions.items())]

    def model_counters(self) -> list[metrics.ModelStats]:
        """Every loaded model version's counters (what /metrics renders)."""
        return [_counted(m) for e in self._entries.values() for m in e.versions.values()]

    def metrics_text(self) -> str:
        cache = self.response_cache.metrics_text() if self.response_cache else ""
        cpu = self.cpu_metrics.render() if self.cpu_metrics else ""
        return metrics.render(self.model_counters()) + cpu + cache + \
            self._calls.custom_metrics.render()

    # -- InferenceCore: inference ------------------------------------------------------
    def input_placer(self) -> InputPlacer | None:
        """Where a frontend may gather a large request's tensors (the parent's pool);
        None before start()."""
        return getattr(self, "_placer", None)

    def model_handle(self, name: str, version: str = "") -> LoadedModel:
        return LoadedModel(self.model(name, version), self.shared_memory)

    async def infer(self, request: InferRequest) -> InferResponse:
        return await self.model_handle(request.model_name, request.model_version
                                       ).infer(request)

    def stream_infer(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        return self.model_handle(request.model_name, request.model_version
                                 ).stream_infer(request)

    def frontend_gone(self, slot: int) -> None:
        """Frontend process `slot` died: every stub gets new queues for the next one
        (ModelInstance.frontend_gone)."""
        for instance in self._all_instances():
            instance.frontend_gone(slot)

    def _all_instances(self) -> Iterator[ModelInstance]:
        for entry in self._entries.values():
            for model in entry.versions.values():
                yield from model.instances

    def _forget_client_window(self, token: str) -> None:
        """A client region was unregistered: every stub drops its mapping of it."""
        for entry in self._entries.values():
            for model in entry.versions.values():
                for instance in model.instances:
                    instance.forget_region(token)

    def model(self, name: str, version: str = "") -> Model | EnsembleModel:
        """The loaded model serving `name` (and `version`, "" = latest); NOT_FOUND else."""
        entry = self._entries.get(self._ns.resolve(name, self._entries))
        if entry is None or entry.state != READY or not entry.versions:
            suffix = " is not found" if entry is None else " has no available versions"
            raise not_found(f"Request for unknown model: '{name}'{suffix}")
        if not version:
            model = entry.latest
            assert model is not None
            return model
        model = entry.versions.get(version)
        if model is None:
            raise not_found(f"Request for unknown model: '{name}' version {version} is "
                            f"not found")
        return model

    # -- InferenceCore: repository control -----------------------------------------------
    async def load_model(self, name: str, config: str | None = None,
                         files: dict[str, bytes] | None = None) -> None:
        check_explicit(self.options.control_mode)
        if self._refresh is not None:
            await self._refresh()
        places = [] if files else self._ns.keys_of(name, self._scan().models)
        if places and places != [name]:  # --model-namespacing: every place of the name
            for key in places:
                await self.load_model(key, config)
            return
        override = None
        if files:
            check_model_name(name)
            override = await asyncio.to_thread(write_override, config, files)
        self._entry(name).explicit = True
        try:
            await self._load(name, config, override)
        except BaseException:  # failed or cancelled: the files are ours unless adopted
            entry = self._entries.get(name)
            if override is not None and (entry is None or entry.override_dir != override):
                remove_override(override)
            raise

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        """Unload `name`; with `unload_dependents`, an ensemble's composing models go too
        (those that no other loaded ensemble calls)."""
        check_explicit(self.options.control_mode)
        places = self._ns.keys_of(name, self._entries)
        if places and places != [name]:  # --model-namespacing: every place of the name
            for key in places:
                await self.unload_model(key, unload_dependents)
            return
        entry = self._entries.get(name)
        if entry is None:
            return
        composing = entry.composing
        entry.explicit = False
        await self._unload(entry)
        if unload_dependents:
            in_use = {m for e in self._entries.values() if e.state == READY
                      for m in e.composing}
            for model in composing:
                other = self._entries.get(model)
                if other is not None and not other.explicit and model not in in_use:
                    await self.unload_model(model, unload_dependents=True)

    def _entry(self, name: str) -> ModelEntry:
        entry = self._entries.get(name)
        if entry is None:
            entry = self._entries[name] = ModelEntry(name)
        return entry

    async def _load(self, name: str, config_override: str | None = None,
                    override_dir: Path | None = None) -> None:
        """(Re)load every served version of `name` (from `override_dir` when the
        request sent its files, else from its repository). A reload starts the new
        instances beside the old ones, swaps, then unloads the old (after their in-flight
        work). On failure a model that was serving keeps serving; one that was not stays
        in the index as UNAVAILABLE with the error as its reason."""
        entry = self._entry(name)
        async with entry.lock:
            old = entry.versions
            if not old:
                entry.state, entry.reason, entry.failed = LOADING, "", False
            source = override_dir or self._source_path(name)
            entry.fingerprint = fingerprint(source) if source is not None else ()
            try:
                entry.versions = await self._load_versions(name, config_override,
                                                           override_dir)
            except Exception as err:  # noqa: BLE001 - a load never takes the server down
                message = err.message if isinstance(err, ServerError) else \
                    f"failed to load '{name}': {err or type(err).__name__}"
                entry.reason = message
                if not old:
                    entry.state, entry.failed = UNAVAILABLE, True
                log.error("%s", message)
                raise ServerError(ErrorCode.INVALID_ARG, message) from None
            entry.state, entry.reason, entry.failed = READY, "", False
            old_dir, entry.override_dir = entry.override_dir, override_dir
            log.info("successfully loaded '%s'", name)
            self._reload_waiting(name)
            if old:
                await self._unload_models(name, list(old.values()))
            remove_override(old_dir)

    def _source_path(self, name: str) -> Path | None:
        repository = self._ns.repository(name)
        if repository is not None:
            return repository / self._ns.name(name) if (repository / self._ns.name(
                name)).is_dir() else None
        for repository in self.repositories:
            if (repository / name).is_dir():
                return repository / name
        return None

    async def _poll_load(self, name: str) -> None:
        try:
            await self._load(name)
        except ServerError:
            pass  # logged, and in the index; tried again when its files change

    async def _poll_unload(self, name: str) -> None:
        entry = self._entries.get(name)
        if entry is not None:
            await self._unload(entry)
            entry.fingerprint = ()

    async def _load_versions(self, name: str, config_override: str | None,
                             override_dir: Path | None = None
                             ) -> dict[str, Model | EnsembleModel]:
        key, name = name, self._ns.name(name)
        model_dir = override_dir or find_model(self.repositories, key).path
        cfg = self.config_sources.config(model_dir, config_override)
        cfg = complete_defaults(cfg, name, model_dir, gpus=visible_gpus(), check_io=False,
                                backend_directory=self.options.backend_directory)
        versions = served_versions(cfg, model_dir)
        assert self._pool is not None
        if cfg.platform == ENSEMBLE_PLATFORM:
            return await self._load_ensemble(key, model_dir, cfg, versions)
        loaded: dict[str, Model | EnsembleModel] = {}
        for version in versions:
            assert self._services is not None
            model = Model(name, version, model_dir, cfg, self._services)
            try:
                await model.load(self.options.auto_complete)
            except ServerError as err:
                await asyncio.gather(*(m.unload() for m in loaded.values()))
                raise ServerError(err.code, f"load failed for model '{name}': version "
                                  f"{version} is at UNAVAILABLE state: {err.message}") from None
            loaded[model.version] = model
        return loaded

    async def _load_ensemble(self, name: str, model_dir: Path, cfg: Any,
                             versions: list[int]) -> dict[str, Model | EnsembleModel]:
        """An ensemble loads the models it composes first (those not loaded yet), as
        Triton does, then checks its steps against their configs."""
        try:
            return await self._load_ensemble_checked(name, model_dir, cfg, versions)
        except ServerError as err:
            if isinstance(err, CircularDependency) or \
                    err.message.startswith("load failed for model"):
                raise
            raise ServerError(err.code, f"load failed for model '{name}': {err.message}"
                              ) from None

    async def _load_ensemble_checked(self, name: str, model_dir: Path, cfg: Any,
                                     versions: list[int]
                                     ) -> dict[str, Model | EnsembleModel]:
        validate_io_config(cfg)
        with loading(name):
            steps = list(dict.fromkeys(s.model_name for s in cfg.ensemble_scheduling.step))
            scanned = self._scan()
            known = set(scanned.models) | {
                n for n, e in self._entries.items() if e.state == READY}
            here = scanned.models[name].repository if name in scanned.models else None
            keys = {m: self._ns.step_key(m, here, known) for m in steps}
            missing = [m for m in steps if keys[m] not in known and not self._remote_serves(m)]
            if missing:
                raise invalid_arg(f"ensemble {name} contains models that are not available "
                                  f"or ambiguous: {', '.join(missing)}")
            for model in steps:
                await self._load_composing(name, keys[model])
        if self._ns.enabled:  # Triton fills in each step's namespace
            for step in cfg.ensemble_scheduling.step:
                source = scanned.models.get(keys[step.model_name])
                step.model_namespace = str(source.repository) if source else ""
        self._entry(name).step_keys = keys

        def step_model(step: str, version: str = "") -> Model | EnsembleModel | RemoteStep:
            return self._step_model(keys.get(step, step), version)
        loaded: dict[str, Model | EnsembleModel] = {}
        for version in versions:
            ensemble = EnsembleModel(self._ns.name(name), version, model_dir, cfg, step_model,
                                     self._refs, self.response_cache)
            await ensemble.load()
            loaded[ensemble.version] = ensemble
        return loaded

    def _remote_serves(self, name: str) -> bool:
        """Whether another process (the request plane) serves `name`."""
        remote = self._calls.remote
        if remote is None:
            return False
        try:
            remote.is_decoupled(name)
        except ServerError:
            return False
        return True

    def _step_model(self, name: str, version: str = "") -> Model | EnsembleModel | RemoteStep:
        """The model an ensemble's step calls: loaded here, else another process's."""
        try:
            return self.model(name, version)
        except ServerError:
            if self._calls.remote is None:
                raise
            return RemoteStep(self._calls.remote, name, version, self._refs)

    async def _load_composing(self, ensemble: str, name: str) -> None:
        """Load `name` for `ensemble` unless it is loaded (or being loaded: then wait)."""
        check_not_loading(name)  # waiting for its load would wait for this one
        entry = self._entries.get(name)
        if entry is not None and entry.lock.locked():
            async with entry.lock:
                pass
        if entry is not None and entry.state == READY and entry.versions:
            return
        if self._source_path(name) is None and self._remote_serves(name):
            return  # another process's model: called through the plane
        try:
            await self._load(name)
        except ServerError as err:
            if isinstance(err, CircularDependency):
                raise
            raise invalid_arg(
                f"ensemble '{ensemble}' depends on '{name}' which has no loaded version. "
                f"Model '{name}' loading failed with error: {err.message}") from None

    async def _unload(self, entry: ModelEntry) -> None:
        async with entry.lock:
            if entry.versions:
                await self._unload_versions(entry)
            entry.state, entry.reason, entry.failed = UNAVAILABLE, "unloaded", False
            remove_override(entry.override_dir)
            entry.override_dir = None
        if self._live:
            await self._unload_ensembles_of(entry.name)

    async def _unload_ensembles_of(self, name: str) -> None:
        """`name` went: the ensembles calling it go too, and come back when it does
        (Triton's dependency graph)."""
        users = [e for e in self._entries.values() if e.state == READY and name in e.composing]
        for user in users:
            log.info("unloading '%s': it composes '%s', which was unloaded", user.name, name)
            self._waiting.went(name, user.name)
            await self._unload(user)

    def _reload_waiting(self, name: str) -> None:
        """`name` is loaded: load again the ensembles its unload took down."""
        for ensemble in self._waiting.came_back(name):
            entry = self._entries.get(ensemble)
            if entry is None or entry.state == READY or entry.lock.locked():
                continue
            task = asyncio.get_running_loop().create_task(self._reload_ensemble(ensemble))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _reload_ensemble(self, name: str) -> None:
        try:
            await self._load(name)
        except ServerError:
            pass  # logged, and in the index

    async def _unload_versions(self, entry: ModelEntry) -> None:
        entry.state = UNLOADING
        models, entry.versions = list(entry.versions.values()), {}
        await self._unload_models(entry.name, models)

    @staticmethod
    async def _unload_models(name: str, models: list[Model | EnsembleModel]) -> None:
        """Unload versions of `name` together; Triton's line for each one that went."""
        results = await asyncio.gather(*(m.unload() for m in models), return_exceptions=True)
        for model, result in zip(models, results):
            if not isinstance(result, BaseException):
                log.info("successfully unloaded '%s' version %s", name, model.version)


def _counted(model: Model | EnsembleModel) -> metrics.ModelStats:
    """The model's statistics, with what its stubs told without waking the core read
    first (Model.read_stubs)."""
    if isinstance(model, Model):
        model.read_stubs()
    return model.stats
