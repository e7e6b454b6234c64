"""`python -m stub.zygote --fd FD --parent-pid N [--preload MODULE]`: forks stubs that
share its imports.

The server starts one per interpreter, stub environment and framework (pbserve's
`instances/zygote_launcher.py`). It imports what every stub imports (numpy,
`backend_utils`, the stub package, the shm primitives) and, for the stubs of a built-in
backend, that backend's framework (`--preload torch`), and then waits on its end of a
SOCK_SEQPACKET socket pair. Each launch request is a JSON message with the stub's
arguments and, passed with SCM_RIGHTS, the doorbell eventfd and the write ends of the
stub's stdout and stderr pipes (the server logs their lines); the zygote forks, the
child puts the pipes on its fds 1 and 2 first thing and becomes `python -m stub ARGS`
(runpy runs `stub/__main__.py` as `__main__`, the interpreter then ends as that command
would; a framework zygote's stub ends without the C++ static destructors,
`run_then_exit_at_once`). The pages imported here are shared copy-on-write by every stub
it forks.

What a forked stub gets is what `python -m stub` gets from the server: the same
environment (the zygote was started with it, and a stub needing another gets another
zygote), no file descriptor but 0 (/dev/null), 1 and 2 (its own pipes) and its doorbell,
the default signal dispositions but the stub's own (SIGINT and SIGTERM handlers that do
nothing), an empty signal mask. Its parent is the zygote: the stub's PR_SET_PDEATHSIG
names the zygote, whose own names the server, so a server that dies takes the zygote and
then every stub along. The zygote runs no code of its own in other threads when it forks
(OpenBLAS stops its pool before a fork; onnxruntime's idle thread is not copied: a fork
copies the calling thread alone) and holds no shared memory.

Messages to the server: {"ready": pid}; {"started": id, "pid": pid} or {"failed": id,
"error": text} for each launch; {"exited": pid, "code": returncode} when a stub it forked
ended (the zygote reaps them; `code` as Popen's: -N for a signal). It ends when the
server closes its end.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import json
import os
import select
import signal
import socket
import sys
import threading
import traceback
from typing import Callable

from stub.parent_death import die_with_parent
from stub.signals import set_shutdown_handlers

set_shutdown_handlers()  # as a stub: the server's process group gets Ctrl-C, not us

# What every stub imports before its model (stub/__main__.py, stub/stub.py).
import shm.pool  # noqa: E402,F401
import stub.stub  # noqa: E402,F401

MAX_MESSAGE = 1 << 20
MAX_FRONTEND_BELLS = 64  # frontend processes a stub answers directly, at most


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m stub.zygote")
    parser.add_argument("--fd", type=int, required=True, help="this end of the socket pair")
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--cmdline-room", default="",
                        help="filler: room for a forked stub's command line")
    parser.add_argument("--preload", action="append", default=[], metavar="MODULE",
                        help="a framework its stubs import (a built-in backend's: torch, "
                             "onnxruntime, openvino), imported here once")
    args = parser.parse_args()
    if not hasattr(socket, "recv_fds") or not hasattr(os, "waitstatus_to_exitcode"):
        sys.exit("a stub zygote needs Python 3.9 or later")  # the server starts plainly
    die_with_parent(args.parent_pid)
    _open_standard_fds()
    preload(args.preload)
    sock = socket.socket(fileno=args.fd)
    launch = serve(sock)
    if launch is None:
        return
    # in a forked child: become the stub
    if args.preload:
        run_then_exit_at_once(lambda: become_stub(*launch))
    else:
        become_stub(*launch)


def preload(modules: list[str]) -> None:
    """Import the frameworks a built-in backend's stubs import, so that every stub forked
    from here shares their pages (a framework zygote: torch costs ~1 s of CPU and
    ~230 MB a process otherwise). One that cannot be imported here (not installed in
    this environment, say) is passed over in silence: its stubs import it themselves and
    say why it fails, in the backend's own words. Importing starts no thread of theirs
    that a fork would copy (a fork copies the calling thread alone); what they start at
    first use, they start in each stub."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - the stub's own import reports it
            pass


def serve(sock: socket.socket) -> tuple[list[str], int] | None:
    """Fork a stub for each request until the server goes; in a forked child, return
    its arguments and doorbell fd, its stdout and stderr in place (the zygote itself
    returns None)."""
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, _no_op)
    # What is imported now lives as long as the stubs: the collector leaves it alone, so
    # that a stub's collections do not write to (and so copy) the shared pages.
    gc.freeze()
    _send(sock, {"ready": os.getpid()})
    while True:
        readable, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in readable:
            _drain(wake_r)
            _reap(sock)
        if sock not in readable:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 3 + MAX_FRONTEND_BELLS)
        except ConnectionError:
            data, fds = b"", []
        if not data:  # the server is gone (or closed us): the stubs go with us
            return None
        request = json.loads(data)
        # the doorbell, then stdout's and stderr's pipes (unless on the terminal), then
        # the frontend processes' doorbells (stub/frontends.py)
        bells = int(request.get("frontend_bells", 0))
        own = fds[:len(fds) - bells]
        bell_fds = fds[len(fds) - bells:]
        doorbell = own[0] if own else -1
        stdio = own[1:3] if len(own) >= 3 else []
        sys.stdout.flush()  # nothing of the zygote's in a stub's buffers
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as err:
            _send(sock, {"failed": request["id"], "error": f"fork: {err}"})
            pid = -1
        if pid == 0:
            _clean_child(sock, [fd for fd in (doorbell, *bell_fds) if fd >= 0], stdio)
            argv = list(request["argv"])
            if bell_fds:
                argv += ["--frontend-bell-fds", ",".join(str(fd) for fd in bell_fds)]
            return argv, doorbell
        for fd in fds:
            os.close(fd)
        if pid > 0:
            _send(sock, {"started": request["id"], "pid": pid})


def become_stub(argv: list[str], doorbell: int) -> None:
    """Run `python -m stub ARGV` in this (forked) process."""
    import runpy

    if doorbell >= 0:
        argv = [*argv, "--doorbell-fd", str(doorbell)]
    _show_command_line(argv)
    sys.argv[:] = ["-m", *argv]  # runpy puts the module's path first, as `-m` does
    runpy._run_module_as_main("stub", alter_argv=True)


def run_then_exit_at_once(run: Callable[[], None]) -> None:
    """Run a stub forked from a framework zygote, then end it as the interpreter would
    (its other threads joined, `atexit` run, the streams flushed) but without the C++
    static destructors: the framework's would join threads of the zygote's that no fork
    copied (onnxruntime's: `terminate called after throwing an instance of
    'std::system_error'`, then SIGABRT)."""
    code: int = 0
    try:
        run()
    except SystemExit as exit_:
        if exit_.code is None:
            code = 0
        elif isinstance(exit_.code, int):
            code = exit_.code
        else:  # sys.exit("message"), as the interpreter says it
            print(exit_.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - as the interpreter: the traceback, status 1
        traceback.print_exc()
        code = 1
    main_thread = threading.main_thread()
    for thread in threading.enumerate():
        if thread is not main_thread and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _show_command_line(argv: list[str]) -> None:
    """Make /proc/self/cmdline (what `ps` shows) read `python -m stub ARGV`, as a
    stub's started the plain way: written over this process's own argument strings,
    which the zygote's `--cmdline-room` made long enough (longer is cut short)."""
    import ctypes

    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (man 5 proc)
        with open("/proc/self/cmdline", "rb") as f:
            python = f.read().split(b"\0", 1)[0]
    except (OSError, IndexError, ValueError):
        return
    text = b"\0".join([python, b"-m", b"stub", *(a.encode() for a in argv)])
    room = end - start
    if room <= 1:
        return
    text = text[:room - 1]
    ctypes.memmove(start, text + b"\0" * (room - len(text)), room)


def _clean_child(sock: socket.socket, keep: list[int], stdio: list[int]) -> None:
    """A stub's stdout and stderr (`stdio`, its pipes) onto 1 and 2; then what it must
    not inherit of the zygote: its signal set-up and every fd but 0, 1, 2 and `keep`
    (its doorbells)."""
    for target, fd in zip((1, 2), stdio):  # all of them > 2: _open_standard_fds
        os.dup2(fd, target)  # inheritable, as Popen leaves them
    for fd in stdio:
        os.close(fd)
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    sock.detach()  # closed below; the object must not close that number again later
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        os.set_inheritable(fd, True)  # as Popen's pass_fds leaves it
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))


def _open_standard_fds() -> None:
    """/dev/null on any of 0, 1, 2 that is closed, so that no fd received later (a
    doorbell, a pipe) has one of those numbers."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)  # the lowest free number: `fd`
            if null != fd:
                os.dup2(null, fd)
                os.close(null)


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def _send(sock: socket.socket, message: dict) -> None:
    try:
        sock.send(json.dumps(message).encode())
    except OSError:  # the server is gone: the next read says so
        pass


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _no_op(signum: int, frame: object) -> None:
    """SIGCHLD wakes the select through the wakeup fd."""


if __name__ == "__main__":
    main()
