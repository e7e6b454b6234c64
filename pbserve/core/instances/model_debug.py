"""`--model-debug <model>` and `--model-debug-port [HOST:]PORT`: a debugger in model.py.

With `--model-debug M` (pbserve in the foreground of a terminal) model M runs a single
instance, and that instance's stub gets the server's terminal as its stdin, stdout and
stderr: `breakpoint()` in M's model.py opens pdb there. With `--model-debug-port` that
stub also starts `debugpy` listening on the port, and `breakpoint()` stops in the IDE
attached to it (the `[debug]` extra installs debugpy). Every other stub's stdout and
stderr reach the server's log line by line (stub_stdio.py), and `breakpoint()` there is
ignored with a warning (stub/debugging.py).

The command line makes the flags into a `ModelDebug`, part of the core's options.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class ModelDebug:
    """The two flags (part of core/options.py's CoreOptions)."""

    model: str = ""  # the model whose stub gets the terminal; "" = none
    port: str = ""  # "[HOST:]PORT" for debugpy in that stub; "" = none
    terminal: bool = True  # whether the server has one (else debugpy only)

    def debugs(self, model_name: str) -> bool:
        """Whether `model_name` is the model --model-debug names."""
        return bool(self.model) and model_name == self.model

    def stub_args(self, model_name: str) -> tuple[str, ...]:
        """The arguments that make a stub of `model_name` a debugged one (() for others)."""
        if not self.debugs(model_name):
            return ()
        return (*(("--debug-terminal",) if self.terminal else ()),
                *(("--debug-port", self.port) if self.port else ()))


def unknown_debugged_model(debug: ModelDebug, models: Iterable[str]) -> str | None:
    """The error for a --model-debug that names none of `models` (the repository's), or
    None: checked before any model loads, so a typo is not a silent no-op."""
    names = sorted(models)
    if not debug.model or debug.model in names:
        return None
    shown = ", ".join(f"'{n}'" for n in names[:10]) + (", ..." if len(names) > 10 else "")
    return (f"--model-debug '{debug.model}': no such model in the model repository "
            f"(its models: {shown or 'none'})")
