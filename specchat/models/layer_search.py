"""Which blocks a layer-skip draft keeps: a coordinate search scored by predicted tokens/s.

Draft & Verify (Zhang et al. 2024) searches the skipped set with Bayesian optimisation; here a
coordinate search over one dropped span of blocks (the first and last block are always kept:
they matter most) — its length (centred), then where it starts, then its length again — with a small
budget of candidates. Each candidate is scored by the speed-up model
(:mod:`specchat.engine.policy.speedup`) on:

- α: greedy agreement between the cut model and the target along the target's own greedy
  continuation of a few calibration prompts (teacher forcing,
  :mod:`specchat.engine.policy.agreement`);
- costs measured here: the target's verification curve T(n), and a cut's per-token cost, which
  is about ``head + kept × block``: both terms are fitted from two measured points (a one-block
  cut and the target itself).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.messages import Message
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings
from specchat.engine.policy.agreement import agreement_trace, greedy_continuation
from specchat.engine.policy.costs import CostCurve, draft_step_cost, verify_costs
from specchat.engine.policy.speedup import best_gamma, speedup_table
from specchat.models.calibration import builtin_prompts
from specchat.models.layer_cut import CutSource, write_cut


@dataclass(frozen=True)
class SearchOptions:
    n_prompts: int = 3
    max_tokens: int = 32  # of the target's continuation per prompt
    max_candidates: int = 8
    gamma_max: int = 4
    n_ctx: int = 512
    n_threads: int = 0


@dataclass(frozen=True)
class Candidate:
    kept: tuple[int, ...]
    alpha: float
    draft_s: float  # the cut's per-token cost, from the fitted line
    gamma: int
    speedup: float  # predicted, against the target alone


@dataclass(frozen=True)
class SearchResult:
    n_layer: int
    target_s: float  # one target token (T(1))
    head_s: float  # the fitted per-token cost with no block
    block_s: float  # the fitted cost of one block
    tried: tuple[Candidate, ...] = field(default_factory=tuple)

    @property
    def best(self) -> Candidate:
        return max(self.tried, key=lambda c: (c.speedup, -len(c.kept)))

    @property
    def plain_tps(self) -> float:
        return 1.0 / self.target_s


def span_kept(n_layer: int, start: int, length: int) -> tuple[int, ...]:
    """Every block but ``length`` of them from ``start``."""
    return tuple(i for i in range(n_layer) if not start <= i < start + length)


def search(src: CutSource, work_dir: Path, options: SearchOptions = SearchOptions(),
           say: Callable[[str], None] = lambda _m: None,
           cancel: threading.Event | None = None) -> SearchResult:
    """Score candidate cuts of ``src``'s model (files written in ``work_dir`` and removed)."""
    cancel = cancel or threading.Event()
    n = src.n_layer
    cs = ContextSettings(n_ctx=options.n_ctx, n_threads=options.n_threads)
    target = LlamaModel(src.path)
    t_ctx = LlamaContext(target, cs)
    t_ctx.cancel = cancel
    try:
        chat = ChatEngine(PlainDecoder(t_ctx))
        data: list[tuple[list[int], list[int]]] = []
        for p in builtin_prompts()[: options.n_prompts]:
            prompt = chat.tokenize_chat([Message("user", p.prompt)])
            data.append((prompt, greedy_continuation(t_ctx, prompt, options.max_tokens, cancel)))
        prompt, reply = max(data, key=lambda d: len(d[1]))
        need = options.gamma_max + 1
        reply = (reply + [reply[-1] if reply else 0] * need)[: max(need, len(reply))]
        verify_s = verify_costs(t_ctx, prompt, reply, need, 3, cancel)
        # T(1) of the same curve: a separate timing of the target would carry its own noise
        # (the machine may be shared), and the speed-up model divides one by the other.
        target_s = verify_s[0]
        work_dir.mkdir(parents=True, exist_ok=True)
        cand_path = work_dir / "layerskip-candidate.gguf"

        def load(kept: Sequence[int]) -> tuple[LlamaModel, LlamaContext]:
            write_cut(src, cand_path, kept, cancel.is_set)
            m = LlamaModel(cand_path)
            c = LlamaContext(m, cs)
            c.cancel = cancel
            return m, c

        # The cost line: a one-block cut and the target itself.
        m1, c1 = load((0,))
        try:
            one_s = draft_step_cost(c1, prompt, reply[:6], cancel)
        finally:
            c1.close()
            m1.close()
        block_s = max(0.0, (target_s - one_s) / max(1, n - 1))
        head_s = max(0.0, one_s - block_s)
        say(f"costs here: target {target_s * 1e3:.1f} ms/token; a cut ≈ "
            f"{head_s * 1e3:.1f} ms + {block_s * 1e3:.2f} ms per kept block")

        tried: dict[tuple[int, ...], Candidate] = {}

        def score(kept: tuple[int, ...]) -> Candidate:
            if kept in tried:
                return tried[kept]
            m, c = load(kept)
            try:
                agree = positions = 0
                for pr, rep in data:
                    tr = agreement_trace(t_ctx, c, pr, rep)
                    agree += sum(tr.agree)
                    positions += tr.positions
            finally:
                c.close()
                m.close()
            alpha = agree / positions if positions else 0.0
            draft_s = head_s + len(kept) * block_s
            g, s = best_gamma(speedup_table(alpha, CostCurve(draft_s, verify_s),
                                            options.gamma_max))
            cand = tried[kept] = Candidate(kept, alpha, draft_s, g, s)
            say(f"  keep {len(kept)}/{n} blocks ({format_layers(kept)}): α {alpha:.2f}, "
                f"predicted {s:.2f}× at γ {g}")
            return cand

        lo, hi = (1, n - 1) if n >= 3 else (0, n)  # the first and last block stay
        room = hi - lo - (0 if n >= 3 else 1)  # at least one block is kept
        if room < 1:
            return SearchResult(n, target_s, head_s, block_s,
                                (score(tuple(range(n))),))

        def clip(start: int, length: int) -> tuple[int, int]:
            length = max(1, min(room, length))
            return max(lo, min(hi - length, start)), length

        def middle(length: int) -> tuple[int, int]:
            return clip(lo + (hi - lo - length) // 2, length)

        budget = options.max_candidates
        # Small models lose agreement fast as blocks go (docs/performance.md), so the lengths
        # start small.
        lengths = sorted({max(1, min(room, x)) for x in (n // 8, n // 4, n // 2)})
        best_span = middle(lengths[0])
        best = score(span_kept(n, *best_span))
        for length in lengths[1:]:
            if len(tried) >= budget:
                break
            span = middle(length)
            c = score(span_kept(n, *span))
            if c.speedup > best.speedup:
                best, best_span = c, span
        length = best_span[1]
        for start in (lo, hi - length):  # the span earlier, then later
            if len(tried) >= budget:
                break
            span = clip(start, length)
            c = score(span_kept(n, *span))
            if c.speedup > best.speedup:
                best, best_span = c, span
        step = max(1, n // 8)
        for d in (-step, step):
            if len(tried) >= budget:
                break
            span = clip(best_span[0], best_span[1] + d)
            c = score(span_kept(n, *span))
            if c.speedup > best.speedup:
                best, best_span = c, span
        return SearchResult(n, target_s, head_s, block_s, tuple(tried.values()))
    finally:
        for leftover in work_dir.glob("layerskip-candidate.gguf*"):
            leftover.unlink(missing_ok=True)
        t_ctx.close()
        target.close()


def format_layers(kept: Sequence[int]) -> str:
    """(0, 1, 2, 5, 7, 8) → "0-2,5,7-8"."""
    out: list[str] = []
    i = 0
    ks = list(kept)
    while i < len(ks):
        j = i
        while j + 1 < len(ks) and ks[j + 1] == ks[j] + 1:
            j += 1
        out.append(str(ks[i]) if i == j else f"{ks[i]}-{ks[j]}")
        i = j + 1
    return ",".join(out)
