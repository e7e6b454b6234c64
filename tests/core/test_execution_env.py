"""EXECUTION_ENV_PATH archives: a damaged one is a clear load error, not a crash."""

from __future__ import annotations

import pytest

from pbserve.core.repository.execution_env import unpacked
from pbserve.errors import ErrorCode, ServerError


@pytest.mark.parametrize("content", [b"\x1f\x8b\x08\x00garbage", b"not gzip at all", b""])
def test_a_damaged_archive_is_an_invalid_arg_naming_it(tmp_path, content):
    archive = tmp_path / "env.tar.gz"
    archive.write_bytes(content)
    with pytest.raises(ServerError) as err:
        unpacked(archive)
    assert err.value.code == ErrorCode.INVALID_ARG
    assert "env.tar.gz" in err.value.message


def test_an_environment_without_its_interpreter_is_an_invalid_arg_naming_it(tmp_path):
    from pbserve.core.repository.env_check import check_stub_packages

    python = tmp_path / "env" / "bin" / "python3"
    with pytest.raises(ServerError) as err:
        check_stub_packages(str(python), str(tmp_path / "env"), "m")
    assert err.value.code == ErrorCode.INVALID_ARG
    assert f"cannot run its Python '{python}'" in err.value.message
