"""Triton's rate limiter (`--rate-limit execution_count`), across every model's instances.

An instance whose group has `rate_limiter { resources [...] priority }` starts an
execution only once its resources are free: a batch handed to it is *staged*, and the
staged instances are allocated in order of their scaled priority (executions so far x
max(priority, 1), lowest first; Triton's ScaledPriority), the first one first: one whose
resources are not free holds back those behind it. Resources are released when the
execution ends (the stub's `execute` returned). An instance without rate_limiter config
is never held.

Resources are per device (the instance's device id) unless `global: true`. What each
resource has is what `--rate-limit-resource name:count[:device]` gives (a device-less
entry applies to every device; for a global resource any entry counts), and by default
the largest count any loaded instance asks for. Triton's load errors: a resource given
on the command line with less than an instance asks for, and a name used both global and
per device.

Caveat (as in Triton): an instance holds its resources for its whole `execute`, BLS calls
included. A BLS call to a model whose instances need a resource the caller holds, with
none of it left, waits for a release that never comes: a deadlock. Give such models
separate resources, or enough copies.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pbserve.errors import ErrorCode, ServerError

GLOBAL = -1  # the device key of global resources
PER_DEVICE = -2  # the device key of a --rate-limit-resource entry without a device
_order = itertools.count()


def parse_resource(text: str) -> tuple[str, int, int]:
    """`name:count[:device]` (tritonserver's --rate-limit-resource); ValueError with
    tritonserver's words if malformed. The device is PER_DEVICE when not given."""
    error = ("--rate-limit-resource option format is '<resource_name>:<count>:<device>' "
             f"or '<resource_name>:<count>'. Got {text}")
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0]:
        raise ValueError(error)
    try:
        count = int(parts[1])
        device = int(parts[2]) if len(parts) == 3 else PER_DEVICE
    except ValueError:
        raise ValueError(error) from None
    if count < 0:
        raise ValueError(error)
    return parts[0], count, device


@dataclass(eq=False)
class InstanceLimit:
    """One instance's place in the rate limiter: what it needs, and its staged start."""

    name: str
    needs: dict[tuple[int, str], int]  # (device or GLOBAL, resource) -> count
    priority: int
    limiter: RateLimiter
    executions: int = 0
    allocated: bool = False
    start: Callable[[], None] | None = field(default=None, repr=False)

    def scaled_priority(self) -> int:
        return self.executions * max(self.priority, 1)

    def stage(self, start: Callable[[], None]) -> None:
        """Run `start` once this instance's resources are allocated (maybe now)."""
        self.limiter.stage(self, start)

    def unstage(self) -> None:
        """The staged start will not be needed (its stub died, the model unloads)."""
        self.start = None

    def release(self) -> None:
        """The execution ended: free its resources, and start what they let start."""
        if self.allocated:
            self.limiter.release(self)


class RateLimiter:
    """The server's rate limiter; `explicit`: the --rate-limit-resource entries."""

    def __init__(self, explicit: Iterable[tuple[str, int, int]] = ()) -> None:
        self._explicit: dict[tuple[int, str], int] = {}
        for name, count, device in explicit:
            self._explicit[(device, name)] = count
        self._instances: list[InstanceLimit] = []
        self._limits: dict[tuple[int, str], int] = {}
        self._in_use: dict[tuple[int, str], int] = {}
        self._staged: list[tuple[int, int, InstanceLimit]] = []

    # -- instances --------------------------------------------------------------------
    def add(self, name: str, resources: Iterable[tuple[str, int, bool]], device: int,
            priority: int) -> InstanceLimit:
        """An instance's limit: `resources` (name, count, global) of its group. Raises
        ServerError INVALID_ARG (Triton's words) if the resources cannot work."""
        needs = {((GLOBAL if is_global else device), res): count
                 for res, count, is_global in resources}
        limit = InstanceLimit(name, needs, priority, self)
        self._instances.append(limit)
        try:
            self._compute_limits()
        except ServerError:
            self._instances.remove(limit)
            self._compute_limits()
            raise
        return limit

    def remove(self, limit: InstanceLimit) -> None:
        """The instance is gone: the default counts are computed again without it."""
        limit.start = None
        if limit in self._instances:
            self._instances.remove(limit)
            self._compute_limits()

    def _compute_limits(self) -> None:
        limits: dict[tuple[int, str], int] = {}
        for instance in self._instances:
            for key, count in instance.needs.items():
                limits[key] = max(limits.get(key, 0), count)
        global_names = {res for (device, res) in limits if device == GLOBAL}
        for device, res in limits:
            if device != GLOBAL and res in global_names:
                raise ServerError(ErrorCode.INVALID_ARG, f'Resource "{res}" is present as '
                                  "both global and device-specific resource in the model "
                                  "configuration.")
        if self._explicit:
            for key, needed in limits.items():
                available = self._explicit_count(*key)
                if available < needed:
                    raise ServerError(
                        ErrorCode.INVALID_ARG, f'Resource count for "{key[1]}" is limited '
                        f"to {available} which will prevent scheduling of one or more "
                        f"model instances, the minimum required count is {needed}")
                limits[key] = available
        self._limits = limits

    def _explicit_count(self, device: int, res: str) -> int:
        """What --rate-limit-resource gives `res` on `device` (0 when not listed)."""
        if device == GLOBAL:
            counts = [c for (_, name), c in self._explicit.items() if name == res]
        else:
            counts = [c for (d, name), c in self._explicit.items()
                      if name == res and d in (device, PER_DEVICE)]
        return max(counts, default=0)

    # -- executions -------------------------------------------------------------------
    def stage(self, limit: InstanceLimit, start: Callable[[], None]) -> None:
        limit.start = start
        heapq.heappush(self._staged, (limit.scaled_priority(), next(_order), limit))
        self._allocate()

    def release(self, limit: InstanceLimit) -> None:
        limit.allocated = False
        limit.executions += 1
        for key, count in limit.needs.items():
            self._in_use[key] -= count
        self._allocate()

    def _allocate(self) -> None:
        """Start staged instances in priority order while the first one's resources
        are free."""
        while self._staged:
            limit = self._staged[0][2]
            if limit.start is None:  # unstaged meanwhile
                heapq.heappop(self._staged)
                continue
            if any(self._in_use.get(key, 0) + count > self._limits.get(key, 0)
                   for key, count in limit.needs.items()):
                return
            heapq.heappop(self._staged)
            for key, count in limit.needs.items():
                self._in_use[key] = self._in_use.get(key, 0) + count
            limit.allocated = True
            start, limit.start = limit.start, None
            start()
