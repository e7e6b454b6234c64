"""Which models wait on which: Triton's dependency graph of ensembles (core
src/model_repository_manager), the rules apart from the loading itself (manager.py).

- An ensemble loads the models it composes first; a model met again on that chain of
  loads is a circular dependency (`loading(name)` says so in Triton's words).
- An ensemble is unloaded when a model it composes is, and waits for it: when that
  model is loaded again, so is the ensemble (`went` / `came_back`).
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

from pbserve.errors import ErrorCode, ServerError

# The ensembles whose loads wait for the one in progress, outermost first.
_CHAIN: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "loading_ensembles", default=())


class CircularDependency(ServerError):
    """An ensemble met again on the chain of loads it is waiting for (INVALID_ARG). The
    loads on that chain pass it up as it is, unwrapped by their own words."""

    def __init__(self, name: str, chain: tuple[str, ...]) -> None:
        super().__init__(ErrorCode.INVALID_ARG, f"circular dependency between ensembles: "
                                                f"{name} -> ... -> {chain[-1]} -> {name}")


def check_not_loading(name: str) -> None:
    """CircularDependency when `name` is an ensemble whose load is waiting for this one."""
    chain = _CHAIN.get()
    if name in chain:
        raise CircularDependency(name, chain)


@contextlib.contextmanager
def loading(ensemble: str) -> Iterator[None]:
    """While `ensemble` loads the models it composes (in this task)."""
    check_not_loading(ensemble)
    token = _CHAIN.set((*_CHAIN.get(), ensemble))
    try:
        yield
    finally:
        _CHAIN.reset(token)


class WaitingEnsembles:
    """Ensembles unloaded because a model they compose went, by that model."""

    def __init__(self) -> None:
        self._by_model: dict[str, set[str]] = {}

    def went(self, model: str, ensemble: str) -> None:
        self._by_model.setdefault(model, set()).add(ensemble)

    def came_back(self, model: str) -> list[str]:
        """The ensembles to load again now that `model` is loaded (they wait no more)."""
        return sorted(self._by_model.pop(model, ()))

    def clear(self) -> None:
        self._by_model.clear()
