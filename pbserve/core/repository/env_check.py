"""Whether an EXECUTION_ENV_PATH environment can run pbserve's stub, asked before its
first stub starts.

The stub imports numpy and posix_ipc, which the environment itself must hold
(execution_env.py). Without them a stub dies at start-up with only a traceback in the
log; here the environment's interpreter tries those imports once and the load fails
with the package it lacks and how to add it. An environment that passed is not asked
again while its interpreter file stays the same; one that failed is asked on each load
(the user may have installed the package since).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading

from pbserve.errors import invalid_arg
from pbserve.secret_env import SECRET_ENV

# import name -> what `pip install` calls it
STUB_PACKAGES = {"posix_ipc": "posix-ipc", "numpy": "numpy"}
MIN_PYTHON = (3, 10)
CHECK_TIMEOUT_S = 60.0
# Runs in the environment's Python, whatever its version: nothing newer than 3.0 here.
_SCRIPT = """
import json, sys
missing = {}
for name in %r:
    try:
        __import__(name)
    except Exception as exc:
        missing[name] = "%%s: %%s" %% (type(exc).__name__, exc)
print(json.dumps({"version": list(sys.version_info[:2]), "missing": missing}))
""" % (tuple(STUB_PACKAGES),)

_passed: set[tuple] = set()  # interpreter identities that passed
_lock = threading.Lock()


def check_stub_packages(python: str, env: str, model: str) -> None:
    """INVALID_ARG naming what `env` (the EXECUTION_ENV_PATH of `model`, whose
    interpreter is `python`) lacks to run the stub. Blocking: call it off the loop."""
    identity = _identity(python)
    with _lock:
        if identity in _passed:
            return
    report = _ask(python, env, model)
    version = tuple(report.get("version", ()))
    if version and version < MIN_PYTHON:
        raise invalid_arg(
            f"the execution environment '{env}' of model '{model}' has Python "
            f"{'.'.join(map(str, version))}; pbserve's stub needs Python "
            f"{'.'.join(map(str, MIN_PYTHON))} or newer")
    missing = report.get("missing") or {}
    if missing:
        raise invalid_arg(_missing_message(python, env, model, missing))
    with _lock:
        _passed.add(identity)


def _missing_message(python: str, env: str, model: str, failures: dict[str, str]) -> str:
    """`failures`: import name -> `Type: message` of its import."""
    missing = [n for n in failures if failures[n].startswith("ModuleNotFoundError:")]
    broken = [n for n in failures if n not in missing]
    where = f"the execution environment '{env}' of model '{model}'"
    if not missing:
        return (f"{where} cannot import what pbserve's stub needs: " +
                "; ".join(f"'{n}': {failures[n]}" for n in broken))
    packages = " ".join(STUB_PACKAGES[n] for n in missing)
    which = (f"the package '{missing[0]}'" if len(missing) == 1 else
             "the packages " + ", ".join(f"'{n}'" for n in missing))
    how = ("into the environment it was packed from, and pack it again"
           if env.endswith(".tar.gz") else f"into it ({python} -m pip install {packages})")
    text = f"{where} lacks {which} that pbserve's stub needs: pip install {packages} {how}"
    for name in broken:
        text += f"; and '{name}' does not import: {failures[name]}"
    return text


def _ask(python: str, env: str, model: str) -> dict:
    try:
        done = subprocess.run([python, "-c", _SCRIPT], capture_output=True, text=True,
                              timeout=CHECK_TIMEOUT_S, stdin=subprocess.DEVNULL,
                              env={k: v for k, v in os.environ.items() if k not in SECRET_ENV})
    except (OSError, subprocess.TimeoutExpired) as err:
        raise invalid_arg(f"the execution environment '{env}' of model '{model}' cannot "
                          f"run its Python '{python}': {err}") from None
    lines = done.stdout.strip().splitlines()
    try:
        report = json.loads(lines[-1]) if lines else None
    except ValueError:
        report = None
    if done.returncode != 0 or not isinstance(report, dict):
        last = (done.stderr.strip().splitlines() or [f"status {done.returncode}"])[-1]
        raise invalid_arg(f"the execution environment '{env}' of model '{model}' cannot "
                          f"run its Python '{python}': {last}")
    return report


def _identity(python: str) -> tuple:
    """The interpreter file as it is now (a replaced one is checked again)."""
    real = os.path.realpath(python)
    try:
        stat = os.stat(real)
    except OSError:  # no interpreter there: never passed, and `_ask` says so
        return python, real
    return python, real, stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_size
