"""Starting `specchat serve` for tests: in this process on a thread (the command line's own
build, port 0), or as a subprocess whose port is read from its first line."""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from openai import OpenAI

from specchat.cli.common import Env
from specchat.cli.main import build_parser
from specchat.cli.serve_cmd import build
from specchat.paths import AppPaths
from specchat.serve.server import Serving


def home_paths(root: Path) -> AppPaths:
    return AppPaths(root / "config", root / "data", root / "cache")


@contextmanager
def running(serving: Serving) -> Iterator[Serving]:
    """Run a built server on a thread; stop it (and free its models) on the way out."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            serving.run()
        except BaseException as e:  # a failed load, seen by the test through the host
            errors.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: serving.server.started or not thread.is_alive(), "uvicorn started")
        yield serving
    finally:
        serving.stop()
        thread.join(60)


@contextmanager
def cli_server(home: Path, *args: str) -> Iterator[Serving]:
    """``specchat serve ARGS --port 0`` built by the command's own code, run on a thread."""
    parsed = build_parser().parse_args(["serve", *args, "--port", "0", "--no-access-log"])
    serving = build(Env(home_paths(home)), parsed)
    with running(serving) as s:
        wait_until(lambda: s.host.state != "loading", "the models loaded")
        yield s


def wait_until(cond: Any, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def client(url: str) -> OpenAI:
    # No retries: a 503 must be seen, not retried away.
    return OpenAI(base_url=url + "/v1", api_key="anything", max_retries=0, timeout=120)


def raw(url: str, method: str, path: str, body: bytes | None = None,
        headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any], dict[str, str]]:
    """A request without the openai client: status, the JSON body, the headers."""
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, json.loads(data), {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()


class ServerProcess:
    """``python -m specchat serve`` in a subprocess, its stderr kept for the test."""

    def __init__(self, home: Path, *args: str) -> None:
        env = {**os.environ, "SPECCHAT_HOME": str(home)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "specchat", "serve", *args, "--port", "0",
             "--no-access-log"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, env=env)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        wait_until(lambda: self.url is not None or self.proc.poll() is not None, "its URL")
        if self.url is None:
            raise AssertionError("the server did not start:\n" + self.stderr)

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    @property
    def url(self) -> str | None:
        m = re.search(r"at (http://[\d.]+:\d+)/v1", self.stderr)
        return m.group(1) if m else None

    def rss_kb(self) -> int:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        m = re.search(r"VmRSS:\s+(\d+) kB", status)
        assert m, status
        return int(m.group(1))

    def stop(self) -> int:
        self.proc.terminate()
        try:
            return self.proc.wait(60)
        finally:
            self._reader.join(10)
