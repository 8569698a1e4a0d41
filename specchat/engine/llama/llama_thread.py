"""The one thread a process computes on with llama.cpp: :func:`run` hands it a job.

llama.cpp's CPU backend, built with OpenMP as llama-cpp-python builds it, keeps a team of
worker threads for each thread that calls it, for as long as that thread lives, and syncs
them at every node of a pass with an OpenMP barrier. GNU libgomp counts the threads it manages
in every team; once they outnumber the CPUs, each barrier spins about 100 times instead of
300,000 before it sleeps, so every pass of every team pays for sleeping and waking threads.
One thread that has called llama.cpp once and lives on is enough to slow every pass after it
(measured in docs/performance.md, ``scripts/openmp_teams.py``).

Threads that live on are what a server's slots and an app's workers run on (an executor keeps
its threads; a later job may get another one), so their jobs that compute — a reply, a
calibration, a race, the slots' shared passes — run here, on one thread, one at a time: the
process keeps one team. A job started here that runs another runs it at once (no deadlock).
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

_lock = threading.Lock()
_executor: concurrent.futures.ThreadPoolExecutor | None = None
_thread: threading.Thread | None = None


def _start() -> concurrent.futures.ThreadPoolExecutor:
    global _executor, _thread
    with _lock:
        if _executor is None:
            executor = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="specchat-llama")
            # Learn the thread's identity now (a job started here must run inline).
            _thread = executor.submit(threading.current_thread).result()
            _executor = executor
        return _executor


def on_it() -> bool:
    """Whether the calling thread is the llama thread."""
    return _thread is not None and threading.current_thread() is _thread


def run(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """``fn(*args, **kwargs)`` on the llama thread, after any job there before it; its result,
    or its exception raised here. Called from the llama thread, it runs at once."""
    if on_it():
        return fn(*args, **kwargs)
    return _start().submit(fn, *args, **kwargs).result()
