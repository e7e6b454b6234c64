"""`python -m stub --prefix P --parent-pid N --name INSTANCE [--doorbell-fd FD]`: started
by the parent."""

from __future__ import annotations

import argparse
import signal
import sys

from stub.stub import Stub


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m stub")
    parser.add_argument("--prefix", required=True, help="shm name prefix given by the parent")
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--name", required=True, help="instance name, e.g. add_sub_0_0")
    parser.add_argument("--doorbell-fd", type=int, default=-1,
                        help="inherited eventfd to ring after each message to the parent")
    args = parser.parse_args()
    # A model sees no arguments, as in Triton's embedded interpreter: its own argparse or
    # unittest.main() must not read (and exit on) the stub's.
    sys.argv[:] = [""]
    # The parent drives shutdown: a Ctrl-C sent to the whole process group must not
    # kill a model in the middle of a request.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    Stub(args.prefix, args.parent_pid, args.name, args.doorbell_fd).run()


if __name__ == "__main__":
    main()
