"""The `openai` client of the module's `server` fixture (a running_openai_server)."""

from __future__ import annotations

import openai
import pytest


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=server.openai_url + "/v1", api_key="none",
                       max_retries=0) as client:
        yield client
