"""The process's one llama thread (``engine/llama/llama_thread.py``): every job on one thread,
one at a time, so llama.cpp keeps one OpenMP team however many threads hand it work."""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
from pathlib import Path

import pytest

from specchat.engine.llama import llama_thread
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings


def test_jobs_from_many_threads_run_on_one_thread_one_at_a_time() -> None:
    seen: list[threading.Thread] = []
    running, most = 0, 0
    lock = threading.Lock()

    def job(k: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            seen.append(threading.current_thread())
        time.sleep(0.002)
        with lock:
            running -= 1
        return k * k

    # Like asyncio's default executor, which runs the app's thread workers: many threads.
    with concurrent.futures.ThreadPoolExecutor(6) as callers:
        results = list(callers.map(lambda k: llama_thread.run(job, k), range(24)))
        caller_threads = set(callers._threads)
    assert results == [k * k for k in range(24)]
    assert len(set(seen)) == 1 and most == 1
    assert seen[0] not in caller_threads and seen[0] is not threading.current_thread()


def test_a_jobs_error_comes_back_to_its_caller() -> None:
    def fails() -> None:
        raise ValueError("no room")

    with pytest.raises(ValueError, match="no room"):
        llama_thread.run(fails)
    assert llama_thread.run(lambda: 7) == 7  # the thread goes on


def test_a_job_started_on_the_llama_thread_runs_at_once() -> None:
    def outer() -> tuple[bool, int]:
        return llama_thread.on_it(), llama_thread.run(lambda: 5)

    assert llama_thread.run(outer) == (True, 5)  # not queued behind itself
    assert not llama_thread.on_it()


def _threads() -> set[str]:
    return set(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or (os.cpu_count() or 1) < 2,
                    reason="counts the process's threads in /proc; needs 2 CPUs")
def test_a_thread_that_lives_on_adds_no_openmp_team_through_the_llama_thread(
        tiny_target: Path) -> None:
    model = LlamaModel(tiny_target)
    ctx = LlamaContext(model, ContextSettings(n_ctx=256, n_threads=2))
    try:
        def read(tokens: list[int]) -> None:
            ctx.truncate(0)
            ctx.decode(tokens)

        llama_thread.run(read, [1, 2, 3])  # the llama thread's team exists from here on
        for direct in (True, False):
            worker = concurrent.futures.ThreadPoolExecutor(1)  # lives on, as the app's do
            worker.submit(lambda: None).result()
            before = _threads()
            if direct:  # the control: llama.cpp called from the worker itself
                worker.submit(read, [4, 5, 6]).result()
            else:
                worker.submit(llama_thread.run, read, [4, 5, 6]).result()
            added = _threads() - before
            worker.shutdown(wait=True)
            if direct:
                assert added, "calling llama.cpp from a new thread starts an OpenMP team"
            else:
                assert not added, f"threads started: {added}"
    finally:
        ctx.close()
        model.close()
