"""What a case is: the models of its repository, the server's flags, the clients it runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class Model:
    """One model folder, built as a test.sh builds it.

    `src` is a folder under a checkout (`qa/python_models/add_sub`, `examples/bls`);
    `model` and `config` are file names in it (`config=None`: no config.pbtxt);
    `extra` are more files copied next to model.py; `append` lines are added to the config
    (`echo ... >> config.pbtxt`); `subs` are (regex, replacement) edits of its lines (sed);
    `checkout` names another checkout than the case's (`python_backend`).
    """

    src: str
    name: str = ""
    model: str | None = "model.py"
    config: str | None = "config.pbtxt"
    extra: tuple[str, ...] = ()
    append: tuple[str, ...] = ()
    subs: tuple[tuple[str, str], ...] = ()
    model_file: str = "model.py"
    checkout: str = ""

    @property
    def folder(self) -> str:
        return self.name or self.src.rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Client:
    """A client command run in `cwd` (relative to the checkout it comes from).

    `pytest`: run `argv[0]` (a test file, optionally `::Class::test`) under pytest and
    record each test; otherwise run `argv` with python and record its exit status.
    `deselect`: test ids (`Class::test`) left out, with the reason.
    """

    argv: tuple[str, ...]
    cwd: str
    pytest: bool = True
    env: dict[str, str] = field(default_factory=dict)
    deselect: dict[str, str] = field(default_factory=dict)
    label: str = ""
    checkout: str = "server"


@dataclass(frozen=True)
class Case:
    """A repository, one server start, clients in order.

    `load_error`: the server is expected not to become ready and its log to contain this
    text (test.sh's `run_server` failing, then `grep`). `log_after`: texts the server's
    log must contain once it has stopped; `log_lacks`: texts it must not. `skip`: the
    reason the case is not run.
    `setup(case_dir, repository, roots)`: what test.sh does besides copying models
    (a backend folder, generated models). `{case_dir}` in `server_args` and `server_env`
    is the case's folder.
    """

    name: str
    checkout: str
    models: tuple[Model, ...]
    clients: tuple[Client, ...] = ()
    server_args: tuple[str, ...] = ()
    load_error: str = ""
    log_after: tuple[str, ...] = ()
    log_lacks: tuple[str, ...] = ()
    skip: str = ""
    server_env: dict[str, str] = field(default_factory=dict)
    repo_path: str = "models"
    log_name: str = ""
    http_posts: tuple[tuple[str, str], ...] = ()
    setup: Callable[[Path, Path, dict[str, Path]], None] | None = None
