"""What a plain step through the speculative loop costs against plain decoding, per token.

On one loaded pair (both models in memory for every run, so only the loop differs), each round
runs the same prompt with llama.cpp's plain decoder and with the speculative decoder whose
policy plans plain steps only (the default planner while nothing pays, and a fixed γ of 0),
back to back, the order alternating. It prints each run's decode milliseconds per token and
each round's ratio to the plain run of the same round (a busy moment weighs on both), then the
median ratio. Greedy; the outputs are checked equal.

    python scripts/plain_step_cost.py --pair qwen-coder --rounds 5 --max-tokens 64
    python scripts/plain_step_cost.py --pair demo --profile   # where the loop's time goes
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import threading
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's specchat, not another one installed

from specchat.engine.decode.chat import ChatEngine  # noqa: E402
from specchat.engine.decode.decoding import Decoder, run_to_end  # noqa: E402
from specchat.engine.decode.messages import Message  # noqa: E402
from specchat.engine.decode.plain import PlainDecoder  # noqa: E402
from specchat.engine.decode.sampling import SamplerSettings  # noqa: E402
from specchat.engine.decode.speculative import SpeculativeDecoder  # noqa: E402
from specchat.engine.decode.step_policy import FixedGamma  # noqa: E402
from specchat.engine.llama.model_settings import ContextSettings  # noqa: E402
from specchat.engine.policy.planner import Planner  # noqa: E402
from specchat.loading import RuntimeOptions, select  # noqa: E402
from specchat.models.catalog import load_catalog  # noqa: E402
from specchat.models.resolver import ModelResolver  # noqa: E402
from specchat.paths import app_paths  # noqa: E402
from specchat.runtime.opening import Runtime  # noqa: E402

PROMPT = ("Explain, step by step, how a hash table handles collisions, and when you would "
          "choose open addressing over chaining.")


class AlwaysPlain(Planner):
    """The default planner at a moment when nothing pays: its bookkeeping runs every step."""

    def next_plan(self, available: tuple[str, ...]) -> object:  # type: ignore[override]
        super().next_plan(available)
        return self._chosen(self.last_plan.__class__("none", (), "plain"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", default="qwen-coder")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--profile", action="store_true", help="cProfile one planner-plain run")
    a = ap.parse_args()
    cat = load_catalog()
    paths = app_paths()
    res = ModelResolver(cat, paths)
    opts = RuntimeOptions(context=ContextSettings(n_ctx=2048, n_threads=a.threads))
    rt = Runtime.open(select(cat, pair=a.pair), res, opts, fetch=False)
    tc, dc = rt.target_ctx, rt.draft_ctx
    chat = ChatEngine(PlainDecoder(tc))
    prompt = chat.tokenize_chat([Message("user", PROMPT)])
    s = SamplerSettings(temperature=0, max_tokens=a.max_tokens)
    methods: dict[str, Callable[[], Decoder]] = {
        "plain": lambda: PlainDecoder(tc),
        "loop, planner plain": lambda: SpeculativeDecoder(tc, dc, AlwaysPlain()),
        "loop, fixed γ 0": lambda: SpeculativeDecoder(tc, dc, FixedGamma(0)),
    }

    def once(name: str) -> tuple[float, list[int]]:
        tc.clear()  # every run reads the prompt itself
        if dc is not None:
            dc.clear()
        run = run_to_end(methods[name](), prompt, s, threading.Event())
        n = max(1, run.stats.generated_tokens - 1)
        return run.stats.decode_s / n * 1000, run.tokens

    if a.profile:
        once("plain")
        prof = cProfile.Profile()
        prof.enable()
        once("loop, planner plain")
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        return 0
    once("plain")  # warm both paths' first shapes
    ratios: dict[str, list[float]] = {m: [] for m in methods if m != "plain"}
    print(f"{rt.selection.target.id}: ms per token, {a.max_tokens} tokens, greedy, "
          f"{a.threads} threads")
    for r in range(a.rounds):
        names = list(methods) if r % 2 == 0 else list(reversed(methods))
        got = {m: once(m) for m in names}
        base_ms, base_tokens = got["plain"]
        line = [f"round {r + 1}: plain {base_ms:.2f}"]
        for m in ratios:
            ms, tokens = got[m]
            if tokens != base_tokens:
                raise SystemExit(f"{m}: output differs from plain decoding")
            ratios[m].append(ms / base_ms)
            line.append(f"{m} {ms:.2f} ({ms / base_ms:.3f}×)")
        print(" · ".join(line), flush=True)
    for m, rs in ratios.items():
        print(f"{m}: median {statistics.median(rs):.3f}× plain's time per token "
              f"(min {min(rs):.3f}, max {max(rs):.3f}, {len(rs)} rounds)")
    rt.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
