"""What prompt lookup would keep on real replies, replayed offline: no timing, so no noise.

Greedy replies of the target (qwen-coder's 1.5B by default) to one Spec-Bench prompt per
category and to the two copy-with-changes prompts of ``default_vs_plain.py`` are generated once
and cached (``--cache``). Each reply is then replayed through the n-gram drafter as a decoder
would run it: at every step the drafter proposes up to ``--check`` tokens from what is
committed; the tokens the reply agrees with are kept, plus the target's own token; a step
without a proposal commits one token. It prints, per prompt, the reply's length, the steps, the
lookups made, the tokens they kept and the checks kept whole; then, over all replies, how often
the lookup's next token is right after so many right in a row — how far a match runs before the
reply departs from its source, which the planner's lookup estimates are kept apart by
(``engine.policy.lookup_estimate``).

    python scripts/lookup_replay.py                       # generate (once) and replay
    python scripts/lookup_replay.py --check 8 --only copy,code-edit
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's specchat, not another one installed

from specchat.bench.prompts import load_prompts  # noqa: E402
from specchat.engine.drafters.ngram import NgramDrafter  # noqa: E402


def _extra() -> dict[str, str]:
    spec = importlib.util.spec_from_file_location("dvp", REPO / "scripts" / "default_vs_plain.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return dict(mod.EXTRA)


def generate(model_path: Path, max_tokens: int, threads: int) -> list[dict[str, object]]:
    from specchat.engine.decode.chat import ChatEngine
    from specchat.engine.decode.decoding import run_to_end
    from specchat.engine.decode.messages import Message
    from specchat.engine.decode.plain import PlainDecoder
    from specchat.engine.decode.sampling import SamplerSettings
    from specchat.engine.llama.context import LlamaContext
    from specchat.engine.llama.model import LlamaModel
    from specchat.engine.llama.model_settings import ContextSettings

    model = LlamaModel(model_path)
    ctx = LlamaContext(model, ContextSettings(n_ctx=4096, n_threads=threads))
    engine = ChatEngine(PlainDecoder(ctx))
    prompts = [(p.category, p.text) for p in load_prompts(None, (), 1)] + list(_extra().items())
    out = []
    for name, text in prompts:
        prompt = engine.tokenize_chat([Message("user", text)])
        ctx.clear()
        done = run_to_end(engine.decoder, prompt, SamplerSettings(temperature=0.0,
                                                                  max_tokens=max_tokens))
        out.append({"name": name, "prompt": prompt, "reply": list(done.tokens)})
        print(f"generated {name}: {len(done.tokens)} tokens", file=sys.stderr, flush=True)
    return out


def replay(prompt: list[int], reply: list[int], check: int, n_min: int
           ) -> tuple[dict[str, int], list[tuple[int, bool]]]:
    """One reply through the drafter, each step proposing up to ``check`` tokens: the counts,
    and (streak before, right?) for every token the lookup had a guess for."""
    d = NgramDrafter(n_min=n_min)
    d.reset(prompt)
    i = steps = lookups = kept = drafted = full = 0
    while i < len(reply):
        guess = d.guess(prompt + reply[:i], check)
        n = 0
        while n < len(guess) and i + n < len(reply) and guess[n] == reply[i + n]:
            n += 1
        if guess:
            lookups += 1
            drafted += len(guess)
            kept += n
            full += n == check
        d.extend(reply[i : i + n + 1])
        i += n + 1
        steps += 1
    # the next token after each streak of right one-token guesses
    d = NgramDrafter(n_min=n_min)
    d.reset(prompt)
    streaks: list[tuple[int, bool]] = []
    streak = 0
    for t in reply:
        g = d.lookup(1)
        if g:
            streaks.append((streak, g[0] == t))
            streak = streak + 1 if g[0] == t else 0
        else:
            streak = 0
        d.extend([t])
    return ({"tokens": len(reply), "steps": steps, "lookups": lookups, "drafted": drafted,
             "kept": kept, "full": full}, streaks)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    models = Path.home() / ".cache" / "specchat-qwen" / "home" / "data" / "models"
    ap.add_argument("--model", type=Path,
                    default=models / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/lookup_replay.json"))
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--check", type=int, default=16, help="the most tokens a lookup proposes")
    ap.add_argument("--n-min", type=int, default=2, help="the drafter's shortest match")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    if a.cache.exists():
        data = json.loads(a.cache.read_text())
    else:
        data = generate(a.model, a.max_tokens, a.threads)
        a.cache.write_text(json.dumps(data))
    keep = {x for x in a.only.split(",") if x}
    print(f"{'prompt':<15} {'tokens':>6} {'steps':>5} {'lookups':>7} {'drafted':>7} "
          f"{'kept':>5} {'full':>4} {'tokens/step':>11}")
    streaks: list[tuple[int, bool]] = []
    for row in data:
        if keep and row["name"] not in keep:
            continue
        r, s = replay(list(row["prompt"]), list(row["reply"]), a.check, a.n_min)
        streaks += s
        print(f"{row['name']:<15} {r['tokens']:>6} {r['steps']:>5} {r['lookups']:>7} "
              f"{r['drafted']:>7} {r['kept']:>5} {r['full']:>4} "
              f"{r['tokens'] / r['steps']:>11.2f}")
    print("\nthe lookup's next token, by how many it got right in a row before it:")
    for lo, hi in ((0, 0), (1, 1), (2, 3), (4, 7), (8, 15), (16, 10**9)):
        got = [ok for st, ok in streaks if lo <= st <= hi]
        label = f"{lo}+" if hi > 10**6 else f"{lo}" if lo == hi else f"{lo}-{hi}"
        if got:
            print(f"  after {label:>5}: right {sum(got) / len(got):.0%} of {len(got)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
