"""Locks on the files two specchat processes share (one home, the app and ``specchat serve``,
or two ``models pull`` at once): a model file being fetched or derived, the calibration and
controller stores, trained heads, ``config.yaml`` and the user catalog.

A lock is an OS lock (``filelock``, the lock huggingface_hub itself uses: ``flock`` on POSIX,
``LockFileEx`` on Windows) on ``<folder>/.locks/<name>.lock`` beside the file it guards. The OS
drops it when its process ends, however it ends, so a lock left by a dead process is broken by
the next one to ask, without guessing from ages or process ids. Lock files are never deleted:
deleting one while a process waits on it would let two processes hold "the" lock at once.

Beside the lock, ``<name>.holder`` says who holds it (process, host, what it does), written
after the lock is taken; a waiter reads it to say whom it waits for. It is only ever a message:
the lock itself decides.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from specchat.errors import BusyError, Cancelled

LOCK_DIR = ".locks"
POLL_S = 0.1  # how often a waiter tries again
REPORT_S = 1.0  # how often a waiter says it still waits


@dataclass(frozen=True)
class Wait:
    """A waiter's state, for its progress display: ``message`` (the same for the whole wait),
    the seconds waited so far, and ``over`` once the lock is taken."""

    message: str
    waited_s: float
    over: bool = False


WaitFn = Callable[[Wait], None]


def lock_path(target: Path) -> Path:
    return target.parent / LOCK_DIR / f"{target.name}.lock"


def holder_path(lock_file: Path) -> Path:
    return lock_file.with_name(lock_file.stem + ".holder")


def _no_wait(_: Wait) -> None:
    pass


@contextlib.contextmanager
def held(target: Path, doing: str, on_wait: WaitFn = _no_wait,
         cancelled: Callable[[], bool] | None = None, timeout_s: float | None = None,
         lock_file: Path | None = None) -> Iterator[bool]:
    """Hold ``target``'s lock for the body; yields whether another holder had to be waited for
    (it may have made or changed ``target`` meanwhile: look again).

    ``doing`` says what the holder does ("fetching X.gguf"), for a waiter's message "waiting for
    another specchat (process 12) fetching X.gguf…". A wait reports through ``on_wait``, stops
    with :class:`Cancelled` when ``cancelled()`` turns true, and after ``timeout_s`` (None:
    never) with :class:`BusyError`. An OSError (a read-only folder) is raised as is.
    ``lock_file`` replaces the usual ``.locks/<name>.lock`` (a lock another program shares).
    """
    from filelock import FileLock, Timeout

    lock_file = lock_file or lock_path(target)
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    # thread_local=False: a worker thread may take it and another end the body (no matter
    # here); one FileLock per call, so two threads of one process also wait for each other.
    lock = FileLock(str(lock_file), thread_local=False)
    waited = False
    start = time.monotonic()
    last_report = -REPORT_S
    message = ""
    while True:
        try:
            lock.acquire(timeout=0)
            break
        except Timeout:
            pass
        waited_s = time.monotonic() - start
        if not message:
            message = f"waiting for {_who(lock_file)} {doing}…"
        if waited_s - last_report >= REPORT_S:
            on_wait(Wait(message, waited_s))
            last_report = waited_s
        if cancelled is not None and cancelled():
            raise Cancelled(f"stopped while {message.removesuffix('…')}")
        if timeout_s is not None and waited_s >= timeout_s:
            who = _who(lock_file)
            raise BusyError(f"{who[0].upper()}{who[1:]} is still {doing} after "
                            f"{waited_s:.0f} s; try again when it has finished")
        waited = True
        time.sleep(POLL_S)
    try:
        if waited:
            on_wait(Wait(message, time.monotonic() - start, over=True))
        _write_holder(lock_file, doing)
        yield waited
    finally:
        lock.release()


def _write_holder(lock_file: Path, doing: str) -> None:
    info = {"pid": os.getpid(), "host": socket.gethostname(), "doing": doing}
    path = holder_path(lock_file)
    with contextlib.suppress(OSError):  # only a waiter's message depends on it
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(info), encoding="utf-8")
        os.replace(tmp, path)


def _who(lock_file: Path) -> str:
    """'another specchat (process 12)', from the holder's note (a guess if it is unreadable)."""
    try:
        info = json.loads(holder_path(lock_file).read_text(encoding="utf-8"))
        pid, host = int(info["pid"]), str(info["host"])
    except (OSError, ValueError, KeyError, TypeError):
        return "another specchat"
    if pid == os.getpid() and host == socket.gethostname():
        return "another task of this specchat"
    where = "" if host == socket.gethostname() else f" on {host}"
    return f"another specchat (process {pid}{where})"
