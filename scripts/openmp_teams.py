"""What a second thread that has called llama.cpp costs the first one's passes, in one process.

llama.cpp's CPU backend (OpenMP build) keeps a team of worker threads for each thread that
calls it, for that thread's life; once libgomp manages more threads than there are CPUs, its
barriers stop spinning and sleep (see ``specchat/engine/llama/llama_thread.py``). Each round
times, on the main thread, a prompt read and then single-token steps (median per token):
first alone, then with a second thread alive that has made one pass of its own, then with that
thread gone again.

    python scripts/openmp_teams.py MODEL.gguf --threads 2 --rounds 3
"""

from __future__ import annotations

import argparse
import concurrent.futures
import statistics
import time

import numpy as np

from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model", help="a GGUF file")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--prompt-tokens", type=int, default=200)
    p.add_argument("--tokens", type=int, default=48)
    args = p.parse_args()
    model = LlamaModel(args.model)
    ctx = LlamaContext(model, ContextSettings(n_ctx=1024, n_threads=args.threads))
    rng = np.random.default_rng(0)
    prompt = [int(x) for x in rng.integers(1000, min(20000, model.n_vocab), args.prompt_tokens)]

    def reply(steps: int) -> tuple[float, float]:
        """(ms a token of the prompt read, median ms of a one-token step)"""
        ctx.truncate(0)
        t0 = time.perf_counter()
        logits = ctx.decode(prompt)
        read = time.perf_counter() - t0
        times = []
        for _ in range(steps):
            token = int(np.argmax(logits[-1]))
            t0 = time.perf_counter()
            logits = ctx.decode([token])
            times.append(time.perf_counter() - t0)
        return 1000 * read / len(prompt), 1000 * statistics.median(times or [0.0])

    def measured(label: str) -> None:
        runs = [reply(args.tokens) for _ in range(3)]
        print(f"  {label}: read {statistics.median(r for r, _ in runs):.2f} ms/token, "
              f"step {statistics.median(s for _, s in runs):.2f} ms", flush=True)

    reply(4)  # warm
    for r in range(args.rounds):
        print(f"round {r + 1}")
        measured("alone")
        other = concurrent.futures.ThreadPoolExecutor(1)
        other.submit(reply, 1).result()  # a pass of its own; the thread lives on, idle
        measured("a second thread alive")
        other.shutdown(wait=True)  # its thread ends, and libgomp lets its team go
        measured("the second thread gone")
    ctx.close()
    model.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
