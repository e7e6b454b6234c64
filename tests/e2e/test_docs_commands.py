"""Every command and python snippet of README.md and docs/*.md that a CI machine can run
is run, so that the docs cannot drift from the code: tests/doc_commands.py finds them
(fenced blocks), tests/doc_run.py and tests/doc_runner.py run them from the repository
root (servers at once, on free ports; the rules are doc_runner.py's). What cannot run here is in NOT_RUN with the reason: a new command or
snippet fails `test_every_documented_command_is_run_or_listed` until it runs or is
listed there, and a listed one that left the docs fails it too."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from doc_commands import Command, Snippet, extract
from doc_run import FRONTEND, DocRun, frontend_snippets, is_client, is_test_module
from doc_runner import DocServer, Outcome

from pbserve.testing import free_ports

ROOT = Path(__file__).resolve().parents[2]
RUN_PROGRAMS = ("pbserve", "nats-server", "curl")

CI_INSTALL = "CI's install step (README's first commands): CI runs it before the suite"
NOT_HERE = ("a deployment over several hosts (nats-host, /models/a, 10.0.0.5): README's "
            "one-host cluster is run instead; tests/test_distributed*.py cover the flags")
NATS_TLS = ("needs certificates, keys and a password the reader makes; "
            "tests/distributed/test_distributed.py runs NATS with users and TLS")
CONDA = "conda is not on CI machines (tests/core/test_execution_env.py unpacks such archives)"
MODEL_VENV = ("makes a venv for a model not in the repository and downloads packages; "
              "tests/core/test_execution_env.py builds such environments offline")
OPENAI_EXAMPLE = ("README's OpenAI example (the --openai-port, 9000, is not one this runner "
                  "moves): tests/server/openai/test_openai_frontend_processes.py runs its "
                  "command and its snippet")
GPU_MACHINE = ("the GPU checks (docs/gpu.md): fetch wheels and Triton's checkouts here, then "
               "run on a lent GPU machine; the device tool's runs, not CI")
NOT_RUN: dict[str, str] = {
    "bash bench/gpu_wheels.sh": GPU_MACHINE,
    "bash bench/gpu_carry.sh SERVER_GIT PYTHON_BACKEND_GIT": GPU_MACHINE,
    "bash bench/gpu_run.sh": GPU_MACHINE,
    "python3 -m venv .venv": CI_INSTALL,
    ". .venv/bin/activate": CI_INSTALL,
    "pip install -e '.[onnx]'": CI_INSTALL,
    "pip install -e '.[test]' torch==2.13.0": CI_INSTALL,
    "python -m pytest -q -n 2": "the whole suite: CI runs it, and it runs this test",
    "nats-server -js -a 0.0.0.0 -p 4222 -sd /var/lib/nats": NOT_HERE,
    "pbserve --request-plane nats://nats-host:4222 --model-repository /models/a "
    "--worker-name w1": NOT_HERE,
    "pbserve --request-plane nats://nats-host:4222 --model-repository /models/b "
    "--worker-name w2": NOT_HERE,
    "pbserve --request-plane nats://nats-host:4222 --http-port 8000 --grpc-port 8001": NOT_HERE,
    "pbserve --request-plane nats://nats-host:4222 --model-repository /models/a "
    "--data-plane-address 10.0.0.5:7000": NOT_HERE,
    "nats-server -js -p 4222 --user pbserve --pass '$NATS_PASSWORD' --tls --tlscert "
    "server.pem --tlskey server.key --tlsverify --tlscacert ca.pem": NATS_TLS,
    "'PBSERVE_REQUEST_PLANE_PASSWORD=$NATS_PASSWORD' pbserve --request-plane "
    "nats://nats-host:4222 --model-repository /models/a --request-plane-user pbserve "
    "--request-plane-tls-ca ca.pem --request-plane-tls-cert client.pem "
    "--request-plane-tls-key client.key": NATS_TLS,
    "TRITONCACHE_REDIS_PASSWORD=secret pbserve --model-repository models/examples "
    "--cache-config redis,host=redis.internal --cache-config redis,port=6379":
        "needs a Redis server at redis.internal; tests/core/test_redis_cache.py runs the "
        "redis cache against a real one",
    "python3.11 -m venv models/my_model/pyenv": MODEL_VENV,
    "models/my_model/pyenv/bin/pip install numpy posix-ipc scipy==1.11.4": MODEL_VENV,
    "conda create -n my_model_env python=3.11 numpy scipy": CONDA,
    "conda activate my_model_env": CONDA,
    "pip install posix-ipc": CONDA,
    "conda pack -o models/my_model/my_model_env.tar.gz": CONDA,
    "pip install -e '.[openai]' openai": CI_INSTALL,
    "pbserve --model-repository models/openai --openai-port 9000 --openai-chat-template "
    "models/openai/echo_llm/chat_template.jinja": OPENAI_EXAMPLE,
    # python snippets, by their first line
    "from openai import OpenAI": OPENAI_EXAMPLE,
    "def sequence_terminated(self, correlation_id, reason):":
        "a method of a model's TritonPythonModel, not a program "
        "(tests/core/test_sequence_batching.py runs it)",
}

COMMANDS, SNIPPETS = extract(ROOT)


def runnable(command: Command) -> bool:
    return command.text not in NOT_RUN and command.program in RUN_PROGRAMS


def snippet_runnable(snippet: Snippet) -> bool:
    return snippet.key not in NOT_RUN and (is_client(snippet) or is_test_module(snippet))


def unlisted(commands: list[Command], snippets: list[Snippet]) -> list[str]:
    """What neither runs here nor is in NOT_RUN."""
    return [c.id for c in commands if c.text not in NOT_RUN and not runnable(c)] + \
        [s.id for s in snippets if s.key not in NOT_RUN and not snippet_runnable(s)]


def stale(commands: list[Command], snippets: list[Snippet]) -> list[str]:
    """NOT_RUN's entries that name nothing in the docs any more."""
    present = {c.text for c in commands} | {s.key for s in snippets}
    return [key for key in NOT_RUN if key not in present]


RUN_COMMANDS = [c for c in COMMANDS if runnable(c)]
RUN_SNIPPETS = [s for s in SNIPPETS if snippet_runnable(s)]
FRONTEND_SNIPPETS = frontend_snippets(RUN_COMMANDS, RUN_SNIPPETS)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, Outcome]:
    """Everything runnable, run once (servers started together)."""
    return DocRun(RUN_COMMANDS, RUN_SNIPPETS, ROOT, tmp_path_factory.mktemp("docs")).run()


def _check(outcomes: dict[str, Outcome], key: str) -> None:
    outcome = outcomes.get(key, Outcome())
    assert outcome.ok, f"{key}\n{outcome.detail}"


def test_every_documented_command_is_run_or_listed():
    assert COMMANDS and SNIPPETS and RUN_COMMANDS and RUN_SNIPPETS
    assert unlisted(COMMANDS, SNIPPETS) == [], \
        "documented commands that neither run here nor are in NOT_RUN (with a reason)"
    assert stale(COMMANDS, SNIPPETS) == [], "NOT_RUN names what the docs no longer have"


@pytest.mark.parametrize("command", RUN_COMMANDS, ids=lambda c: c.id)
def test_documented_command(outcomes, command):
    if command.program == "curl" and shutil.which("curl") is None:
        pytest.skip("curl is not installed on this machine")
    _check(outcomes, command.id)


@pytest.mark.parametrize("snippet", RUN_SNIPPETS, ids=lambda s: s.id)
def test_documented_snippet(outcomes, snippet):
    _check(outcomes, snippet.id)


@pytest.mark.parametrize("snippet", FRONTEND_SNIPPETS, ids=lambda s: s.id)
def test_readme_snippet_through_the_cluster_frontend(outcomes, snippet):
    _check(outcomes, snippet.id + FRONTEND)


# -- the check itself ---------------------------------------------------------------------

DOC = '''# A doc
```bash
pbserve --model-repository models/examples \\
        --http-port 8100   # a comment
frobnicate --all && pbserve --help
```

```
server    models  ready s
pbserve       16     0.62
```

```text
pbserve --model-repository /elsewhere
```

```python
import numpy as np, tritonclient.http as http
c = http.InferenceServerClient("127.0.0.1:8000")
```

```python
x = 1
```

- in a list:
  ```sh
  curl -s 127.0.0.1:8000/v2
  ```
'''


def test_the_check_finds_commands_and_fails_on_an_unlisted_one(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# nothing to run\n")
    (tmp_path / "docs" / "new.md").write_text(DOC)
    commands, snippets = extract(tmp_path)
    assert [(c.line, c.text) for c in commands] == [
        (3, "pbserve --model-repository models/examples --http-port 8100"),
        (5, "frobnicate --all"), (5, "pbserve --help"),
        (14, "pbserve --model-repository /elsewhere"), (28, "curl -s 127.0.0.1:8000/v2")]
    assert [(s.line, s.key) for s in snippets] == [
        (18, "import numpy as np, tritonclient.http as http"), (23, "x = 1")]
    assert unlisted(commands, snippets) == ["docs/new.md:5 frobnicate --all",
                                            "docs/new.md:23 x = 1"]
    assert "python -m pytest -q -n 2" in stale(commands, snippets)


def extract_one(line: str) -> list[Command]:
    return [Command("docs/x.md", 2, 1, tuple(line.split()))]


def test_a_documented_repository_path_that_does_not_exist_fails(tmp_path):
    """The check fails a server command that does not start (docs once said `models`)."""
    [command] = extract_one("pbserve --model-repository models --cache-config local,size=1024")
    server = DocServer(command, ROOT, tmp_path / "server.log", free_ports(4), {})
    try:
        error = server.wait_ready()
    finally:
        server.stop()
    assert error is not None and "exited with status 1 before it was ready" in error
    assert "examples" in error.split("log ends:")[1]  # the log names the model it is not

