"""A TLS front for a plain TCP server, as stunnel is one: it takes TLS connections on
a loopback port (with a client certificate the CA signed, when `client_ca` is given),
and relays their bytes to `target_port`. For servers the tests run without TLS of their
own (the Valkey wheel's server is built without it). It records the server names (SNI)
its clients asked for, and how many handshakes succeeded."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from pathlib import Path


class TlsProxy:
    def __init__(self, target_port: int, cert: Path, key: Path,
                 client_ca: Path | None = None) -> None:
        self.target_port = target_port
        self.server_names: list[str | None] = []
        self.handshakes = 0
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        if client_ca is not None:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(client_ca)
        context.sni_callback = lambda _sock, name, _context: self.server_names.append(name)
        self._context = context
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        client.settimeout(5)
        try:
            tls = self._context.wrap_socket(client, server_side=True)
        except (ssl.SSLError, OSError):
            client.close()
            return
        self.handshakes += 1
        tls.settimeout(None)
        target = socket.create_connection(("127.0.0.1", self.target_port))
        self._sockets += [tls, target]
        threading.Thread(target=_pump, args=(target, tls), daemon=True).start()
        _pump(tls, target)

    def close(self) -> None:
        self._closed.set()
        self._thread.join(5)
        self._listener.close()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy `source` to `sink` until either ends, then end both."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    for sock in (source, sink):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
