"""A stand-in for PyPI on 127.0.0.1: the "simple" index routes pip uses, serving wheels made
on the spot, with the faults a real fetch meets (a package missing, a download cut short).

``GET /simple/<project>/`` answers the PEP 503 page (links carry ``#sha256=``, as PyPI's do),
``GET /files/<wheel>`` the wheel. Point pip at it with ``PIP_INDEX_URL=<url>/simple`` and
``PIP_CONFIG_FILE=/dev/null`` (see :meth:`LocalPypi.pip_env`).
"""

from __future__ import annotations

import hashlib
import html
import io
import re
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Settings that would send pip elsewhere as well (find-links, extra indexes, no index at all).
PIP_UNSET = ("PIP_NO_INDEX", "PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL")


def normalize(name: str) -> str:
    """PEP 503 project-name normalization."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_bytes(name: str, version: str, files: dict[str, bytes]) -> bytes:
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for member, data in files.items():
            z.writestr(member, data)
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return buf.getvalue()


@dataclass
class Wheel:
    project: str
    filename: str
    data: bytes
    cut_at: float | None = None  # serve only this fraction, then drop the connection
    gate: threading.Event | None = None  # serve half, then the rest once set: a fetch held open

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass
class LocalPypi:
    wheels: dict[str, Wheel] = field(default_factory=dict)  # by file name
    requests: list[str] = field(default_factory=list)  # paths asked for, in order
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def add(self, name: str, version: str, files: dict[str, bytes]) -> Wheel:
        w = Wheel(normalize(name), f"{name.replace('-', '_')}-{version}-py3-none-any.whl",
                  wheel_bytes(name, version, files))
        self.wheels[w.filename] = w
        return w

    def remove(self, name: str) -> None:
        for key in [k for k, w in self.wheels.items() if w.project == normalize(name)]:
            del self.wheels[key]

    def cut(self, name: str, fraction: float | None) -> None:
        for w in self.wheels.values():
            if w.project == normalize(name):
                w.cut_at = fraction

    def hold(self, name: str) -> threading.Event:
        """From now on, a download of ``name`` sends half its bytes, then waits until the
        returned event is set (a test does something while the fetch is in flight)."""
        gate = threading.Event()
        for w in self.wheels.values():
            if w.project == normalize(name):
                w.gate = gate
        return gate

    def downloads(self) -> list[str]:
        return [p.rsplit("/", 1)[-1] for p in self.requests if p.startswith("/files/")]

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def pip_env(self) -> dict[str, str]:
        """Environment that sends pip here, without retries (unset :data:`PIP_UNSET` too)."""
        return {"PIP_CONFIG_FILE": "/dev/null", "PIP_INDEX_URL": f"{self.url}/simple",
                "PIP_RETRIES": "0", "PIP_TIMEOUT": "5", "PIP_NO_CACHE_DIR": "1"}

    def start(self) -> LocalPypi:
        index = self

        class Handler(_Handler):
            pypi = index

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _Handler(BaseHTTPRequestHandler):
    pypi: LocalPypi
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        self.pypi.requests.append(path)
        m = re.fullmatch(r"/simple/([^/]+)/?", path)
        if m:
            self._project(normalize(m.group(1)))
            return
        m = re.fullmatch(r"/files/([^/]+)", path)
        wheel = self.pypi.wheels.get(m.group(1)) if m else None
        if wheel is None:
            self._send(404, b"not found", "text/plain")
            return
        body = wheel.data
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if wheel.gate is not None:
            half = len(body) // 2
            try:
                self.wfile.write(body[:half])
                self.wfile.flush()
                wheel.gate.wait(120)  # bounded: a test that forgets to open it still ends
                self.wfile.write(body[half:])
            except (BrokenPipeError, ConnectionResetError):
                pass  # the fetching process was killed: what a test may be after
            return
        if wheel.cut_at is not None:
            self.wfile.write(body[: int(len(body) * wheel.cut_at)])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)  # the client sees a body shorter than it was promised
            return
        self.wfile.write(body)

    def _project(self, project: str) -> None:
        files = [w for w in self.pypi.wheels.values() if w.project == project]
        if not files:
            self._send(404, b"not found", "text/plain")
            return
        links = "\n".join(f'<a href="/files/{html.escape(w.filename)}#sha256={w.sha256}">'
                          f"{html.escape(w.filename)}</a><br/>" for w in files)
        page = f"<!DOCTYPE html><html><body>\n{links}\n</body></html>\n"
        self._send(200, page.encode(), "text/html")

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def running() -> Iterator[LocalPypi]:
    index = LocalPypi().start()
    try:
        yield index
    finally:
        index.stop()
