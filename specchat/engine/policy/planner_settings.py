"""The planner's knobs, and what it reasons with: a scored candidate step and a reply's forecast
(:mod:`specchat.engine.policy.planner`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from specchat.engine.decode.plan import Plan
from specchat.engine.policy.auto_gamma import AutoGammaSettings
from specchat.engine.policy.verify_table import TABLE_SIZE


def _planner_auto() -> AutoGammaSettings:
    # The shortest warm-up (when neither calibration nor a saved state gave costs): two steps
    # of γ 1 time a draft token and T(2) (the first of each is not counted: see
    # OnlineCostModel's skip_first); plain steps time T(1). Each warm-up step is paid in full
    # where drafting cannot pay, but γ 1 loses little (figures: docs/performance.md).
    return AutoGammaSettings(warmup=(1, 1))


@dataclass(frozen=True)
class PlannerSettings:
    auto: AutoGammaSettings = field(default_factory=_planner_auto)
    margin: float = 1.03  # speculation must promise this × plain's rate
    # ... and a lookup outside a long run (the lookup's last guesses not 4 right in a row) this
    # much: there its α differs from one reply to the next and a CPU's checks are dear, so a
    # thin promise loses; on a flat (GPU) curve such checks promise far more and still run.
    # Trades lookups in prose against never running slower (figures: docs/performance.md).
    lookup_margin: float = 1.15
    # A lookup's warm-up checks (inside a repeated passage) draft at least this many: until more
    # is timed, longer checks are priced on the line through T(1) and the size timed, and a line
    # through T(1) and T(2), the dearest tokens of a concave curve, prices every longer check
    # above what it costs, and a cold copy could then never draft again. Timing 4 rows first
    # anchors the line where lookups run; on a flat (GPU) curve either is cheap (figures:
    # docs/performance.md).
    lookup_warmup: int = 3
    # A lookup's unscored steps (warm-up, timing a check, timing a longer one) wait until its
    # guesses were right this many times in a row. Two right is a common word pair as often
    # as a repeated passage, and on a CPU a failed check costs several plain steps; four is a
    # copy under way. Trades a little speed on copies for none lost in prose (figures, and the
    # replay that chose 4 over 2: docs/performance.md).
    lookup_timing_streak: int = 4
    # Exploration (Thompson sampling) may try a plan the posterior mean rates at no less than
    # this × plain: trying is how estimates recover, but not at any price.
    explore_floor: float = 0.97
    probe_backoff: int = 8  # probes that found nothing stretch the wait up to this × probe_every
    # After plain (or lookup) steps the draft model must first read what they committed: a
    # switch to it must pay that back within this many tokens, and a probe with it may cost at
    # most probe_budget × the plain time since: a draft's read is not free on a CPU, and a
    # probe would pay it on every skipped token (figures: docs/performance.md).
    payback_tokens: int = 64
    warmup_max_lag: int = 256  # prompt tokens the draft may have to read for a warm-up step
    # With no costs known, a reply runs plain until it has this many tokens before the warm-up
    # drafts: a short reply cannot repay the draft reading the prompt and the first batches of
    # new shapes (figures: docs/performance.md). What the
    # warm-up measures is kept for the pair, so it is paid once, not per reply.
    warmup_after: int = 64
    probe_budget: float = 0.05
    # A warm-up step with the draft model (its cost and α not known yet) may first read what
    # the draft missed only if that costs at most this share of the plain time the rest of the
    # reply is expected to take (see ReplyLengths.remaining).
    warmup_read_share: float = 0.1
    tree_budget: int = TABLE_SIZE  # largest verify batch (root included) a tree may use
    tree_depth: int = 8
    tree_ranks: int = 4  # children per node at most
    rank_prior: float = 0.35  # P(rank k + 1 kept | ranks ≤ k not), before trees are seen
    rank_prior_weight: float = 4.0
    # Longest prompt-lookup chain (γ): a lookup costs nothing to draft, and a passage the
    # reply copies runs on for dozens of tokens, where a check's cost per token keeps falling
    # (figures: docs/performance.md).
    lookup_depth: int = TABLE_SIZE - 1
    rank_half_life: float = 200.0  # tree steps


@dataclass(frozen=True)
class Prediction:
    """What the planner expected of one reply's steps: Σ expected tokens over Σ predicted
    seconds, on the estimates and costs it held when it chose each step."""

    tokens: float = 0.0
    seconds: float = 0.0
    steps: int = 0
    unscored: int = 0  # steps of a drafter the planner does not score (not in the sums)

    @property
    def tok_s(self) -> float | None:
        return self.tokens / self.seconds if self.seconds > 0 and self.steps else None

    def add(self, tokens: float, seconds: float) -> Prediction:
        return Prediction(self.tokens + tokens, self.seconds + seconds, self.steps + 1,
                          self.unscored)


@dataclass(frozen=True)
class Candidate:
    plan: Plan
    expected: float
    seconds: float
    explore: bool = False  # chosen to time a check size never timed (Planner.candidates)

    @property
    def rate(self) -> float:
        return self.expected / self.seconds if self.seconds > 0 else 0.0
