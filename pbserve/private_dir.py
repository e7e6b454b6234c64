"""Directories in a shared temp dir that only this user could have made or written.

A fixed name under `$TMPDIR` (`/tmp` is world-writable) can be created first by another
local user; whatever they put in it (a `sitecustomize.py` on a stub's PYTHONPATH, a
`bin/python` in an unpacked environment) would then run as the server's user. Before a
directory of a fixed name is used it must be a real directory (not a symlink), owned by
this process's effective uid, with no permission for group or others.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class UntrustedDirectory(OSError):
    """A directory of a fixed name exists but another user could have made or changed it."""


def check_private(path: Path) -> Path:
    """`path` if it is a directory owned by us with mode 0700 or stricter; else raise
    UntrustedDirectory naming what is wrong. Checked with lstat: a symlink is refused."""
    st = os.lstat(path)
    problem = None
    if not stat.S_ISDIR(st.st_mode):
        problem = "is not a directory" if not stat.S_ISLNK(st.st_mode) else "is a symlink"
    elif st.st_uid != os.geteuid():
        problem = f"is owned by uid {st.st_uid}, not {os.geteuid()}"
    elif st.st_mode & 0o077:
        problem = f"has mode {stat.S_IMODE(st.st_mode):04o}, not 0700"
    if problem:
        raise UntrustedDirectory(f"refusing to use '{path}': it {problem} (another user may "
                                 f"have created it; remove it to let pbserve make its own)")
    return path


def private_dir(path: Path) -> Path:
    """Make `path` with mode 0700, or accept an existing one that passes check_private."""
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    return check_private(path)
