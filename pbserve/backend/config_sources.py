"""Where a model's configuration comes from, in order of precedence (lowest first).

| # | source | how it applies |
| - | ------ | -------------- |
| 1 | server defaults: `--model-config-defaults FILE` (a partial config.pbtxt for every model) and `--backend-config=python,default-max-batch-size=N` | fields the model does not set |
| 2 | the model's `config.pbtxt` | replaces a default field it sets (a repeated field as a whole) |
| 3 | `auto_complete_config` of the model | fills in what is still unset; contradicting 2 is a load error (Triton's) |
| 4 | a load request's `config` (HTTP `POST /v2/repository/models/{m}/load`, gRPC `RepositoryModelLoad`) | replaces 2 entirely (as in Triton); defaults still fill what it leaves unset, auto-complete runs after it and may only add |

`--disable-auto-complete-config` skips 3.
"""

from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from pbserve.backend.model_config import config_from_json, read_model_config
from pbserve.errors import invalid_arg


class ConfigSources:
    def __init__(self, defaults: mc.ModelConfig | None = None,
                 default_max_batch_size: int | None = None) -> None:
        self.defaults = defaults or mc.ModelConfig()
        if default_max_batch_size is not None and not self.defaults.max_batch_size:
            self.defaults.max_batch_size = default_max_batch_size

    @classmethod
    def from_files(cls, defaults_path: str | None, backend_config: list[str]) -> "ConfigSources":
        """From the command line: the defaults file and `python,<key>=<value>` settings."""
        defaults = None
        if defaults_path:
            try:
                defaults = text_format.Parse(Path(defaults_path).read_text(), mc.ModelConfig())
            except (OSError, text_format.ParseError) as err:
                raise invalid_arg(f"--model-config-defaults {defaults_path}: {err}") from None
        settings = parse_backend_config(backend_config).get("python", {})
        batch = settings.get("default-max-batch-size")
        return cls(defaults, int(batch) if batch is not None else None)

    def config(self, model_dir: Path, override_json: str | None = None) -> mc.ModelConfig:
        """Rows 1, 2 and 4 of the table (auto-complete comes later, in the stub)."""
        own = config_from_json(override_json) if override_json else read_model_config(model_dir)
        merged = mc.ModelConfig()
        merged.CopyFrom(self.defaults)
        for field, _ in own.ListFields():
            merged.ClearField(field.name)
        merged.MergeFrom(own)
        return merged


def parse_backend_config(settings: list[str]) -> dict[str, dict[str, str]]:
    """`--backend-config=<backend>,<key>=<value>` (repeatable), as tritonserver reads it;
    a setting without a backend name applies to all (key "")."""
    parsed: dict[str, dict[str, str]] = {}
    for setting in settings:
        backend, _, pair = setting.partition(",") if "," in setting else ("", "", setting)
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise invalid_arg(f"--backend-config option format is '<backend name>,"
                              f"<setting>=<value>'. Got {setting}")
        parsed.setdefault(backend, {})[key] = value
    return parsed
