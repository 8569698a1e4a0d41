"""The listening socket and uvicorn around the app.

The socket is bound here, before anything loads, so a port already in use is a one-line error
at once (uvicorn alone would log a traceback-like line and exit mid-start), and a test can bind
port 0 and read the port it got.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from types import FrameType

import uvicorn

from specchat.errors import SpecchatError
from specchat.serve.app import DEFAULT_MAX_BODY, build_app
from specchat.serve.cors import CorsPolicy
from specchat.serve.worker import ModelHost


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach ``host`` (no name lookup: "localhost" is)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port``, or a one-line error saying why not."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise SpecchatError(f"cannot listen on {host!r}: {e.strerror or e}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    # Like uvicorn: a port left in TIME_WAIT by a server just stopped can be bound again (one
    # that another program listens on still cannot, on Linux and macOS alike).
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)  # from here a client waits in the backlog instead of being refused
    except OSError as e:
        sock.close()
        raise SpecchatError(_bind_problem(host, port, e)) from None
    return sock


def _bind_problem(host: str, port: int, e: OSError) -> str:
    if e.errno == errno.EADDRINUSE:
        return (f"port {port} on {host} is already in use (another server is listening "
                "there): stop it, or choose another port with --port")
    if e.errno == errno.EACCES:
        return (f"not allowed to listen on port {port} (ports below 1024 need administrator "
                "rights): choose another with --port")
    if e.errno == errno.EADDRNOTAVAIL:
        return f"cannot listen on {host}: it is not an address of this machine"
    return f"cannot listen on {host}:{port}: {e.strerror or e}"


def url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _Server(uvicorn.Server):
    """uvicorn, which on Ctrl-C (or SIGTERM) also cancels the generations: it waits for open
    responses to end, and a long stream would otherwise hold the shutdown."""

    def __init__(self, config: uvicorn.Config, host: ModelHost) -> None:
        super().__init__(config)
        self.model_host = host

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        self.model_host.cancel_all()


class Serving:
    """The app on a bound socket: :meth:`run` blocks until :meth:`stop`, a signal, or a load
    that failed (then it raises that failure, a SpecchatError)."""

    def __init__(self, host: ModelHost, sock: socket.socket, max_body: int = DEFAULT_MAX_BODY,
                 log_level: str = "info", access_log: bool = True,
                 cors: CorsPolicy | None = None) -> None:
        self.host = host
        self.sock = sock
        config = uvicorn.Config(build_app(host, max_body, cors), log_level=log_level,
                                access_log=access_log, lifespan="off",
                                timeout_graceful_shutdown=10)
        self.server = _Server(config, host)
        host.on_failed = lambda _message: self.stop()

    @property
    def url(self) -> str:
        return url(self.sock)

    def run(self) -> None:
        self.host.start()
        try:
            self.server.run(sockets=[self.sock])
        finally:
            failed = self.host.state == "failed"
            self.host.close()
            self.sock.close()
        if failed and self.host.error:
            raise SpecchatError(self.host.error)

    def stop(self) -> None:
        """From any thread."""
        self.host.cancel_all()
        self.server.should_exit = True
