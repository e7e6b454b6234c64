"""Directories of fixed names in the temp dir that another user planted are never used:
not put on a stub's PYTHONPATH, not run as a model environment's interpreter."""

from __future__ import annotations

import hashlib
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest

from pbserve.core.instances import stub_process
from pbserve.core.repository.execution_env import unpacked
from pbserve.private_dir import UntrustedDirectory, check_private, private_dir
from pbserve.errors import ErrorCode, ServerError
from pbserve.testing import running_server
from client_inputs import http_input

EXAMPLES = Path(__file__).resolve().parents[2] / "models" / "examples"
NOBODY = 65534
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="planting another uid's dir needs root")


def plant(path: Path, owner: int | None, mode: int = 0o700) -> Path:
    """A directory as another user would leave it: theirs (when root can chown), or ours
    but writable by all."""
    path.mkdir(mode=mode)
    os.chmod(path, mode)
    if owner is not None:
        os.chown(path, owner, owner)
    return path


def test_private_dir_is_made_0700_and_accepted_again(tmp_path):
    made = private_dir(tmp_path / "d")
    assert (made.stat().st_mode & 0o777) == 0o700
    assert private_dir(made) == made


@pytest.mark.parametrize("owner,mode,problem", [
    pytest.param(NOBODY, 0o700, "owned by uid 65534", marks=AS_ROOT),
    (None, 0o777, "mode 0777"),
    (None, 0o750, "mode 0750"),
])
def test_a_planted_directory_is_refused(tmp_path, owner, mode, problem):
    planted = plant(tmp_path / "d", owner, mode)
    with pytest.raises(UntrustedDirectory, match=problem):
        check_private(planted)


def test_a_symlink_is_refused(tmp_path):
    (tmp_path / "link").symlink_to(private_dir(tmp_path / "real"))
    with pytest.raises(UntrustedDirectory, match="is a symlink"):
        check_private(tmp_path / "link")


def _planted_stub_path(tmp: Path, marker: Path, owner: int | None, mode: int) -> Path:
    digest = hashlib.sha256(str(stub_process._PROJECT_ROOT).encode()).hexdigest()[:12]
    planted = plant(tmp / f"pbserve_stub_path_{os.getuid()}_{digest}", owner, mode)
    (planted / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    os.chmod(planted / "sitecustomize.py", 0o644)
    return planted


@pytest.mark.parametrize("owner,mode", [pytest.param(NOBODY, 0o755, marks=AS_ROOT),
                                        (None, 0o777)])
def test_a_planted_stub_path_is_never_imported_from(tmp_path, monkeypatch, owner, mode):
    tmp = private_dir(tmp_path / "tmp")
    marker = tmp_path / "planted_code_ran"
    planted = _planted_stub_path(tmp, marker, owner, mode)
    monkeypatch.setenv("TMPDIR", str(tmp))
    log = tmp_path / "server.log"
    with running_server(EXAMPLES, args=["--model-control-mode", "explicit",
                                        "--load-model", "add_sub"], log_path=log) as server:
        a = np.arange(16, dtype=np.float32)
        result = server.http_client().infer(
            "add_sub", [http_input("INPUT0", a), http_input("INPUT1", a)])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
        text = server.log_text()
    assert not marker.exists(), "code from a planted directory ran in a stub"
    assert f"refusing to use '{planted}'" in text
    assert not list(tmp.glob("pbserve_stub_path_own_*")), "the private stub path was left"


@pytest.mark.parametrize("owner,mode", [pytest.param(NOBODY, 0o755, marks=AS_ROOT),
                                        (None, 0o777)])
def test_a_planted_environment_root_is_never_run(tmp_path, monkeypatch, owner, mode):
    tmp = private_dir(tmp_path / "tmp")
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr("tempfile.tempdir", None)  # re-read TMPDIR
    archive = tmp_path / "env.tar.gz"
    with tarfile.open(archive, "w:gz"):
        pass
    st = archive.stat()
    digest = hashlib.sha256(str(archive.resolve()).encode()).hexdigest()[:16]
    root = plant(tmp / f"pbserve_env_{os.getuid()}", owner, mode)
    python = root / f"{digest}-{st.st_mtime_ns}-{st.st_size}" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\necho planted\n")
    python.chmod(0o755)
    with pytest.raises(ServerError) as err:
        unpacked(archive)
    assert err.value.code == ErrorCode.INVALID_ARG
    assert "refusing to use" in err.value.message and "env.tar.gz" in err.value.message
