"""specchat.locks: a file held by another process (a real one) is waited for, said so, and taken
when that process dies however it dies; a wait can be cancelled or time out with a message."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from specchat.errors import BusyError, Cancelled
from specchat.locks import Wait, held, lock_path

HOLD = """
import sys
from pathlib import Path
from specchat.locks import held
with held(Path(sys.argv[1]), "fetching x.gguf"):
    print("held", flush=True)
    sys.stdin.read()  # until the test closes stdin, or kills this process
"""


def holder(target: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(target)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def test_a_lock_held_by_a_process_that_is_killed_is_taken_and_the_wait_was_said(
        tmp_path: Path) -> None:
    target = tmp_path / "x.gguf"
    proc = holder(target)
    waits: list[Wait] = []

    def on_wait(w: Wait) -> None:
        waits.append(w)
        if len(waits) == 1:
            os.kill(proc.pid, signal.SIGKILL)  # it dies holding the lock

    try:
        with held(target, "fetching x.gguf", on_wait, timeout_s=60) as waited:
            assert waited
    finally:
        proc.kill()
        proc.wait(10)
    assert waits[0].message == f"waiting for another specchat (process {proc.pid}) fetching x.gguf…"
    assert waits[-1].over and not any(w.over for w in waits[:-1])
    assert lock_path(target).exists()  # never deleted: see the module's docstring
    with held(target, "fetching x.gguf") as waited:  # free now, at once
        assert not waited


def test_a_wait_times_out_or_is_cancelled_with_a_message(tmp_path: Path) -> None:
    target = tmp_path / "config.yaml"
    proc = holder(target)
    try:
        with pytest.raises(BusyError) as e, held(target, "writing config.yaml", timeout_s=0.3):
            pass
        assert f"Another specchat (process {proc.pid}) is still writing config.yaml" in str(e.value)
        with pytest.raises(Cancelled, match="stopped while waiting for another specchat"), \
                held(target, "writing config.yaml", cancelled=lambda: True):
            pass
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # let go of the lock by ending normally
        assert proc.wait(10) == 0
    with held(target, "writing config.yaml", timeout_s=5) as waited:
        assert not waited


def test_two_threads_of_one_process_wait_for_each_other(tmp_path: Path) -> None:
    target = tmp_path / "x.gguf"
    inside, release = threading.Event(), threading.Event()

    def first() -> None:
        with held(target, "making x.gguf"):
            inside.set()
            release.wait(30)

    t = threading.Thread(target=first)
    t.start()
    assert inside.wait(30)
    waits: list[Wait] = []

    def on_wait(w: Wait) -> None:
        waits.append(w)
        release.set()

    with held(target, "making x.gguf", on_wait, timeout_s=30) as waited:
        assert waited
    t.join(30)
    assert waits[0].message == "waiting for another task of this specchat making x.gguf…"
