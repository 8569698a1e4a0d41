"""``specchat prove``: check on your own models that speculative output is distributed exactly
as plain output.

Draws N short continuations of one prompt plainly and N speculatively (different seeds), and
tests whether the two samples come from the same distribution: Pearson's χ² test of
homogeneity on the continuations (rare ones pooled), with an exact p-value. A correct
speculative decoder passes at any seed with probability 1 − α; a biased one fails as N grows.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
from collections import Counter
from collections.abc import Callable, Sequence

from specchat.bench.chi2 import ChiSquare, homogeneity
from specchat.cli.common import Env, add_drafter_args, add_model_args, print_notices
from specchat.engine.chat import ChatEngine
from specchat.engine.chat_template import Message
from specchat.engine.decoding import Decoder, run_to_end
from specchat.errors import SpecchatError
from specchat.loading import select
from specchat.models.progress import TextProgress
from specchat.runtime import Runtime, drafter_names

PROMPT = "Write one sentence about the sea."
ALPHA = 1e-3


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("prove", help="check that speculative output is distributed as plain",
                       description=__doc__.split("\n\n")[1] if __doc__ else None)
    add_model_args(p)
    add_drafter_args(p)
    p.add_argument("--samples", type=int, default=1000, metavar="N",
                   help="continuations per decoder (default 1000)")
    p.add_argument("--tokens", type=int, default=2, metavar="K",
                   help="tokens per continuation (default 2)")
    p.add_argument("--temperature", type=float, default=0.9, help="sampling temperature "
                   "(default 0.9)")
    p.add_argument("--seed", type=int, help="first seed (default: a random one, printed)")
    p.add_argument("--gamma", type=int, metavar="N", help="draft tokens per step (default: the "
                   "pair's γ)")
    p.add_argument("--prompt", default=PROMPT, help=f"the prompt (default: {PROMPT!r})")
    p.set_defaults(func=run)


def sample(decoder: Decoder, prompt: Sequence[int], settings_for: Callable[[int], object],
           seeds: range, cancel: threading.Event) -> Counter[tuple[int, ...]]:
    out: Counter[tuple[int, ...]] = Counter()
    for seed in seeds:
        if cancel.is_set():
            break
        out[tuple(run_to_end(decoder, prompt, settings_for(seed), cancel).tokens)] += 1  # type: ignore[arg-type]
    return out


def verdict(result: ChiSquare, alpha: float = ALPHA) -> str:
    p = result.p_value
    if p >= alpha:
        return (f"PASS: the speculative continuations are distributed as the plain ones "
                f"(p = {p:.3g} ≥ {alpha:g})")
    return (f"FAIL: the speculative continuations differ from the plain ones "
            f"(p = {p:.3g} < {alpha:g})")


def run(env: Env, args: argparse.Namespace) -> int:
    if args.samples < 20 or args.tokens < 1:
        raise SpecchatError("--samples must be ≥ 20 and --tokens ≥ 1")
    if not args.temperature > 0:
        raise SpecchatError("--temperature must be > 0 (greedy output is checked token by "
                            "token: specchat ask --temperature 0 --plain, then without --plain)")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    try:
        settings = env.config.sampling.with_(temperature=args.temperature,
                                             max_tokens=args.tokens, stop=()).validate()
    except ValueError as e:
        raise SpecchatError(str(e)) from None
    selection = select(env.catalog, args.pair, args.model, env.config.default_pair, args.draft)
    runtime = Runtime.open(selection, env.resolver, env.runtime_options(args), TextProgress())
    print_notices(runtime)
    cancel = threading.Event()
    try:
        drafters = env.drafters(args)
        if not drafter_names(drafters, env.ngram(args), runtime.draft_ctx is not None):
            raise SpecchatError("nothing to prove: give a pair (--pair), --model with --draft, "
                                "or --drafter ngram")
        spec = runtime.decoder(gamma=args.gamma, ngram=env.ngram(args), drafters=drafters)
        plain = runtime.decoder(plain=True)
        prompt = ChatEngine(plain).tokenize_chat([Message("user", args.prompt)])
        n = args.samples
        what = ",".join(d.name for d in getattr(spec, "drafters", [])) or "speculative"
        print(f"[{selection.label}: {n} plain and {n} speculative ({what}) continuations of "
              f"{args.tokens} tokens at T = {args.temperature:g}, seeds from {seed}]",
              file=sys.stderr)
        a = sample(plain, prompt, lambda s: settings.with_(seed=s), range(seed, seed + n), cancel)
        b = sample(spec, prompt, lambda s: settings.with_(seed=s),
                   range(seed + n, seed + 2 * n), cancel)
    except KeyboardInterrupt:
        sys.stderr.write("specchat: interrupted\n")
        return 130
    finally:
        runtime.close()
    result = homogeneity(a, b)
    print(f"χ² = {result.statistic:.2f}, df = {result.df}, p-value = {result.p_value:.4g} "
          f"({len(set(a) | set(b))} distinct continuations, {n} each)")
    print(verdict(result))
    return 0 if result.p_value >= ALPHA else 1
