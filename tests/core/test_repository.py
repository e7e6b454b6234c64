"""Scanning model repositories and choosing the versions a model serves."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from pbserve.core.config.model_config import parse_model_config
from pbserve.core.repository.repository import (
    DUPLICATE_REASON,
    ModelSource,
    find_model,
    scan_repositories,
    served_versions,
    version_directories,
)
from pbserve.errors import ErrorCode, ServerError

CONFORMANCE_MODELS = Path("/work/shared/conformance/models")


def model_dir(repo: Path, name: str, versions=("1",), files=()) -> Path:
    path = repo / name
    path.mkdir(parents=True)
    for v in versions:
        (path / v).mkdir()
    for f in files:
        (path / f).write_text("")
    return path


def policy(text: str = ""):
    return parse_model_config('name: "m" backend: "python" ' + text)


# -- scanning --------------------------------------------------------------------

def test_every_subdirectory_is_a_model_and_files_are_not(tmp_path: Path) -> None:
    model_dir(tmp_path, "b")
    model_dir(tmp_path, "a")
    (tmp_path / "README.md").write_text("not a model")
    scan = scan_repositories([tmp_path])
    assert scan.names() == ["a", "b"]
    assert scan.models["a"] == ModelSource("a", tmp_path / "a", tmp_path)
    assert scan.duplicates == {}


def test_models_from_several_repositories_are_merged(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    model_dir(one, "a")
    model_dir(two, "b")
    scan = scan_repositories([one, two])
    assert {n: s.repository for n, s in scan.models.items()} == {"a": one, "b": two}


def test_a_name_in_two_repositories_is_unusable_but_the_others_load(tmp_path: Path, caplog) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    model_dir(one, "shared")
    model_dir(one, "only_one")
    model_dir(two, "shared")
    with caplog.at_level(logging.ERROR):
        scan = scan_repositories([one, two])
    assert list(scan.models) == ["only_one"]
    assert [s.repository for s in scan.duplicates["shared"]] == [one, two]
    assert scan.names() == ["only_one", "shared"]
    assert "failed to poll model 'shared': not unique across all model repositories" in caplog.text
    assert DUPLICATE_REASON == "model appears in two or more repositories"


def test_a_missing_repository_is_tritons_internal_error(tmp_path: Path) -> None:
    with pytest.raises(ServerError) as info:
        scan_repositories([tmp_path / "nope"])
    assert info.value.code == ErrorCode.INTERNAL
    assert info.value.message == f"failed to stat file {tmp_path / 'nope'}"


@pytest.mark.skipif(not CONFORMANCE_MODELS.is_dir(), reason="conformance models not present")
def test_the_conformance_repository_scans_with_version_one_everywhere() -> None:
    scan = scan_repositories([CONFORMANCE_MODELS])
    assert "add_sub" in scan.models and not scan.duplicates
    for source in scan.models.values():
        assert served_versions(policy(), source.path) == [1]


# -- explicit lookup ---------------------------------------------------------------

def test_find_model_returns_its_single_place(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    model_dir(one, "x")
    two.mkdir()
    assert find_model([one, two], "x") == ModelSource("x", one / "x", one)


@pytest.mark.parametrize("where", ["nowhere", "twice"])
def test_find_model_absent_or_duplicated_is_tritons_poll_failure(tmp_path: Path, where: str,
                                                                  caplog) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    if where == "twice":
        model_dir(one, "x")
        model_dir(two, "x")
    with caplog.at_level(logging.ERROR), pytest.raises(ServerError) as info:
        find_model([one, two], "x")
    assert info.value.code == ErrorCode.INTERNAL
    assert info.value.message == "failed to load 'x', failed to poll from model repository"
    assert ("not unique" if where == "twice" else "model not found") in caplog.text


@pytest.mark.parametrize("name, message", [
    ("  ", "Model name cannot be empty. Please enter a valid name to deploy."),
    ("..", "invalid model name '..', model name must not contain path traversal characters"),
    ("a/b", "invalid model name 'a/b', model name must not contain path traversal characters"),
])
def test_find_model_refuses_bad_names(tmp_path: Path, name: str, message: str) -> None:
    with pytest.raises(ServerError) as info:
        find_model([tmp_path], name)
    assert (info.value.code, info.value.message) == (ErrorCode.INVALID_ARG, message)


# -- versions ----------------------------------------------------------------------

def test_version_directories_are_numeric_without_leading_zeros(tmp_path: Path, caplog) -> None:
    names = ("1", "10", "2", "0", "007", "abc", "warmup", "configs")
    path = model_dir(tmp_path, "m", versions=names, files=("3",))
    with caplog.at_level(logging.WARNING):
        assert version_directories(path) == [0, 1, 2, 10]
    assert "ignore version directory '007' which contains leading zeros" in caplog.text
    assert "ignore version directory 'abc' which fails to convert to integral number" in caplog.text


@pytest.mark.parametrize("text, expected", [
    ("", [10]),                                            # no policy: latest 1
    ("version_policy { latest { num_versions: 2 } }", [3, 10]),
    ("version_policy { latest { num_versions: 9 } }", [1, 3, 10]),
    ("version_policy { all { } }", [1, 3, 10]),
    ("version_policy { }", [1, 3, 10]),                    # a policy with no choice is "all"
    ("version_policy { specific { versions: [ 3, 1 ] } }", [1, 3]),
    ("version_policy { specific { versions: [ 3, 7 ] } }", [3]),
])
def test_version_policy_selects_versions(tmp_path: Path, text: str, expected: list[int]) -> None:
    path = model_dir(tmp_path, "m", versions=("1", "3", "10"))
    assert served_versions(policy(text), path) == expected


@pytest.mark.parametrize("versions, text", [
    ((), ""),
    (("1",), "version_policy { specific { versions: [ 2 ] } }"),
    (("1",), "version_policy { latest { num_versions: 0 } }"),
])
def test_a_policy_that_selects_nothing_is_tritons_load_error(tmp_path: Path, versions,
                                                              text) -> None:
    path = model_dir(tmp_path, "m", versions=versions)
    with pytest.raises(ServerError) as info:
        served_versions(policy(text), path)
    assert info.value.code == ErrorCode.INVALID_ARG
    assert info.value.message == ("at least one version must be available under the version "
                                  "policy of model 'm'")
