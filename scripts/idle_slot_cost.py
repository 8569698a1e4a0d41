"""What an idle slot's cells cost a busy slot's tokens, and what parking them costs, in one process.

Two shared contexts of two slots each (as ``specchat serve`` lays them out): in both, slot 1
reads ``--idle-tokens`` tokens and goes idle; in one it stays in the shared cache, in the other
it is parked (``SlotContext.park``: its cells copied to host memory and taken out). Slot 0 of
each then reads a prompt and generates greedily, a token on one context and a token on the
other in turn (the order flips every step), so drift on a noisy machine hits both alike. It
prints the park and put-back times and the median per-token ratio, parked against held.

    python scripts/idle_slot_cost.py MODEL.gguf --threads 2 --idle-tokens 600 1800
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings
from specchat.engine.llama.slots import Slots, share


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model", help="a GGUF file")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx-size", type=int, default=2048, help="each slot's window")
    p.add_argument("--idle-tokens", type=int, nargs="+", default=[600, 1800])
    p.add_argument("--prompt-tokens", type=int, default=150)
    p.add_argument("--tokens", type=int, default=96)
    args = p.parse_args()
    model = LlamaModel(args.model)
    rng = np.random.default_rng(0)

    def words(n: int) -> list[int]:
        return [int(x) for x in rng.integers(1000, min(20000, model.n_vocab), n)]

    settings = ContextSettings(n_ctx=2 * args.ctx_size, n_seq_max=32, n_threads=args.threads,
                               n_threads_batch=args.threads)
    for idle in args.idle_tokens:
        if idle + args.prompt_tokens + args.tokens > args.ctx_size:
            raise SystemExit(f"--idle-tokens {idle}: more than a slot's window holds")
        bases = [LlamaContext(model, settings) for _ in range(2)]
        held, parked = (share(b, None, 2) for b in bases)
        for slots in (held, parked):
            slots.contexts[1][0].decode(words(idle), logits="none")
        idler = parked.contexts[1][0]
        for _ in range(3):
            t0 = time.perf_counter()
            idler.park()
            t1 = time.perf_counter()
            idler.truncate(len(idler.tokens))  # puts the cells back
            t2 = time.perf_counter()
            print(f"  {idle} idle cells: park {1000 * (t1 - t0):.1f} ms, "
                  f"put back {1000 * (t2 - t1):.1f} ms", flush=True)
        idler.park()
        prompt = words(args.prompt_tokens)
        busy: dict[str, tuple[Slots, np.ndarray]] = {}
        for name, slots in (("held", held), ("parked", parked)):
            busy[name] = (slots, np.array(slots.contexts[0][0].decode(prompt)))
        times: dict[str, list[float]] = {"held": [], "parked": []}
        for step in range(args.tokens):
            for name in ("held", "parked") if step % 2 else ("parked", "held"):
                slots, row = busy[name]
                t0 = time.perf_counter()
                row = np.array(slots.contexts[0][0].decode([int(np.argmax(row[-1]))]))
                times[name].append(time.perf_counter() - t0)
                busy[name] = (slots, row)
        ratio = statistics.median(b / a for a, b in zip(times["held"], times["parked"],
                                                           strict=True))
        print(f"  {idle} idle cells: a busy slot's token {1000 * statistics.median(times['held']):.1f}"
              f" ms beside them, {1000 * statistics.median(times['parked']):.1f} ms with them "
              f"parked: parked/held {ratio:.3f}", flush=True)
        for slots, base in zip((held, parked), bases, strict=True):
            slots.close()
            base.close()
    model.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
