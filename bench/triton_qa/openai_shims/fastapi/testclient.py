"""Stand-in for FastAPI's TestClient: Triton's tests hand it their `app`, which the
shim's `setup_fastapi_app` made a running pbserve; requests go to its OpenAI port."""

from __future__ import annotations

import requests


class TestClient:
    __test__ = False

    def __init__(self, app) -> None:
        self._server = app
        self._session = requests.Session()

    def __enter__(self) -> TestClient:
        return self

    def __exit__(self, *exc) -> None:
        self._session.close()

    def request(self, method: str, path: str, **kwargs):
        return self._session.request(method, self._server.url_root + path, **kwargs)

    def get(self, path: str, **kwargs):
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs):
        return self.request("POST", path, **kwargs)
