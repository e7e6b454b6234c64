"""A real pbserve with the OpenAI endpoint on a free port (`server.openai_url`), and a
raw POST to it, for the OpenAI endpoint's tests."""

from __future__ import annotations

import contextlib
import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator, Sequence

from doc_runner import set_flag

from pbserve.testing import RunningServer, free_ports


@contextlib.contextmanager
def running_openai_server(repositories: Sequence[str | os.PathLike], args: Sequence[str],
                          log_path: Path) -> Iterator[RunningServer]:
    """A ready server with `args`, its `--openai-port` (given or not) a free one; stopped
    at the end."""
    (port,) = free_ports(1)
    server = RunningServer(repositories, set_flag(list(args), "--openai-port", str(port)),
                           log_path=log_path)
    try:
        server.wait_ready()
        server.openai_url = f"http://127.0.0.1:{port}"
        yield server
    finally:
        server.stop()


def post(server: RunningServer, path: str, body: bytes = b"") -> tuple[int, dict]:
    """POST `body` (as JSON) to the OpenAI endpoint: the status and the JSON answer."""
    request = urllib.request.Request(server.openai_url + path, data=body,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
