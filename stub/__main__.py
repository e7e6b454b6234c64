"""`python -m stub --prefix P --parent-pid N --name INSTANCE [--doorbell-fd FD]`: started
by the parent."""

from __future__ import annotations

import argparse
import faulthandler
import signal
import sys

from stub.parent_death import die_with_parent
from stub.signals import ignore_shutdown_signals

# First of all, before the imports of the model's world below: a SIGTERM or Ctrl-C sent to
# the server's process group must not kill a stub, even one still starting (stub/signals.py).
ignore_shutdown_signals()


def main() -> None:
    from shm.pool import DEFAULT_GROWTH, DEFAULT_SIZE, ShmSizes

    parser = argparse.ArgumentParser(prog="python -m stub")
    parser.add_argument("--prefix", required=True, help="shm name prefix given by the parent")
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--name", required=True, help="instance name, e.g. add_sub_0_0")
    parser.add_argument("--doorbell-fd", type=int, default=-1,
                        help="inherited eventfd to ring after each message to the parent")
    parser.add_argument("--frontend-bell-fds", default="",
                        help="FD,...: inherited eventfds of the frontend processes, in "
                             "slot order, rung after each answer to one (frontend_answers)")
    parser.add_argument("--shm-default-byte-size", type=int, default=DEFAULT_SIZE)
    parser.add_argument("--shm-growth-byte-size", type=int, default=DEFAULT_GROWTH)
    parser.add_argument("--cuda-memory-pool-byte-size", default="",
                        help="<GPU>:<BYTES>[,...]: this stub's CUDA pool on each GPU")
    parser.add_argument("--debug-terminal", action="store_true",
                        help="this stub has the server's terminal (--model-debug)")
    parser.add_argument("--debug-port", default="", help="[HOST:]PORT for debugpy")
    args = parser.parse_args()
    # `kill -USR1 <stub>` writes every thread's stack to the server's log (a hang's why)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    # A model sees no arguments, as in Triton's embedded interpreter: its own argparse or
    # unittest.main() must not read (and exit on) the stub's.
    sys.argv[:] = [""]
    die_with_parent(args.parent_pid)
    from stub.debugging import set_up_debugging

    set_up_debugging(args.name, args.debug_terminal, args.debug_port)
    from stub.stub import Stub

    cuda = tuple((int(gpu), int(size)) for gpu, size in (
        pair.split(":") for pair in args.cuda_memory_pool_byte_size.split(",") if pair))
    sizes = ShmSizes(args.shm_default_byte_size, args.shm_growth_byte_size, cuda)
    bells = tuple(int(fd) for fd in args.frontend_bell_fds.split(",") if fd)
    Stub(args.prefix, args.parent_pid, args.name, args.doorbell_fd, sizes, bells).run()


if __name__ == "__main__":
    main()
