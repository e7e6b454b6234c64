"""`--model-debug <model>` and `--model-debug-port [HOST:]PORT`: a debugger in model.py.

With `--model-debug M` (pbserve in the foreground of a terminal) model M runs a single
instance, and that instance's stub gets the server's terminal as its stdin, stdout and
stderr: `breakpoint()` in M's model.py opens pdb there. With `--model-debug-port` that
stub also starts `debugpy` listening on the port, and `breakpoint()` stops in the IDE
attached to it (the `[debug]` extra installs debugpy). Every other stub's stdout and
stderr reach the server's log line by line (stub_stdio.py), and `breakpoint()` there is
ignored with a warning (stub/debugging.py).

Set once by the command line before any model loads (as the backend directory is).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class ModelDebug:
    model: str = ""  # the model whose stub gets the terminal; "" = none
    port: str = ""  # "[HOST:]PORT" for debugpy in that stub; "" = none
    terminal: bool = True  # whether the server has one (else debugpy only)


_settings = ModelDebug()


def set_model_debug(model: str, port: str = "", terminal: bool = True) -> None:
    """The command line's --model-debug and --model-debug-port; `terminal`: whether
    the server's stdin is a terminal (without one, only debugpy serves)."""
    global _settings
    _settings = ModelDebug(model or "", port or "", terminal)


def is_debugged(model_name: str) -> bool:
    """Whether `model_name` is the model --model-debug names."""
    return bool(_settings.model) and model_name == _settings.model


def stub_debug_args(model_name: str) -> list[str]:
    """The arguments that make a stub of `model_name` a debugged one ([] for others)."""
    if not is_debugged(model_name):
        return []
    return [*(["--debug-terminal"] if _settings.terminal else []),
            *(["--debug-port", _settings.port] if _settings.port else [])]


def unknown_debugged_model(models: Iterable[str]) -> str | None:
    """The error for a --model-debug that names none of `models` (the repository's), or
    None: checked before any model loads, so a typo is not a silent no-op."""
    names = sorted(models)
    if not _settings.model or _settings.model in names:
        return None
    shown = ", ".join(f"'{n}'" for n in names[:10]) + (", ..." if len(names) > 10 else "")
    return (f"--model-debug '{_settings.model}': no such model in the model repository "
            f"(its models: {shown or 'none'})")
