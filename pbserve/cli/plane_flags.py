"""pbserve's flags for the NATS request plane (several machines; docs/distributed.md):
joining it, its data plane, and the credentials to connect with
(settings.py `check_request_plane_options` checks them)."""

from __future__ import annotations

import argparse
import os

from pbserve.cli.help_format import hide_default
from pbserve.secret_env import PLANE_PASSWORD_ENV, PLANE_TOKEN_ENV


def add_plane_flags(flags: argparse._ActionsContainer) -> None:
    """Add the request plane's flags to `flags` (a parser or one of its groups)."""
    add = flags.add_argument
    add("--request-plane", default=None, metavar="nats://HOST:PORT",
        help="pbserve: join a NATS request plane (JetStream on): with a repository, serve "
             "its models to the plane (a worker); without one, serve the plane's models "
             "(a frontend). See 'Several machines' in README.md")
    add("--plane-heartbeat-secs", type=float, default=1.0,
        help="pbserve: a worker refreshes its registry entries this often; they expire "
             "after 3 beats (a killed worker's requests fail then)")
    add("--data-plane-address", default="127.0.0.1", metavar="HOST[:PORT]",
        help="pbserve: where this process's data-plane listener binds (large tensors are "
             "pulled from it over TCP); PORT 0 or none: any free port. Give an address "
             "the other hosts reach this one at; the default is loopback (one host)")
    add("--plane-inline-max-bytes", type=int, default=64 * 1024,
        help="pbserve: tensors up to this size travel inline in the NATS message; "
             "larger ones by the data plane")
    add("--data-plane-ttl-secs", type=float, default=60.0,
        help="pbserve: a tensor held for a peer is freed if not pulled within this")
    add("--worker-name", default="",
        help="pbserve: this worker's name on the plane (default: HOST-PID)")
    add("--request-plane-creds", default="", metavar="FILE",
        help="pbserve: NATS credentials file (JWT and NKey seed) to join the plane with")
    add("--request-plane-user", default="", help="pbserve: NATS user name")
    hide_default(add(
        "--request-plane-password", default=os.environ.get(PLANE_PASSWORD_ENV, ""),
        help=f"pbserve: NATS password (on the command line ps shows it to every user: "
             f"prefer ${PLANE_PASSWORD_ENV}, the default, or a credentials file)"))
    hide_default(add(
        "--request-plane-token", default=os.environ.get(PLANE_TOKEN_ENV, ""),
        help=f"pbserve: NATS authentication token (default ${PLANE_TOKEN_ENV}; as for "
             f"the password, the environment keeps it out of ps)"))
    add("--request-plane-tls-ca", default="", metavar="FILE",
        help="pbserve: CA bundle to verify the NATS server with (TLS on)")
    add("--request-plane-tls-cert", default="", metavar="FILE",
        help="pbserve: client certificate for NATS (with --request-plane-tls-key)")
    add("--request-plane-tls-key", default="", metavar="FILE",
        help="pbserve: the client certificate's private key")
