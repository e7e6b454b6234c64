"""What a stub writes to its stdout and stderr, in the server's log line by line.

`print()` in a model, a traceback a library writes, a C extension's output: each line is
logged as it comes (the stub's stdout is line-buffered, stub/debugging.py) with the
instance's name, stdout at INFO and stderr at WARNING, through the server's log
settings (so `--log-file` gets them too). One thread per stub reads both pipes until
both are closed; a last line without a newline is logged at the end.

A line pb_utils.Logger writes itself, before the stub's log channel exists (auto-complete,
model.py's import, as Triton's stub does to its stderr), has a glog heading of its own
(`W1128 20:27:18.659269 <pid> model.py:93] text`): it is logged at its level with its
`file:line] text` under the server's heading, not with two headings.
"""

from __future__ import annotations

import logging
import os
import re
import selectors
import threading
from typing import IO

log = logging.getLogger("pbserve.stub")
_CHUNK = 65536
_GLOG = re.compile(r"([IWE])\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ (\S+:\d+\] .*)", re.DOTALL)
_GLOG_LEVELS = {"I": logging.INFO, "W": logging.WARNING, "E": logging.ERROR}


class StubOutput:
    """Reads a stub's stdout and stderr pipes and logs each line."""

    def __init__(self, instance_name: str, stdout: IO[bytes], stderr: IO[bytes]) -> None:
        self.instance_name = instance_name
        self._levels = {stdout.fileno(): logging.INFO, stderr.fileno(): logging.WARNING}
        self._pipes = (stdout, stderr)
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"pbserve-output-{instance_name}")
        self._thread.start()

    def _run(self) -> None:
        partial = {fd: b"" for fd in self._levels}
        with selectors.DefaultSelector() as selector:
            for pipe in self._pipes:
                selector.register(pipe, selectors.EVENT_READ)
            while selector.get_map():
                for key, _ in selector.select():
                    fd = key.fd
                    chunk = _read(fd)
                    if not chunk:
                        selector.unregister(key.fileobj)
                        if partial[fd]:
                            self._log(fd, partial[fd])
                        continue
                    *lines, partial[fd] = (partial[fd] + chunk).split(b"\n")
                    for line in lines:
                        self._log(fd, line)
        for pipe in self._pipes:
            pipe.close()

    def _log(self, fd: int, line: bytes) -> None:
        text = line.decode(errors="replace").rstrip("\r")
        level = self._levels[fd]
        logged = _GLOG.fullmatch(text)
        if logged is not None:
            level, text = _GLOG_LEVELS[logged[1]], logged[2]
        log.log(level, "%s] %s", self.instance_name, text)

    def join(self, timeout: float) -> None:
        """Wait until the stub's output is all logged (its pipes closed)."""
        self._thread.join(timeout)


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, _CHUNK)
    except OSError:
        return b""
