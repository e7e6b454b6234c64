"""`--model-namespacing`: a model name found in several repositories is a model per
repository, as in Triton's ModelRepositoryManager.

With namespacing every model is keyed `<repository>::<name>` in the manager
(repository.py `namespaced_key`; a model loaded from files sent with the load request
keeps its plain name, as in Triton). As in Triton 2.51:
- an ensemble's step names a model of the ensemble's own repository first, and any
  other only when its name is unique (Triton's FindNode with fuzzy matching);
- a client's request, metadata or config call naming an ambiguous name fails with
  INVALID_ARG "There are N identifiers of model ..."; its readiness is false; a BLS call
  naming it fails the same way;
- the repository index lists each place under its plain name, ordered by
  (repository, name);
- a load or unload of the name (explicit mode) loads or unloads every place of it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from pathlib import Path

from pbserve.core.repository.repository import namespaced_key, split_key
from pbserve.errors import ErrorCode, ServerError


class Namespaces:
    """The key of each model name, with namespacing on or off."""

    def __init__(self, repositories: list[Path], enabled: bool) -> None:
        self.repositories = repositories
        self.enabled = enabled
        self._by_name: dict[str, list[str]] = {}  # of the manager's keys (they only grow)
        self._indexed = 0

    def name(self, key: str) -> str:
        """The model name a key stands for (what the model, its stubs and the index see)."""
        return split_key(key, self.repositories)[0] if self.enabled else key

    def repository(self, key: str) -> Path | None:
        """The repository a namespaced key names (None for a plain key)."""
        return split_key(key, self.repositories)[1] if self.enabled else None

    def keys_of(self, name: str, keys: Iterable[str]) -> list[str]:
        """Every key among `keys` that stands for model `name`."""
        if not self.enabled:
            return [name] if name in keys else []
        return [k for k in keys if k == name or self.name(k) == name]

    def resolve(self, name: str, keys: Collection[str]) -> str:
        """The one key a client's `name` addresses among the manager's `keys`; Triton's
        INVALID_ARG when it names several models (an unknown name comes back as is)."""
        if not self.enabled or name in keys:
            return name
        if len(keys) != self._indexed:
            self._by_name = {}
            for key in keys:
                self._by_name.setdefault(self.name(key), []).append(key)
            self._indexed = len(keys)
        found = self._by_name.get(name, [])
        if len(found) > 1:
            raise ServerError(ErrorCode.INVALID_ARG, ambiguous_message(name, len(found)))
        return found[0] if found else name

    def step_key(self, step: str, repository: Path | None, keys: Iterable[str]) -> str:
        """The key an ensemble's step addresses: the model of the ensemble's
        `repository` when it has one, else the name's only model (else the plain name,
        which then is "not available or ambiguous")."""
        keys = set(keys)
        if repository is not None and namespaced_key(repository, step) in keys:
            return namespaced_key(repository, step)
        found = self.keys_of(step, keys) if self.enabled else []
        return found[0] if len(found) == 1 else step

    def index_order(self, key: str, repository: Path | None) -> tuple[str, str]:
        """Where `key` (found in `repository`) goes in the repository index: by name, or
        with namespacing by (repository, name) as Triton's ModelIdentifier sorts."""
        if not self.enabled:
            return ("", key)
        return (str(repository or self.repository(key) or ""), self.name(key))


def ambiguous_message(name: str, count: int) -> str:
    """Triton's words for a name that addresses several namespaced models."""
    return (f"There are {count} identifiers of model '{name}' in global map, model "
            "namespace must be provided to resolve ambiguity.")
