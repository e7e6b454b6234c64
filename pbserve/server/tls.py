"""TLS for the HTTP and gRPC endpoints, from tritonserver's flags.

gRPC takes Triton's own: `--grpc-use-ssl`, `--grpc-server-cert`, `--grpc-server-key`,
`--grpc-root-cert`, `--grpc-use-ssl-mutual` (which implies `--grpc-use-ssl`: clients must
then present a certificate signed by the root certificate). tritonserver has no TLS on
its HTTP endpoint (it is left to a proxy); pbserve takes the same five flags with
`--http-` in place of `--grpc-`.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc


@dataclass(frozen=True)
class TlsConfig:
    """PEM files: the server's certificate (chain) and key, and the root certificate(s)
    client certificates must be signed by (needed when `mutual`)."""

    cert: Path
    key: Path
    root: Path | None = None
    mutual: bool = False

    @classmethod
    def from_flags(cls, prefix: str, use_ssl: bool, mutual: bool, cert: str | None,
                   key: str | None, root: str | None) -> TlsConfig | None:
        """None when TLS is off; ValueError naming the flag that is missing."""
        if not (use_ssl or mutual):
            return None
        for flag, value in (("server-cert", cert), ("server-key", key)):
            if not value:
                raise ValueError(f"--{prefix}-use-ssl needs --{prefix}-{flag}")
        if mutual and not root:
            raise ValueError(f"--{prefix}-use-ssl-mutual needs --{prefix}-root-cert (to "
                             f"verify the clients' certificates)")
        config = cls(Path(cert), Path(key), Path(root) if root else None, mutual)
        config.ssl_context()  # unreadable or mismatched files: fail at start-up
        return config

    def _read(self, path: Path, what: str) -> bytes:
        try:
            return path.read_bytes()
        except OSError as exc:
            raise ValueError(f"cannot read the {what} {path}: {exc.strerror}") from None

    def ssl_context(self) -> ssl.SSLContext:
        """The HTTP server's context (TLS 1.2 and later)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._read(self.cert, "server certificate")
        self._read(self.key, "server key")
        try:
            context.load_cert_chain(self.cert, self.key)
            if self.root is not None:
                context.load_verify_locations(cadata=self._read(
                    self.root, "root certificate").decode("ascii", "replace"))
        except ssl.SSLError as exc:
            raise ValueError(f"the TLS files {self.cert}, {self.key}"
                             f"{', ' + str(self.root) if self.root else ''} cannot be "
                             f"used: {exc.reason or exc}") from None
        if self.mutual:
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def grpc_credentials(self) -> grpc.ServerCredentials:
        root = self._read(self.root, "root certificate") if self.root else None
        return grpc.ssl_server_credentials(
            [(self._read(self.key, "server key"), self._read(self.cert, "server certificate"))],
            root_certificates=root, require_client_auth=self.mutual)
