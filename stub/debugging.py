"""The stub's side of a debugger in model.py (pbserve/core/instances/model_debug.py).

- stdout is line-buffered, so each `print()` line reaches the server's log at once (the
  parent reads the stub's stdout and stderr pipes: stub_stdio.py);
- the debugged stub (`--debug-terminal`) has the server's terminal: `breakpoint()` opens
  pdb there, a pdb that leaves SIGINT alone: Ctrl-C after `c` stops the server (the
  stub's own handler ignores it, stub/signals.py), where Python's own pdb would stop in
  whatever pbserve code the stub runs then;
- with `--debug-port [HOST:]PORT` it also starts debugpy listening there, and
  `breakpoint()` stops in the IDE attached (nothing happens while none is);
- any other stub has no terminal: `breakpoint()` there writes a warning and goes on.
A PYTHONBREAKPOINT the user set is left to Python in every case.
"""

from __future__ import annotations

import os
import sys


def set_up_debugging(instance_name: str, terminal: bool, port: str) -> None:
    """Called first thing in the stub, before the model is imported."""
    if not terminal:
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    hook = None
    if port:
        import debugpy

        host, _, number = port.rpartition(":")
        address = debugpy.listen((host or "127.0.0.1", int(number)))
        print(f"{instance_name}: debugpy listening on {address[0]}:{address[1]}",
              file=sys.stderr, flush=True)
        hook = debugpy.breakpoint
    elif terminal:
        hook = _pdb_without_sigint
    else:
        hook = _ignored(instance_name)
    if hook is not None and not os.environ.get("PYTHONBREAKPOINT"):
        sys.breakpointhook = hook


def _pdb_without_sigint(*args, **kwargs) -> None:
    """`breakpoint()`: pdb in the caller's frame, with no SIGINT handler of its own."""
    import pdb

    pdb.Pdb(nosigint=True).set_trace(sys._getframe(1))


def _ignored(instance_name: str):
    def breakpointhook(*args, **kwargs) -> None:
        frame = sys._getframe(1)
        print(f"breakpoint() at {frame.f_code.co_filename}:{frame.f_lineno} ignored: "
              f"instance {instance_name} has no terminal (only the stub of the model "
              "that --model-debug names has one)", file=sys.stderr, flush=True)
    return breakpointhook
