"""Model repositories on disk: which models exist, where, and which versions to serve.

Triton's layout: each subdirectory of a repository is a model (hidden ones included,
as Triton does), each numeric subdirectory of a model is a version. Several
repositories may be given; a name found in more than one is unusable (Triton's
rule) but does not affect the other models, unless `--model-namespacing`: then each
place is a model of its own, and every model is keyed `<repository>::<name>` (Triton's
ModelIdentifier).
This module only reads.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from pbserve.errors import ErrorCode, ServerError, invalid_arg

log = logging.getLogger(__name__)

# Triton's MODEL_READY_REASON_DUPLICATE: the index reason of a name in two repositories.
DUPLICATE_REASON = "model appears in two or more repositories"
# Subdirectories of a model directory that are never versions (Triton's constants).
NOT_VERSION_DIRS = frozenset({"warmup", "initial_state", "configs"})
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class ModelSource:
    """Where a model lives: `path` is `<repository>/<name>`."""

    name: str
    path: Path
    repository: Path


def namespaced_key(repository: Path, name: str) -> str:
    """The key of model `name` of `repository` with --model-namespacing (Triton's
    ModelIdentifier::str())."""
    return f"{repository}::{name}"


def split_key(key: str, repositories: Iterable[Path]) -> tuple[str, Path | None]:
    """A model key's name and repository (None for a plain name)."""
    for repository in repositories:
        prefix = f"{repository}::"
        if key.startswith(prefix):
            return key[len(prefix):], Path(repository)
    return key, None


@dataclass
class RepositoryScan:
    """Every model name found: `models` are usable, `duplicates` maps each name seen in
    two or more repositories to all its places (index it as UNAVAILABLE, DUPLICATE_REASON).
    With namespacing every model is in `models`, under its namespaced_key."""

    models: dict[str, ModelSource] = field(default_factory=dict)
    duplicates: dict[str, list[ModelSource]] = field(default_factory=dict)

    def names(self) -> list[str]:
        """All names, usable or not, sorted (the order of Triton's repository index)."""
        return sorted({*self.models, *self.duplicates})


def scan_repositories(repositories: Iterable[Path], namespacing: bool = False
                      ) -> RepositoryScan:
    """Find every model of every repository (Triton's Poll of all models)."""
    places: dict[str, list[ModelSource]] = {}
    for repository in repositories:
        repository = Path(repository)
        for name in model_names(repository):
            places.setdefault(name, []).append(
                ModelSource(name, repository / name, repository))
    scan = RepositoryScan()
    for name in sorted(places):
        sources = places[name]
        if namespacing:
            for source in sources:
                scan.models[namespaced_key(source.repository, name)] = source
        elif len(sources) == 1:
            scan.models[name] = sources[0]
        else:
            scan.duplicates[name] = sources
            log.error("failed to poll model '%s': not unique across all model repositories",
                      name)
    return scan


def model_names(repository: Path) -> list[str]:
    """The names in `repository` (its subdirectories), with tritonserver 2.51's errors
    for one that is missing ("failed to stat file"), not a directory ("repository path is
    not a valid directory", then the path) or a directory that cannot be read ("failed to
    open directory")."""
    try:
        is_directory = repository.is_dir()
        repository.stat()
    except OSError:
        raise ServerError(ErrorCode.INTERNAL, f"failed to stat file {repository}") from None
    if not is_directory:
        raise ServerError(ErrorCode.INVALID_ARG,
                          f"repository path is not a valid directory: {repository}")
    return _subdirectories(repository)


def check_repositories(repositories: Iterable[Path]) -> None:
    """ServerError, as `model_names`, for the first repository that cannot be read."""
    for repository in repositories:
        model_names(Path(repository))


def find_model(repositories: Iterable[Path], name: str) -> ModelSource:
    """The one place of model `name` (or namespaced key) for an explicit load, with
    Triton's errors: a bad name is INVALID_ARG; absent or in two repositories is Triton's
    INTERNAL "failed to poll" (the log says which)."""
    repositories = list(repositories)
    plain, repository = split_key(name, repositories)
    if repository is not None:
        if (repository / plain).is_dir():
            return ModelSource(plain, repository / plain, repository)
        name = plain
    check_model_name(name)
    sources = [ModelSource(name, Path(r) / name, Path(r)) for r in repositories
               if (Path(r) / name).exists()]
    if len(sources) == 1:
        return sources[0]
    if sources:
        log.error("failed to poll model '%s': not unique across all model repositories", name)
    else:
        log.error("failed to poll model '%s': model not found in any model repository.", name)
    raise ServerError(ErrorCode.INTERNAL,
                      f"failed to load '{name}', failed to poll from model repository")


def check_explicit(control_mode: str) -> None:
    """Triton's refusals of a model load or unload outside --model-control-mode=explicit."""
    if control_mode == "poll":
        raise ServerError(ErrorCode.UNAVAILABLE, "explicit model load / unload is not "
                          "allowed if polling is enabled")
    if control_mode != "explicit":
        raise ServerError(ErrorCode.UNAVAILABLE, "explicit model load / unload is not "
                          "allowed if model control mode is not EXPLICIT")


def check_model_name(name: str) -> None:
    """Triton's ValidateModelName (explicit load): no empty names, no path traversal."""
    trimmed = name.strip()
    if not trimmed:
        raise invalid_arg("Model name cannot be empty. Please enter a valid name to deploy.")
    if trimmed == ".." or "/" in trimmed:
        raise invalid_arg(f"invalid model name '{name}', model name must not contain path "
                          "traversal characters")


def version_directories(model_path: Path) -> list[int]:
    """The versions present under a model directory, ascending. Like Triton, names
    with a leading zero and names that are not numbers are skipped with a warning."""
    versions = []
    for entry in _subdirectories(Path(model_path)):
        if entry in NOT_VERSION_DIRS:
            continue
        if len(entry) > 1 and entry[0] == "0":
            log.warning("ignore version directory '%s' which contains leading zeros in its "
                        "directory name", entry)
            continue
        if not (entry.isascii() and entry.isdigit()) or int(entry) > _INT64_MAX:
            log.warning("ignore version directory '%s' which fails to convert to integral "
                        "number", entry)
            continue
        versions.append(int(entry))
    return sorted(versions)


def served_versions(cfg: mc.ModelConfig, model_path: Path) -> list[int]:
    """The versions the config's version_policy selects (ascending): latest N (N=1
    when no policy is set), all, or the specific ones that exist. None is Triton's
    load error for the model."""
    existing = version_directories(model_path)
    name = cfg.name or Path(model_path).name
    policy = cfg.version_policy
    # No policy at all is Triton's default, latest 1; a policy with no choice is "all".
    choice = policy.WhichOneof("policy_choice") if cfg.HasField("version_policy") else "latest"
    if choice == "specific":
        present = set(existing)
        selected = set()
        for version in policy.specific.versions:
            if version in present:
                selected.add(version)
            else:
                log.error("version %d is specified for model '%s', but the version directory "
                          "is not present", version, name)
        chosen = sorted(selected)
    elif choice == "latest":
        latest = policy.latest.num_versions if cfg.HasField("version_policy") else 1
        chosen = existing[max(0, len(existing) - latest):] if latest else []
    else:
        chosen = existing
    if not chosen:
        raise invalid_arg("at least one version must be available under the version policy "
                          f"of model '{name}'")
    return chosen


def _subdirectories(path: Path) -> list[str]:
    """Names of the subdirectories of `path` (symlinks followed), sorted."""
    try:
        return sorted(entry.name for entry in path.iterdir() if entry.is_dir())
    except OSError:
        raise ServerError(ErrorCode.INTERNAL, f"failed to open directory {path}") from None
