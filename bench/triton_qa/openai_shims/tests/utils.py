"""pbserve's stand-ins for Triton's tests/utils.py: each server is a pbserve process with
--openai-port (pbserve.testing.RunningServer), not Triton's in-process server."""

from __future__ import annotations

from pbserve.testing import RunningServer, free_ports


class _Pbserve:
    """A running pbserve serving `model_repository` with its OpenAI endpoint."""

    def __init__(self, model_repository: str, control_mode: str | None = None,
                 load_models: list[str] | None = None) -> None:
        (self.port,) = free_ports(1)
        args = ["--openai-port", str(self.port)]
        if control_mode:
            args += ["--model-control-mode", control_mode]
        for model in load_models or []:
            args += ["--load-model", model]
        self._server = RunningServer([model_repository], args)
        self._server.wait_ready()
        self.url_root = f"http://127.0.0.1:{self.port}"

    def url_for(self, *parts: str) -> str:
        return self.url_root + "/" + "/".join(parts)

    def stop(self) -> None:
        self._server.stop()


def setup_server(model_repository: str, model_control_mode=None, load_models=None):
    mode = getattr(model_control_mode, "name", model_control_mode)
    return _Pbserve(model_repository, mode.lower() if mode else None, load_models)


def setup_fastapi_app(tokenizer, server, backend, **kwargs):
    return server  # the "app" the TestClient stand-in sends to


class OpenAIServer:
    """Triton's OpenAIServer (its main.py's flags) as a pbserve."""

    API_KEY = "EMPTY"

    def __init__(self, cli_args: list[str], *, env_dict=None) -> None:
        flags: dict[str, list[str]] = {}
        for flag, value in zip(cli_args[::2], cli_args[1::2]):
            flags.setdefault(flag, []).append(value)
        self._server = _Pbserve(flags["--model-repository"][0],
                                (flags.get("--model-control-mode") or [None])[0],
                                flags.get("--load-model"))
        self.url_root = self._server.url_root

    def url_for(self, *parts: str) -> str:
        return self._server.url_for(*parts)

    def __enter__(self) -> OpenAIServer:
        return self

    def __exit__(self, *exc) -> None:
        self._server.stop()
