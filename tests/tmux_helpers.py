"""A real tmux server for the terminal tests: a pane to run the app in, keys typed one at a
time, the screen read back."""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager


class Tmux:
    def __init__(self, socket: str) -> None:
        self.socket = socket

    def __call__(self, *args: str) -> str:
        r = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True,
                           timeout=20, check=False)
        return r.stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "t")

    def title(self) -> str:
        return self("display", "-p", "-t", "t", "#{pane_title}").strip()

    def buffers(self) -> str:
        return self("list-buffers").strip()

    def keys(self, *keys: str) -> None:
        for k in keys:
            self("send-keys", "-t", "t", k)
            time.sleep(0.15)  # one key at a time, as typed

    def wait_for(self, pattern: str, seconds: float) -> str:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            screen = self.screen()
            if re.search(pattern, screen):
                return screen
            time.sleep(0.3)
        raise AssertionError(f"{pattern!r} never appeared; the screen was:\n{self.screen()}")


@contextmanager
def tmux_session(width: int, height: int, *options: tuple[str, str]) -> Iterator[Tmux]:
    """A fresh server with one session "t" of ``width``×``height`` and the given global options;
    killed afterwards."""
    t = Tmux(f"specchat-test-{uuid.uuid4().hex[:8]}")
    t("-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", str(width), "-y", str(height),
      "sleep 300")
    for name, value in options:
        t("set", "-g", name, value)
    try:
        yield t
    finally:
        t("kill-server")
