"""A READY model answers its first request as it answers its tenth (issue 43, item 1):
before READY its stub made its pool's first region and faulted its first page in, and
the parent mapped that region; the model's `execute` did not run for it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pbserve.testing import running_server, stub_pids

ROOT = Path(__file__).resolve().parents[2]


def shm_mappings(pid: int) -> dict[str, int]:
    """The /dev/shm files `pid` maps: name -> resident kB (/proc/PID/smaps)."""
    found: dict[str, int] = {}
    name = None
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if fields[0].endswith(":") and fields[0][0].isupper():
                if name is not None and fields[0] == "Rss:":
                    found[name] = found.get(name, 0) + int(fields[1])
                continue
            path = fields[5] if len(fields) > 5 else ""
            name = path[len("/dev/shm/"):] if path.startswith("/dev/shm/") else None
    return found


@pytest.mark.parametrize("zygote", ["true", "false"])
def test_a_ready_stub_has_its_first_region_faulted_in_and_the_parent_maps_it(
        tmp_path, zygote):
    shutil.copytree(ROOT / "models" / "examples" / "identity", tmp_path / "identity")
    with running_server(tmp_path, args=["--stub-zygote", zygote],
                        log_path=tmp_path / "server.log") as server:
        stubs = stub_pids(server.pid)
        assert len(stubs) == 1
        own = {name: kib for name, kib in shm_mappings(stubs[0]).items()
               if name.endswith("-s-p0")}
        assert len(own) == 1, shm_mappings(stubs[0])
        (region, resident), = own.items()
        assert resident >= 4  # its first page, where a first request's blocks go
        assert shm_mappings(server.pid).get(region, 0) >= 4  # mapped, that page read
        client = server.http_client()
        stats = client.get_inference_statistics("identity")["model_stats"][0]
        client.close()
        assert int(stats.get("execution_count", 0)) == 0  # the warm-up ran no `execute`
