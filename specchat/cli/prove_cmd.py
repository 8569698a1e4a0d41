"""``specchat prove``: check on your own models that speculative output is distributed exactly
as plain output.

Draws N short continuations of one prompt plainly and N speculatively (different seeds), and
tests whether the two samples come from the same distribution: Pearson's χ² test of
homogeneity on the continuations (rare ones pooled), with an exact p-value. The speculative
side drafts on every step it can (a fixed γ or tree shape, never the planner's plain steps), so
the verification rule is what is tested: a run where too few continuations went through a
rejection proves nothing and says so. A correct decoder passes at any seed with probability
1 − α; a biased one fails as N grows.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from specchat.bench.chi2 import ChiSquare, detectable_tv, homogeneity
from specchat.cli.ask import read_prediction
from specchat.cli.common import Env, add_drafter_args, add_model_args, print_notices
from specchat.cli.grammar_args import add_grammar_args, grammar_from_args
from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.decoding import Decoder
from specchat.engine.decode.events import TokenOrigin
from specchat.engine.decode.fold import EventFold
from specchat.engine.decode.messages import Message
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.step_policy import GAMMA_CAP
from specchat.errors import SpecchatError
from specchat.loading import select
from specchat.models.progress import Steps, TextProgress
from specchat.runtime.decoders import PREDICTION, drafter_names
from specchat.runtime.opening import Runtime

PROMPT = "Write one sentence about the sea."
# The n-gram lookup drafts only where the conversation's last tokens appeared before: a reply
# that repeats an earlier one has a match from its first token (the chat template's opening of
# a reply appeared before it, followed by that reply).
NGRAM_PROMPT = "Say it once more."
NGRAM_HISTORY = (Message("user", "Say this sentence: the sea is wide and deep."),
                 Message("assistant", "The sea is wide and deep."))
ALPHA = 1e-3
POWER = 0.9
TREE_NODES = 8  # the default tree: 3 children at the root, 2 under the first (at 3 tokens)
# Fewer continuations than this share through a rejection and the residual was barely used.
MIN_REJECTED_SHARE = 0.2


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("prove", help="check that speculative output is distributed as plain",
                       description=__doc__.split("\n\n")[1] if __doc__ else None)
    add_model_args(p)
    add_drafter_args(p)
    p.add_argument("--samples", type=int, default=1000, metavar="N",
                   help="continuations per decoder (default 1000)")
    p.add_argument("--tokens", type=int, default=3, metavar="K",
                   help="tokens per continuation (default 3)")
    p.add_argument("--temperature", type=float, default=0.9, help="sampling temperature "
                   "(default 0.9)")
    p.add_argument("--seed", type=int, help="first seed (default: a random one, printed)")
    p.add_argument("--gamma", type=int, metavar="N",
                   help="draft tokens per step, drafted on every step (default: K − 1 for a "
                        f"chain, a tree of {TREE_NODES} nodes for --drafter tree)")
    p.add_argument("--prompt", help=f"the prompt (default: {PROMPT!r}; with the n-gram "
                   f"drafter, {NGRAM_PROMPT!r} after a reply to repeat)")
    p.add_argument("--prediction", metavar="FILE",
                   help="a predicted output to draft from (as `ask --prediction` and the "
                        "server's `prediction` do): the prediction drafter goes first")
    # Constrained: both sides sample the masked target; the drafts are masked along their path.
    add_grammar_args(p)
    p.set_defaults(func=run)


@dataclass
class Tally:
    """What the speculative side did, summed over its continuations: how much of the rule a
    run exercised. Each continuation's counts are its event fold's (the decoder's tally)."""

    continuations: int = 0
    steps: int = 0
    drafting_steps: int = 0
    drafted: int = 0
    accepted: int = 0
    rejected: int = 0  # draft tokens the rule judged and rejected
    residual: int = 0  # tokens sampled from a residual (a step whose drafts were all rejected)
    through_rejection: int = 0  # continuations with at least one rejection

    def add(self, run: EventFold) -> None:
        """One continuation, read by its event fold."""
        t = run.tally
        self.continuations += 1
        self.steps += t.steps
        self.drafting_steps += t.drafting_steps
        self.drafted += t.drafted
        self.accepted += t.accepted
        self.rejected += t.rejected_tokens
        self.residual += run.origins[TokenOrigin.CORRECTED]
        self.through_rejection += t.rejected_tokens > 0

    @property
    def rejected_share(self) -> float:
        return self.through_rejection / self.continuations if self.continuations else 0.0

    def __str__(self) -> str:
        return (f"{self.drafted} tokens drafted on {self.drafting_steps} of {self.steps} steps, "
                f"{self.accepted} accepted, {self.rejected} rejected, {self.residual} sampled "
                f"from the residual; {self.through_rejection} of {self.continuations} "
                f"continuations ({self.rejected_share:.0%}) went through a rejection")


@dataclass
class Sample:
    counts: Counter[tuple[int, ...]] = field(default_factory=Counter)
    tally: Tally = field(default_factory=Tally)


def sample(decoder: Decoder, prompt: Sequence[int],
           settings_for: Callable[[int], SamplerSettings], seeds: range,
           cancel: threading.Event, progress: Steps | None = None, side: str = "") -> Sample:
    out = Sample()
    for seed in seeds:
        if cancel.is_set():
            break
        run = EventFold()
        run.run(decoder.run(prompt, settings_for(seed), cancel), decoder.name)
        out.counts[tuple(run.token_ids)] += 1
        out.tally.add(run)
        if progress is not None:
            progress.add(1, side)
    return out


def verdict(result: ChiSquare, tally: Tally | None = None, alpha: float = ALPHA) -> str:
    """PASS, FAIL, or INCONCLUSIVE when the speculative side hardly ever rejected a draft (it
    then ran nearly what plain decoding runs, and a pass would prove nothing about the rule)."""
    p = result.p_value
    if p < alpha:
        return (f"FAIL: the speculative continuations differ from the plain ones "
                f"(p = {p:.3g} < {alpha:g})")
    if tally is not None and tally.rejected_share < MIN_REJECTED_SHARE:
        why = ("no token was drafted" if tally.drafted == 0 else
               f"only {tally.rejected_share:.0%} of the continuations went through a rejection")
        return (f"INCONCLUSIVE: {why} (at least {MIN_REJECTED_SHARE:.0%} are needed), so the "
                "verification rule was barely exercised; try a higher --temperature, a longer "
                "--gamma and --tokens, or a --prompt the draft guesses less well")
    return (f"PASS: the speculative continuations are distributed as the plain ones "
            f"(p = {p:.3g} ≥ {alpha:g})")


def exit_code(text: str) -> int:
    return 0 if text.startswith("PASS") else 1 if text.startswith("FAIL") else 3


def run(env: Env, args: argparse.Namespace) -> int:
    if args.samples < 20 or args.tokens < 2:
        raise SpecchatError("--samples must be ≥ 20 and --tokens ≥ 2 (a draft needs a token "
                            "after it to be checked against)")
    if args.gamma is not None and not 1 <= args.gamma <= GAMMA_CAP:
        raise SpecchatError(f"--gamma must be between 1 and {GAMMA_CAP}: prove checks drafts, "
                            "so every step drafts")
    if not args.temperature > 0:
        raise SpecchatError("--temperature must be > 0 (greedy output is checked token by "
                            "token: specchat ask --temperature 0 --plain, then without --plain)")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    try:
        settings = env.config.sampling.with_(temperature=args.temperature,
                                             max_tokens=args.tokens, stop=(),
                                             grammar=grammar_from_args(args)).validate()
    except ValueError as e:
        raise SpecchatError(str(e)) from None
    predicted = read_prediction(args.prediction) if args.prediction else None
    selection = select(env.catalog, args.pair, args.model, env.config.default_pair, args.draft)
    runtime = Runtime.open(selection, env.resolver, env.runtime_options(args), TextProgress())
    print_notices(runtime)
    cancel = threading.Event()
    try:
        names = drafter_names(env.drafters(args), env.ngram(args), runtime.draft_ctx is not None)
        if predicted is not None:
            names = (PREDICTION, *(n for n in names if n != PREDICTION))
            settings = settings.with_(prediction=tuple(runtime.target.tokenize(
                predicted, add_special=False, parse_special=False)))
        if not names:
            raise SpecchatError("nothing to prove: give a pair (--pair), --model with --draft, "
                                "or --drafter ngram")
        # A fixed draft on every step: the planner would choose plain steps where drafting does
        # not pay, and plain steps draw what plain decoding draws — a pass proving nothing.
        gamma = args.gamma or (TREE_NODES if "tree" in names else args.tokens - 1)
        spec = runtime.decoder(gamma=gamma, drafters=names)
        plain = runtime.decoder(plain=True)
        echo = args.prompt is None and names[0] == "ngram" and predicted is None
        history = NGRAM_HISTORY if echo else ()
        text = args.prompt or (NGRAM_PROMPT if echo else PROMPT)
        prompt = ChatEngine(plain).tokenize_chat([*history, Message("user", text)])
        n = args.samples
        what = ",".join(d.name for d in getattr(spec, "drafters", [])) or "speculative"
        print(f"[{selection.label}: {n} plain and {n} speculative ({what}, γ {gamma}) "
              f"continuations of {args.tokens} tokens at T = {args.temperature:g}, seeds from "
              f"{seed}]", file=sys.stderr)
        # Both sides on one bar: its ETA is the whole run's (a long one must not look hung).
        with Steps("prove", 2 * n, TextProgress(), "samples") as progress:
            a = sample(plain, prompt, lambda s: settings.with_(seed=s), range(seed, seed + n),
                       cancel, progress, "plain")
            b = sample(spec, prompt, lambda s: settings.with_(seed=s),
                       range(seed + n, seed + 2 * n), cancel, progress, "speculative")
    except KeyboardInterrupt:
        sys.stderr.write("specchat: interrupted\n")
        return 130
    finally:
        runtime.close()
    result = homogeneity(a.counts, b.counts)
    print(f"speculative side: {b.tally}")
    print(f"χ² = {result.statistic:.2f}, df = {result.df}, p-value = {result.p_value:.4g} "
          f"({len(set(a.counts) | set(b.counts))} distinct continuations, {n} each)")
    tv = detectable_tv(n, n, result.df, ALPHA, POWER)
    print(f"power: at {n} continuations a side this test catches, {POWER:.0%} of the time, any "
          f"difference of total variation ≥ {tv:.3f} between the two distributions (of the "
          f"continuations it compares; four times the samples halve it)")
    said = verdict(result, b.tally)
    print(said)
    return exit_code(said)
