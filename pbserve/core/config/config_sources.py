"""Where a model's configuration comes from, lowest precedence first: server defaults
(`--model-config-defaults`, `--backend-config=python,default-max-batch-size=N`), the
model's config.pbtxt or a load request's `config` (which replaces it, as in Triton), then
`auto_complete_config` (in the stub, later), which may only add. The table with the
details is docs/configuration.md.
"""

from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from pbserve.core.config.model_config import config_from_json, read_model_config
from pbserve.errors import invalid_arg
from shm.pool import DEFAULT_GROWTH, DEFAULT_SIZE, ShmSizes


class ConfigSources:
    def __init__(self, defaults: mc.ModelConfig | None = None,
                 default_max_batch_size: int | None = None,
                 shm_sizes: ShmSizes = ShmSizes()) -> None:
        self.defaults = defaults or mc.ModelConfig()
        self.shm_sizes = shm_sizes  # the pools' (parent's and stubs'), as Triton's
        if default_max_batch_size is not None and not self.defaults.max_batch_size:
            self.defaults.max_batch_size = default_max_batch_size

    @classmethod
    def from_files(cls, defaults_path: str | None, backend_config: list[str],
                   cuda_pool: list[str] | None = None) -> "ConfigSources":
        """From the command line: the defaults file, `python,<key>=<value>` settings and
        `--cuda-memory-pool-byte-size <GPU>:<bytes>` values."""
        defaults = None
        if defaults_path:
            try:
                defaults = text_format.Parse(Path(defaults_path).read_text(), mc.ModelConfig())
            except (OSError, text_format.ParseError) as err:
                raise invalid_arg(f"--model-config-defaults {defaults_path}: {err}") from None
        settings = parse_backend_config(backend_config).get("python", {})
        batch = settings.get("default-max-batch-size")
        sizes = ShmSizes(_byte_size(settings, "shm-default-byte-size", DEFAULT_SIZE),
                         _byte_size(settings, "shm-growth-byte-size", DEFAULT_GROWTH),
                         parse_cuda_pool_sizes(cuda_pool or []))
        return cls(defaults, int(batch) if batch is not None else None, sizes)

    def config(self, model_dir: Path, override_json: str | None = None) -> mc.ModelConfig:
        """Rows 1, 2 and 4 of the table (auto-complete comes later, in the stub)."""
        own = config_from_json(override_json) if override_json else read_model_config(model_dir)
        merged = mc.ModelConfig()
        merged.CopyFrom(self.defaults)
        for field, _ in own.ListFields():
            merged.ClearField(field.name)
        merged.MergeFrom(own)
        return merged


def _byte_size(settings: dict[str, str], key: str, default: int) -> int:
    """A positive byte count from `python,<key>=N`."""
    text = settings.get(key)
    if text is None:
        return default
    if not text.isdigit() or int(text) <= 0:
        raise invalid_arg(f"--backend-config=python,{key}: expected a positive number of "
                          f"bytes, got '{text}'")
    return int(text)


def parse_cuda_pool_sizes(values: list[str]) -> tuple[tuple[int, int], ...]:
    """`--cuda-memory-pool-byte-size <GPU>:<bytes>` (repeatable, as tritonserver's): the
    (GPU, bytes) pairs, a later value for a GPU replacing an earlier one."""
    sizes: dict[int, int] = {}
    for value in values:
        gpu, sep, size = value.partition(":")
        if not sep or not gpu.isdigit() or not size.isdigit() or int(size) <= 0:
            raise invalid_arg(f"--cuda-memory-pool-byte-size option format is '<GPU device "
                              f"ID>:<pool byte size>' with a positive size. Got {value}")
        sizes[int(gpu)] = int(size)
    return tuple(sorted(sizes.items()))


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
