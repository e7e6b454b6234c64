"""Cloud model repositories (`--model-repository s3://...`, `gs://...`, `as://...`), as
Triton names them: each is copied into a private local directory (mode 0700, removed at
exit) that the model manager serves, and copied again before each poll (poll mode) and
each load request (explicit mode): files that changed are downloaded, files that are gone
are removed, the others are left alone (the poller sees only real changes). A copy
that downloads anything logs what and how much, and when it is done (copy_log.py).

Paths, as Triton's: `s3://bucket/path`, `s3://host:port/bucket/path` (a private S3 over
HTTP), `s3://https://host:port/bucket/path`; `gs://bucket/path`;
`as://account/container/path`. Built on fsspec (s3fs, gcsfs, adlfs: the extras
`pbserve[s3]`, `[gcs]`, `[azure]`); credentials: cloud_credentials.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import posixpath
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Sequence

from pbserve.core.repository.cloud_credentials import storage_options
from pbserve.core.repository.copy_log import CopyLog

log = logging.getLogger("pbserve.core")

SCHEMES = ("s3://", "gs://", "as://")
_PROTOCOLS = {"s3": ("s3", "s3fs", "s3"), "gs": ("gcs", "gcsfs", "gcs"),
              "as": ("az", "adlfs", "azure")}  # fsspec protocol, package, pbserve extra
# Triton's private-S3 form: s3://[http[s]://]host:port/bucket/path
_S3_HOST = re.compile(r"^s3://(https?://)?([0-9a-zA-Z\-.]+):([0-9]+)/(.+)$")
# a listing's entry fields that change when an object is rewritten, first found wins
_VERSION_FIELDS = ("ETag", "etag", "md5Hash", "generation", "LastModified",
                   "last_modified", "mtime", "updated")


def is_cloud(path: str) -> bool:
    return path.startswith(SCHEMES)


class CloudRepository:
    """One cloud repository and its local copy."""

    def __init__(self, url: str) -> None:
        self.url = url
        scheme = url[:2]
        protocol, package, extra = _PROTOCOLS[scheme]
        try:
            import fsspec
        except ImportError:
            raise ValueError(f"{url}: cloud model repositories need fsspec and {package}: "
                             f"pip install 'pbserve[{extra}]'") from None
        account = ""
        rest = url[len("s3://"):]
        host = _S3_HOST.match(url) if scheme == "s3" else None
        if host is not None:
            endpoint = f"{host.group(1) or 'http://'}{host.group(2)}:{host.group(3)}"
            rest = host.group(4)
        elif scheme == "as":
            account, _, rest = rest.partition("/")
        self.root = rest.strip("/")
        if not self.root or (scheme == "as" and not account):
            raise ValueError(f"{url}: a cloud model repository path names a bucket "
                             f"(s3://bucket/path, gs://bucket/path, as://account/container)")
        options: dict[str, Any] = storage_options(scheme, url, account)
        if host is not None:
            options["endpoint_url"] = endpoint
        try:
            self.fs = fsspec.filesystem(protocol, skip_instance_cache=True, **options)
        except ImportError:
            raise ValueError(f"{url}: needs {package}: pip install 'pbserve[{extra}]'"
                             ) from None
        self.local = Path(tempfile.mkdtemp(prefix="pbserve-repository-"))  # mode 0700
        self._have: dict[str, tuple] = {}  # relative path -> version of the local copy

    def sync(self) -> None:
        """Make the local copy the repository's (blocking: network)."""
        self.fs.invalidate_cache()
        listing = self.fs.find(self.root, detail=True)
        wanted: dict[str, tuple] = {}
        prefix = self.fs._strip_protocol(self.root).rstrip("/") + "/"
        for name, info in listing.items():
            if info.get("type") == "directory" or name.endswith("/") \
                    or not name.startswith(prefix):
                continue
            relative = name[len(prefix):]
            if any(part in ("", ".", "..") for part in relative.split("/")):
                continue  # an object name that would leave the copy
            wanted[relative] = (info.get("size"),
                                next((str(info[f]) for f in _VERSION_FIELDS if f in info), ""))
        fetch = {r: v for r, v in wanted.items() if self._have.get(r) != v}
        progress = CopyLog(self.url, str(self.local), len(fetch),
                           sum(_size(v) for v in fetch.values()))
        for relative, version in fetch.items():
            self._download(posixpath.join(prefix, relative), relative)
            self._have[relative] = version
            progress.file_done(_size(version))
        gone = [r for r in self._have if r not in wanted]
        progress.finish(removed=len(gone))
        for relative in gone:
            del self._have[relative]
            target = self.local / relative
            target.unlink(missing_ok=True)
            for parent in target.parents:  # empty folders go with their last file
                if parent == self.local or any(parent.iterdir()):
                    break
                parent.rmdir()

    def _download(self, remote: str, relative: str) -> None:
        target = self.local / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.pbserve-partial")
        self.fs.get_file(remote, str(partial))
        os.replace(partial, target)  # a reader never sees half a file

    def close(self) -> None:
        shutil.rmtree(self.local, ignore_errors=True)


def _size(version: tuple) -> int:
    """The size a listing gave an object (its version's first field), 0 if none."""
    size = version[0]
    return size if isinstance(size, int) else 0


class CloudRepositories:
    """The `--model-repository` values with each cloud one replaced by its local copy;
    `refresh` copies them again, `close` removes the copies."""

    def __init__(self, paths: Sequence[str]) -> None:
        self._clouds: list[CloudRepository] = []
        self.paths: list[str] = []
        try:
            for path in paths:
                if not is_cloud(path):
                    self.paths.append(path)
                    continue
                cloud = CloudRepository(path)
                self._clouds.append(cloud)
                cloud.sync()
                log.info("model repository %s is copied to %s", path, cloud.local)
                self.paths.append(str(cloud.local))
        except Exception as exc:
            self.close()
            if isinstance(exc, ValueError):
                raise
            raise ValueError(f"failed to read model repository {path}: "
                             f"{type(exc).__name__}: {exc}") from None

    @property
    def has_cloud(self) -> bool:
        return bool(self._clouds)

    async def refresh(self) -> None:
        """Copy each cloud repository again (a failure is logged; the last copy stays)."""
        for cloud in self._clouds:
            try:
                await asyncio.to_thread(cloud.sync)
            except Exception as exc:  # noqa: BLE001 - a network error must not stop polling
                log.warning("failed to poll model repository %s: %s: %s", cloud.url,
                            type(exc).__name__, exc)

    def close(self) -> None:
        for cloud in self._clouds:
            cloud.close()
        self._clouds = []
