"""Model statistics across the plane: each worker answers for its own models, a frontend
sums them.

A worker answers requests on `pbserve.stats.<worker>` (core NATS request/reply) with its
manager's statistics of a model (Triton's statistics extension entries). A frontend's
`/v2/models/<m>/stats` (gRPC ModelStatistics) asks every worker the registry lists for
the model, at the same time, and sums their answers version by version: counts and
durations add up, `last_inference` is the latest. A worker that does not answer within
STATS_TIMEOUT_S (killed, cut off) is left out of the sum, with a warning in the log; a
worker that is gone takes its figures with it. The frontend's /metrics is made the same
way from every worker's model counters (`gather_metrics`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from pbserve.core.manager import ModelManager
from pbserve.core.observability.metrics import counters, render, sum_counters
from pbserve.distributed.request_plane import token
from pbserve.errors import ServerError

log = logging.getLogger("pbserve.distributed")

STATS_PREFIX = "pbserve.stats"
STATS_TIMEOUT_S = 2.0
Stats = dict[str, Any]


def stats_subject(worker: str) -> str:
    return f"{STATS_PREFIX}.{token(worker)}"


class StatisticsResponder:
    """A worker's side: its manager's statistics for whoever asks."""

    def __init__(self, manager: ModelManager, nc: Client, worker: str) -> None:
        self._manager = manager
        self._nc = nc
        self._worker = worker
        self._sub = None

    async def start(self) -> None:
        self._sub = await self._nc.subscribe(stats_subject(self._worker), cb=self._answer)

    async def stop(self) -> None:
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except nats.errors.Error:
                pass

    async def _answer(self, msg: Msg) -> None:
        try:
            asked = json.loads(msg.data)
            if asked.get("metrics"):
                reply = {"metrics": [counters(s) for s in self._manager.model_counters()]}
            else:
                reply = {"stats": self._manager.model_statistics(asked["model"],
                                                                 asked.get("version", ""))}
        except ServerError as err:  # unloaded since the registry said so
            reply = {"error": err.message}
        except (ValueError, KeyError, TypeError) as err:
            reply = {"error": f"bad statistics request: {err}"}
        try:
            await msg.respond(json.dumps(reply).encode())
        except nats.errors.Error as err:
            log.warning("worker '%s': statistics not sent: %s", self._worker, err)


async def gather(nc: Client, workers: list[str], model: str, version: str
                 ) -> list[Stats]:
    """The model's statistics summed over `workers` (those that answer), one entry per
    version, versions in order."""
    asked = json.dumps({"model": model, "version": version}).encode()
    answers = await asyncio.gather(*(_ask(nc, w, asked) for w in workers))
    return merge([stats for stats in answers if stats is not None])


async def gather_metrics(nc: Client, workers: list[str]) -> str:
    """Prometheus text of the workers' model counters (those that answer), each model
    version's summed over the workers that serve it."""
    asked = json.dumps({"metrics": True}).encode()
    answers = await asyncio.gather(*(_ask(nc, w, asked, "metrics") for w in workers))
    return render(sum_counters([entry for answer in answers if answer for entry in answer]))


async def _ask(nc: Client, worker: str, asked: bytes, key: str = "stats") -> list | None:
    try:
        msg = await nc.request(stats_subject(worker), asked, timeout=STATS_TIMEOUT_S)
        reply = json.loads(msg.data)
    except (nats.errors.Error, asyncio.TimeoutError, ValueError) as err:
        log.warning("statistics of worker '%s' left out: %s", worker,
                    err or type(err).__name__)
        return None
    if "error" in reply:
        log.warning("statistics of worker '%s' left out: %s", worker, reply["error"])
        return None
    return reply[key]


def merge(answers: list[list[Stats]]) -> list[Stats]:
    """Entries of the same version summed (Triton's statistics extension shape)."""
    by_version: dict[str, Stats] = {}
    for stats in answers:
        for entry in stats:
            version = entry["version"]
            if version in by_version:
                by_version[version] = _add(by_version[version], entry)
            else:
                by_version[version] = json.loads(json.dumps(entry))  # a copy
    return [by_version[v] for v in sorted(by_version, key=lambda v: (len(v), v))]


def _add(total: Stats, entry: Stats) -> Stats:
    total["last_inference"] = max(total["last_inference"], entry["last_inference"])
    total["inference_count"] += entry["inference_count"]
    total["execution_count"] += entry["execution_count"]
    _add_figures(total["inference_stats"], entry["inference_stats"])
    responses = total.setdefault("response_stats", {})
    for key, figures in entry.get("response_stats", {}).items():
        _add_figures(responses.setdefault(key, {}), figures)
    batches = {b["batch_size"]: b for b in total["batch_stats"]}
    for batch in entry["batch_stats"]:
        if batch["batch_size"] in batches:
            _add_figures(batches[batch["batch_size"]], batch)
        else:
            batches[batch["batch_size"]] = json.loads(json.dumps(batch))
    total["batch_stats"] = [batches[size] for size in sorted(batches)]
    return total


def _add_figures(total: dict[str, Any], entry: dict[str, Any]) -> None:
    """{"name": {"count": n, "ns": t}, ...} added into `total` (other keys kept)."""
    for name, figure in entry.items():
        if isinstance(figure, dict) and "count" in figure and "ns" in figure:
            mine = total.setdefault(name, {"count": 0, "ns": 0})
            mine["count"] += figure["count"]
            mine["ns"] += figure["ns"]
