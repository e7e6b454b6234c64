"""`pbserve`: the server, with tritonserver's command-line flags.

The flags are parsed (parser.py, with the tables of trace_flags.py and ignored_flags.py)
and checked (settings.py) here; the server they describe is assembled and run by
pbserve/app.py.
"""

from __future__ import annotations

import sys
from dataclasses import replace

from pbserve.app import run
from pbserve.cli.ignored_flags import warn_ignored
from pbserve.cli.parser import build_parser, check_flags
from pbserve.cli.settings import check_request_plane_options, configure_logging, \
    server_options
from pbserve.cli.trace_flags import configure_tracing

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Parse and check the flags, set up logging and tracing, serve until a signal; the
    exit status (2 and argparse's message for flags that do not parse or fit together)."""
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    check_flags(parser, args)
    if plane_error := check_request_plane_options(args):
        print(f"error: {plane_error}", file=sys.stderr)
        return 1
    try:
        configure_logging(args)
    except OSError as exc:
        print(f"error: cannot open log file '{args.log_file}': {exc}", file=sys.stderr)
        return 1
    try:
        configure_tracing(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    # frontend processes parse the same flags
    options = replace(server_options(args), command_line=tuple(argv))  # SystemExit
    warn_ignored(args)
    return run(options)
