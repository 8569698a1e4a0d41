"""Measure, per Spec-Bench category: plain decoding against speculative decoding with a
same-vocabulary draft model, a different-vocabulary draft (TLI) and a layer-skip cut of the
target — α, τ and decode tokens/s, each prompt run by every method in turn (A/B alternating in
one process, so a shared machine's load falls on all of them alike). Greedy, outputs checked
equal to plain.

    python scripts/measure_selfdraft.py TARGET.gguf --pair-draft D.gguf --cross-draft X.gguf \
        --layerskip CUT.gguf --categories coding,writing --per-category 1 --max-tokens 64
"""

from __future__ import annotations

import argparse
import threading
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from specchat.bench.prompts import load_prompts
from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.decoding import Decoder, run_to_end
from specchat.engine.decode.messages import Message
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.step_policy import FixedGamma
from specchat.engine.drafters.layerskip import LayerSkipDrafter
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("target", type=Path)
    ap.add_argument("--pair-draft", type=Path)
    ap.add_argument("--cross-draft", type=Path)
    ap.add_argument("--layerskip", type=Path)
    ap.add_argument("--categories", default="coding,writing,math_reasoning")
    ap.add_argument("--per-category", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--gamma", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    cs = ContextSettings(n_ctx=1024, n_threads=a.threads)
    tm = LlamaModel(a.target)
    tc = LlamaContext(tm, cs)

    def ctx(path: Path) -> LlamaContext:
        return LlamaContext(LlamaModel(path), cs)

    methods: dict[str, Callable[[], Decoder]] = {"plain": lambda: PlainDecoder(tc)}
    if a.pair_draft:
        pd = ctx(a.pair_draft)
        methods["pair"] = lambda: SpeculativeDecoder(tc, pd, FixedGamma(a.gamma))
    if a.cross_draft:
        xd = ctx(a.cross_draft)
        methods["tli"] = lambda: SpeculativeDecoder(tc, xd, FixedGamma(a.gamma))
    if a.layerskip:
        ld = ctx(a.layerskip)
        methods["layerskip"] = lambda: SpeculativeDecoder(
            tc, None, FixedGamma(a.gamma), [LayerSkipDrafter(tc, lambda: ld)])
    cats = tuple(c.strip() for c in a.categories.split(","))
    prompts = load_prompts(None, cats, a.per_category)
    chat = ChatEngine(PlainDecoder(tc))
    s = SamplerSettings(temperature=0, max_tokens=a.max_tokens)
    acc: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0] * 7)
    for p in prompts:
        prompt = chat.tokenize_chat([Message("user", p.text)])
        plain_tokens: list[int] | None = None
        for name, make in methods.items():
            tc.clear()  # each method pays its own prompt
            run = run_to_end(make(), prompt, s, threading.Event())
            st = run.stats
            if plain_tokens is None:
                plain_tokens = run.tokens
            same = run.tokens == plain_tokens
            r = acc[(p.category, name)]
            r[0] += st.decode_s
            r[1] += max(0, st.generated_tokens - 1)
            r[2] += st.accepted
            r[3] += st.rejections
            r[4] += st.steps
            r[5] += 0 if same else 1
            r[6] += st.target_forwards
            print(f"{p.category:15} {name:10} {st.generated_tokens:3} tok  "
                  f"{st.decode_tps:6.2f} tok/s  α {st.alpha if st.alpha is not None else '-'}"
                  f"  τ {st.tau if st.tau is not None else '-'}  same as plain: {same}",
                  flush=True)
    print("\ncategory        method      tok/s   vs plain  α     τ     differs")
    for cat in cats:
        base = acc[(cat, "plain")]
        base_tps = base[1] / base[0] if base[0] else 0.0
        for name in methods:
            r = acc[(cat, name)]
            tps = r[1] / r[0] if r[0] else 0.0
            alpha = r[2] / (r[2] + r[3]) if r[2] + r[3] else float("nan")
            tau = r[1] / r[6] if r[6] and name != "plain" else float("nan")
            print(f"{cat:15} {name:10} {tps:6.2f}  {tps / base_tps if base_tps else 0:5.2f}×"
                  f"  {alpha:4.2f}  {tau:4.2f}  {int(r[5])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
