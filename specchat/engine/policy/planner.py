"""The planner: per step, the drafter, the shape (chain or tree) and its size — or a plain step —
that maximise expected tokens per second on this machine's measured costs (Sequoia's
hardware-aware rule, Chen et al. 2024, arXiv:2402.12374, §3.3).

For each candidate the expected tokens per step E (a chain: 1 + Σ_i Π_{j ≤ i} α_j; a tree: the
F(T) of :mod:`specchat.engine.policy.tree_dp`, whose dynamic programme gives the best tree for every
node budget) are set against the step's cost,

    rate = E / (draft cost + T(n + 1) + o),        plain: 1 / (T(1) + o),

where T is the target's verify-cost *table* (n = 1..32, :class:`~specchat.engine.policy.verify_table.
VerifyTable`: calibrated, then updated from every step's measured verify time by batch size),
o the loop's overhead, and the draft cost as the drafter's *arm* prices it. The planner knows no
drafter by name: each drafter's module declares its arm (:mod:`specchat.engine.decode.arms`,
read through the registry), and the arm's kind says how its steps are estimated and priced:
the draft model's chain γ·t_d (t_d measured per token, plus the catch-up read of what other
steps committed) and its tree one batched draft decode per level, priced as t_d scaled by the
table's shape at the level's width; a lookup γ·t (nearly free, measured too); any other chain
γ·t from its own steps. Speculation must beat plain by ``margin`` (estimates are noisy; losing
to plain is the one outcome the planner must not risk), so on a steep CPU curve with a costly
draft it plans plain steps, and says why.

Acceptance: per depth d the first-ranked child's α_d of the draft model is auto-γ's
per-position estimate (per topic, with change detection and Thompson-sampling exploration —
:mod:`specchat.engine.policy.auto_gamma`, which this extends); a tree's lower ranks, and the
tree search and scoring, are :mod:`specchat.engine.policy.planner_trees`. Every other arm keeps
its own estimates, by name (:mod:`specchat.engine.policy.planner_arms`): a banded lookup's per
band of its run of right guesses; a lookup's or a chain drafter's per position, from its
arm's prior, a chain drafter's after a first probe has timed it. A drafter that plans its own
shape (``own_plan``) is scored on what its steps did — tokens per step over seconds per step —
after a few measuring steps.

``next_plan(available)`` answers the decoder's question for the drafters usable this step;
``next_gamma()`` (today's decoder) is the chain length of the plan over this planner's
``drafters`` (0 = plain).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from specchat.engine.decode import arms as arms_mod
from specchat.engine.decode import registry
from specchat.engine.decode.arms import Arm, ArmKind
from specchat.engine.decode.events import StepEvent
from specchat.engine.decode.plan import NONE, Plan, chain, plain
from specchat.engine.decode.step_policy import ReplyStart
from specchat.engine.policy.acceptance import expected_tokens
from specchat.engine.policy.auto_gamma import AutoGamma, AutoGammaSeed
from specchat.engine.policy.cost_model import OnlineCostModel
from specchat.engine.policy.draft_reads import DraftReads
from specchat.engine.policy.guesses import GuessBook
from specchat.engine.policy.lookup_pauses import LookupPauses
from specchat.engine.policy.planner_arms import BandedLookup, OtherDrafter, OwnStep
from specchat.engine.policy.planner_settings import Candidate, PlannerSettings, Prediction
from specchat.engine.policy.planner_trees import TreePlans
from specchat.engine.policy.reply_length import ReplyLengths
from specchat.engine.policy.tree_stats import tree_draft_cost

REPLAN_EVERY = 4  # after a plain answer, score again every this many plain steps
# ... or every REPLAN_FAR when the best speculative step rates below NEAR_PLAIN × plain and the
# lookup is cold: plain steps then teach little (the lookup's guesses miss), so only the costs'
# drift could change the answer, and scoring costs a sizeable share of a small model's plain
# step. A lookup whose guesses come right ends a hold at once (see _keep_hold).
NEAR_PLAIN = 0.85
REPLAN_FAR = 16
# A chain whose check size was never timed is tried when its guessed rate is at least this × the
# best's (see candidates), so many times (a size's estimate trusts one timing only partly).
TRY_UNTIMED = 0.8
TIMINGS_TRIED = 2
# A reply's first step drafts only with a drafter that lacks at most this many of its tokens:
# reading more (a new prompt) would come before the first token (see next_plan).
FIRST_STEP_READ = 4
LOOKUP_SIZES = frozenset((1, 3, 7, 15, 31))  # the chain lengths a lookup's check may have


@dataclass
class _Step:
    """What the phases of one step's choice share."""

    available: tuple[str, ...]  # the drafters that can propose this step
    reply: int | None  # tokens this reply has committed (None: not driven reply by reply)
    chains: list[str] = field(default_factory=list)  # of the chain drafters the planner scores
    warm: list[str] = field(default_factory=list)  # those a warm-up step may use


class Planner(AutoGamma):
    skip_first_shapes = True
    plans_steps = True  # next_plan chooses every step (see step_policy)

    def __init__(self, settings: PlannerSettings = PlannerSettings(),
                 seed: AutoGammaSeed | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 drafters: Sequence[str] | None = None,
                 arms: Mapping[str, Arm] | None = None) -> None:
        super().__init__(settings.auto, seed, clock)
        # How each drafter is treated, as its module declares it (decode.arms); a drafter
        # missing here is a chain drafter (arms.CHAIN).
        self._arms = dict(registry.arms() if arms is None else arms)
        self.plan_settings = ps = settings
        # What next_gamma() plans over (today's decoder): by default the draft model's chain.
        self.drafters = tuple(n for n, a in sorted(self._arms.items())
                              if a.kind is ArmKind.DRAFT_CHAIN) if drafters is None \
            else tuple(drafters)
        # The banded lookups (the n-gram lookup: decode.arms), by name. (A calibration measures
        # the n-gram lookup's α on the pair's replies: seed.ngram_alpha.)
        a = settings.auto
        ng_alpha = seed.ngram_alpha if seed is not None else None
        self.lookups = {n: BandedLookup(n, arm, self.lookup_depth,
                                        arm.prior_alpha if ng_alpha is None else ng_alpha,
                                        a.slow_half_life, a.fast_half_life, a.detect_changes)
                        for n, arm in sorted(self._arms.items()) if arm.banded}
        self.trees = TreePlans(ps)
        self.others: dict[str, OtherDrafter] = {}  # other lookups and chain drafters, by name
        # Drafters that plan their own shape (planner_arms.OwnStep), by name: how to ask each
        # for its step, and what its steps did.
        self.own: dict[str, OwnStep] = {}
        self._lags: dict[str, int] = {}  # tokens each drafter's own cache lacks at the reply's start
        # (plain steps left to take unscored, for these drafters, this topic): see next_plan
        # (plain steps left, the drafters available, the topic, the lookup's streak band)
        self._hold: tuple[int, tuple[str, ...], int, tuple[int, ...]] = (0, (), 0, ())
        self._held_step = (1.0, 0.0)  # a plain step's (tokens, seconds) when the hold was set
        self.last_plan: Plan = plain()
        self._probe_wait = settings.auto.probe_every  # plain steps before the next probe
        self._probed = ""  # the drafter of the last speculative step when it was a probe
        # Tokens this reply has committed (None until a reply begins: driven step by step).
        self._reply_tokens: int | None = None
        self._timing: dict[int, int] = {}  # chain lengths tried to time their check (by count)
        self.reason = "warm-up" if self._warmup_left else ""
        self.label = "plan · warm-up" if self._warmup_left else "plan"
        self.prediction = Prediction()  # this reply's, against which its speed is judged
        # What the draft model lacks and what reading it costs (see catch_up_cost), priced
        # against the tokens the reply is still expected to write (within its budget).
        self.reads = DraftReads()
        self._budget: int | None = None
        self.lengths = ReplyLengths()
        self.pauses = LookupPauses()  # lookups that kept nothing lately, not tried for a while
        self._other_guesses = GuessBook()  # other free drafters' guesses (the lookup has its own)
        # The free drafters whose guesses are scored in this reply: a probe of one would only
        # buy, at a check's price, what its guesses already say.
        self._guessed: set[str] = set()

    def reseed(self, seed: AutoGammaSeed) -> None:
        super().reseed(seed)
        a = self.settings
        for lookup in self.lookups.values():
            if seed.ngram_alpha is not None:
                lookup.reseed(seed.ngram_alpha, a.slow_half_life, a.fast_half_life,
                              a.detect_changes)
        if self.reason == "warm-up" and not self._warmup_left:
            self.reason, self.label = "", "plan"

    # -------------------------------------------------------------------------- estimates

    @property
    def lookup_depth(self) -> int:
        return self.plan_settings.lookup_depth

    def own_plans(self, plans: Mapping[str, Callable[[], Plan]]) -> None:
        """Drafters that plan their own shape (``own_plan`` of :mod:`specchat.engine.drafters`):
        the decoder registers them; the planner scores them on their measured rate."""
        self.own = {n: self.own.get(n) or OwnStep() for n in plans}
        for name, ask in plans.items():
            self.own[name].ask = ask

    def candidates(self, available: Sequence[str], alphas: Sequence[float],
                   lookup_alphas: Mapping[str, Sequence[float]], reshape: bool = True
                   ) -> tuple[Candidate, list[Candidate]]:
        """Plain's candidate and the best of each drafter's shapes, on the current costs.
        ``reshape`` False scores the tree shapes found last time instead of running the DP
        again (exploration's sampled α: a new score, not a new search)."""
        c = self.costs
        table = c.verify_table()
        o = c.overhead
        t_d = self.t_draft
        base = Candidate(plain(), 1.0, table[0] + o)
        out: list[Candidate] = []
        # (the draft model's chains first, then the banded lookup's, then the others')
        scored: list[tuple[int, str, Sequence[float], float]] = []
        if self._draft_unpriced():
            available = tuple(n for n in available if not self._drafts_model(n))
        for name in available:
            kind = self._kind(name)
            if name in self.own:
                got = self.own[name].per_step()
                plan = self.own[name].ask() if got is not None else Plan(NONE)
                if got is not None and plan.drafter != NONE:
                    out.append(Candidate(plan, got[0], got[1] + o))
            elif kind is ArmKind.DRAFT_CHAIN:
                scored.append((0, name, alphas, t_d))
            elif self._banded(name):
                scored.append((1, name, lookup_alphas[name], self.lookups[name].t))
            elif kind is not ArmKind.DRAFT_TREE:
                other = self._other(name)
                if other.tried == 0 and self._lags.get(name, 0) > self.plan_settings.warmup_max_lag:
                    continue  # never timed, and it would first read a long prompt
                scored.append((2, name, other.model.position_alphas(), other.t(table[0])))
        for _, name, alph, per_token in sorted(scored, key=lambda x: x[0]):
            best = self._best_chain(name, alph, per_token, table, base)
            if best is not None:
                out.append(best)
        chains = any(self._kind(n) is ArmKind.DRAFT_CHAIN for n in available)
        for name in available:
            if self._kind(name) is ArmKind.DRAFT_TREE:
                tree = self.trees.best(name, alphas, table, t_d, o, chains, reshape)
                if tree is not None:
                    out.append(tree)
        return base, out

    def _best_chain(self, name: str, alph: Sequence[float], per_token: float,
                    table: Sequence[float], base: Candidate) -> Candidate | None:
        """The best chain of drafter ``name`` (α by depth ``alph``, ``per_token`` seconds a
        drafted token), or a longer one to time; None when no chain is worth scoring."""
        o = self.costs.overhead
        top = min(self.settings.gamma_max, len(table) - 1)
        lookup = self._kind(name) is ArmKind.LOOKUP
        # Every chain length in one pass, E(γ) grown term by term (this runs each step:
        # plans are built for the winner only).
        best_g, best_rate = 0, -1.0
        e, run = 1.0, 1.0
        deepest = min(self.lookup_depth, len(table) - 1) if lookup else top
        if self._banded(name):
            deepest = self.lookups[name].deepest(deepest)
        steps = [(0.0, 0.0)]  # (expected tokens, seconds) by chain length
        sizes = self._lookup_sizes() if lookup else None
        for g in range(1, min(deepest, len(alph)) + 1):
            run *= alph[g - 1]
            e += run
            sec = g * per_token + table[g] + o
            steps.append((e, sec))
            rate = e / sec if sec > 0 else 0.0
            if rate > best_rate * 1.0001 and (sizes is None or g in sizes):
                best_g, best_rate = g, rate
        if not best_g:
            return None
        g, explore = self._longer_check(name, steps, best_g, best_rate, sizes, base)
        return Candidate(chain(name, g), *steps[g], explore)

    def _lookup_sizes(self) -> frozenset[int]:
        """The chain lengths a lookup's check may have: a few (2, 4, 8, 16, 32 rows), since
        each new batch shape's first decode in a process costs up to twice a later one and a
        lookup's runs vary, so 31 sizes learnt online would each pay it (and each be timed
        less often); and every size this machine has timed (a calibration times them all). A
        CPU's curve has steps where a line has none, which only a timed size shows (figures:
        docs/performance.md)."""
        w = self.costs.table.weight
        return LOOKUP_SIZES.union(g for g in range(1, len(w)) if w[g] > 0.0)

    def _longer_check(self, name: str, steps: Sequence[tuple[float, float]], best_g: int,
                      best_rate: float, sizes: frozenset[int] | None, base: Candidate
                      ) -> tuple[int, bool]:
        """A chain longer than the best on the guessed costs, to time its check: (its length,
        True), else (``best_g``, False)."""
        c = self.costs
        # A guess is trusted at most twice past the largest check timed so far: a line
        # through small checks prices a long one far from what it costs, and a long check
        # that fails costs many plain steps; the curve is learnt by doubling instead.
        reach = 2 * (1 + max((i for i, w in enumerate(c.table.weight) if w > 0), default=0))
        banded = self.lookups.get(name)
        if banded is not None and not banded.may_time_longer(self.plan_settings.lookup_timing_streak):
            reach = 0
        for g in range(min(len(steps) - 1, reach - 1), best_g, -1):
            # A longer check this machine never timed is priced by a guess: a line through
            # the sizes timed so far. A CPU's curve flattens past them, so the
            # best chain on the guesses can be far too short. Try the longest such check
            # whose guessed rate costs little and still beats plain (twice: one timing moves
            # the estimate a third of the way).
            if not self._untimed(g) or (sizes is not None and g not in sizes):
                continue
            if banded is not None and banded.departed_within(g):
                continue
            e_g, s_g = steps[g]
            if e_g / s_g >= max(TRY_UNTIMED * best_rate, self._needed(name) * base.rate):
                return g, True
        return best_g, False

    def _lookup_timed(self, name: str) -> bool:
        """Whether banded lookup ``name`` has been right long enough in a row for an unscored
        step of it (a warm-up, a timing check, a longer check): see
        PlannerSettings.lookup_timing_streak."""
        return self.lookups[name].timed(self.plan_settings.lookup_timing_streak)

    def _lags_behind(self, name: str) -> bool:
        """Whether drafting with ``name`` now would first read tokens it has not seen (the
        draft model, or a drafter with a cache of its own, after a new prompt)."""
        if self._drafts_model(name):
            return self.reads.pending and self.reads.behind > FIRST_STEP_READ
        return self._lags.get(name, 0) > FIRST_STEP_READ

    def _draft_unpriced(self) -> bool:
        """The draft model's cost was never measured (no calibration, and the warm-up left it
        out because it would first read a long prompt) and it is that far behind: its cost
        reads 0, not unknown. Priced free it would win, and then read the whole prompt (seconds
        for a long one on a CPU), so it is neither scored nor probed."""
        return not self.costs.draft_known and self.reads.size_ratio is None \
            and self.reads.behind > self.plan_settings.warmup_max_lag

    @property
    def t_draft(self) -> float:
        """A draft token's cost: measured (or calibrated), else the target's step scaled by the
        models' sizes (decoding reads every weight once a token), else 0 (unknown)."""
        c = self.costs
        if c.draft_known or self.reads.size_ratio is None:
            return c.t_draft
        return self.reads.size_ratio * c.verify_table()[0]

    def read_cost(self) -> float | None:
        """Seconds the draft model takes to read one token it missed (DraftReads.per_token)."""
        return self.reads.per_token()

    def expected_remaining(self) -> float:
        """Tokens this reply is still expected to write (:mod:`~specchat.engine.policy.
        reply_length`), within its budget."""
        return self.lengths.expected_remaining(self._reply_tokens or 0, self._budget)

    def _read_pays(self, share: float) -> bool:
        """Whether the draft's catch-up costs at most ``share`` of the plain time the rest of
        the reply is expected to take (a warm-up's guess of what drafting could gain)."""
        catch = self.catch_up_cost(self.reads.behind)
        if catch <= 0:
            return True
        t1 = self.costs.verify_table()[0]
        return t1 <= 0 or catch <= share * self.expected_remaining() * t1

    def _untimed(self, g: int) -> bool:
        """Whether a chain of ``g`` (a check of g + 1 tokens) is one the planner should time:
        never timed here (nor calibrated), or tried fewer than TIMINGS_TRIED times so far."""
        tried = self._timing.get(g, 0)
        return 0 < tried < TIMINGS_TRIED or (tried == 0 and self.costs.table.weight[g] == 0.0)

    def _arm(self, name: str) -> Arm:
        return self._arms.get(name, arms_mod.CHAIN)

    def _kind(self, name: str) -> ArmKind:
        return self._arm(name).kind

    def _banded(self, name: str) -> bool:
        """A banded lookup (see decode.arms): its estimates are in ``lookups``."""
        return name in self.lookups

    def _drafts_model(self, name: str) -> bool:
        """A step of ``name`` drafts with the draft model (its chain or its tree)."""
        return self._kind(name) in (ArmKind.DRAFT_CHAIN, ArmKind.DRAFT_TREE)

    def _known(self, name: str) -> bool:
        """An arm whose estimates are the planner's own (the draft model's, the banded
        lookup's), not an :class:`OtherDrafter`'s."""
        return self._drafts_model(name) or self._banded(name)

    def _lookup_like(self, name: str) -> bool:
        """A lookup other than the banded one (see decode.arms): not probed before it is
        scored, its checks as deep as the banded lookup's."""
        return not self._banded(name) and self._kind(name) is ArmKind.LOOKUP

    def _other(self, name: str) -> OtherDrafter:
        got = self.others.get(name)
        if got is None:
            size = self.lookup_depth if self._lookup_like(name) else self.settings.gamma_max
            got = self.others[name] = OtherDrafter(size, self.settings.slow_half_life,
                                                   self._arm(name))
        return got

    def _own_can_pay(self, name: str) -> bool:
        """Whether a self-planning drafter's step could beat plain at all: every node of its
        deepest path accepted (1 + depth tokens) for a pass over its nodes, on the verify
        table. On a steep CPU curve Lookahead's and Medusa's batches cannot, so they are not
        even measured; with the costs unknown yet, they are."""
        if not self.seeded and self.costs.ratio is None:
            return True
        return self.own[name].can_pay(self.costs.verify_table(), self.costs.overhead,
                                      self.plan_settings.margin)

    def _tried(self, name: str) -> int:
        return self.own[name].tried if name in self.own else self._other(name).tried

    # ---------------------------------------------------------------------------- choosing

    def next_gamma(self) -> int:
        plan = self.next_plan(self.drafters)
        return plan.size if self._kind(plan.drafter) is ArmKind.DRAFT_CHAIN \
            or self._banded(plan.drafter) else 0

    def next_plan(self, available: tuple[str, ...]) -> Plan:
        """The step's plan: the phases below in turn, the first that decides giving it (a
        phase answers None to pass the step on)."""
        self._step_starts()
        step = _Step(self._unpaused(available), self._reply_tokens)
        return (self._first_token(step) or self._warm_up(step) or self._no_drafter(step)
                or self._measure_own(step) or self._probe_unseen(step)
                or self._time_costs(step) or self._keep_hold(step) or self._scored(step))

    def _unpaused(self, available: tuple[str, ...]) -> tuple[str, ...]:
        """The drafters available less the lookups pausing (see lookup_pauses)."""
        return self.pauses.unpaused(available, frozenset(n for n, x in self.lookups.items()
                                                         if x.hot))

    def _first_token(self, step: _Step) -> Plan | None:
        """The reply's first token comes from a plain step when a drafter would first have
        to read the prompt: its time to first token is then plain decoding's, and the read is
        paid (if at all) once the planner has chosen to draft."""
        if step.reply == 0 and any(self._lags_behind(n) for n in step.available):
            step.available = tuple(n for n in step.available if not self._lags_behind(n))
            if not step.available:
                return self._chosen(plain("plain: the first token before the draft reads "
                                          "the prompt"))
        return None

    def _warm_up(self, step: _Step) -> Plan | None:
        """The warm-up's unscored chains, which time the first checks."""
        s, ps = self.settings, self.plan_settings
        step.chains = [d for d in step.available if self._kind(d) is ArmKind.DRAFT_CHAIN] \
            + [d for d in step.available if self._banded(d)]
        # Unscored lookup steps (the warm-up's, a timing check) only inside a passage the reply
        # repeats: elsewhere a lookup of two tokens or more is right a third of the time or
        # less, and on a CPU each check that fails costs more than the plain step it replaced
        # (figures: docs/performance.md). Its guesses are scored on
        # every step, so its streak grows as soon as the reply starts copying.
        warm = [d for d in step.chains if not self._banded(d) or self._lookup_timed(d)]
        if step.chains and self._kind(step.chains[0]) is ArmKind.DRAFT_CHAIN and (
                self.reads.behind > ps.warmup_max_lag
                or (self._warmup_left and not self._read_pays(ps.warmup_read_share))):
            # A warm-up step would first read the whole prompt into the draft: not for a
            # guess (after a long document that costs more than the reply gains), nor when
            # the read costs more than a share of what the rest of the reply is expected to
            # take (a reply about to end cannot pay it back).
            warm = warm[1:]
        step.warm = warm
        if self._warmup_left and warm and (step.reply is None or step.reply >= ps.warmup_after
                                           or self._banded(warm[0])):
            gamma = min(s.warmup[len(s.warmup) - self._warmup_left], s.gamma_max)
            if self._banded(warm[0]):
                gamma = max(gamma, ps.lookup_warmup)
            self._warmup_left -= 1
            self.planned = gamma
            return self._chosen(chain(warm[0], gamma, "warm-up"), scored=False)
        return None

    def _no_drafter(self, step: _Step) -> Plan | None:
        return None if step.available else self._chosen(plain("plain: no drafter can propose "
                                                              "here"))

    def _measure_own(self, step: _Step) -> Plan | None:
        """A drafter of its own shape: its first steps measure what it yields here."""
        for n in step.available:
            if n in self.own and self.own[n].measuring and self._own_can_pay(n):
                own = self.own[n].plan("measuring")
                if own.drafter != NONE:
                    self._plain_run = 0
                    self.own[n].tried += 1
                    return self._chosen(own, scored=False)
        return None

    def _probe_unseen(self, step: _Step) -> Plan | None:
        """A drafter never timed here: one short chain measures its cost and α."""
        ps = self.plan_settings
        unseen = [n for n in step.available if self._kind(n) is ArmKind.CHAIN
                  and n not in self.own
                  and self._other(n).tried == 0 and self._lags.get(n, 0) <= ps.warmup_max_lag]
        if not unseen:
            return None
        self._plain_run = 0
        self._other(unseen[0]).tried += 1
        return self._chosen(chain(unseen[0], min(self.settings.probe_gamma,
                                                 self.settings.gamma_max), "probe"),
                            scored=False)

    def _time_costs(self, step: _Step) -> Plan | None:
        """Before the verify curve's slope is known (one batch size timed), a step that times
        it rather than a guess."""
        if self.seeded or self.costs.ratio is not None:
            return None
        if sum(1 for w in self.costs.table.weight if w > 0) >= 2:
            self.costs.set_shape(*self.costs.line())  # warm-up over: anchor the slope's shape
            return None
        # A plain step (which times T(1)) — or an n-gram lookup, which is a plain step when it
        # finds nothing and otherwise times a check of several tokens (without it, a reply
        # whose warm-up lookups found nothing would never leave plain).
        lookups = [n for n in step.available if self._lookup_like(n)]
        banded = [n for n in step.available if self._banded(n) and self._lookup_timed(n)]
        lookup = next(iter(lookups + banded), None)
        if lookup is not None:
            return self._chosen(chain(lookup, 2, "timing a check"), scored=False)
        if self._warmup_left and step.warm and step.reply is not None:
            # The stats bar's words while the warm-up waits for a longer reply.
            return self._chosen(plain(f"plain: drafting tried from token "
                                      f"{self.plan_settings.warmup_after}"), scored=False)
        return self._chosen(plain("plain: timing a target step"), scored=False)

    def _keep_hold(self, step: _Step) -> Plan | None:
        """A plain answer held for a few steps (see _plain_or_probe), while nothing changed."""
        left, held, topic, band = self._hold
        self._hold = (0, (), 0, ())
        # A lookup that entered a repeated passage (or went deeper into one) since: score
        # again, its guesses changed what pays (a copy must not wait 16 plain steps).
        if left > 0 and held == step.available and topic == id(self.current) \
                and all(b >= now for b, now in zip(band, self._bands(), strict=True)) \
                and self._plain_run + 1 < self._probe_wait:
            self._hold = (left - 1, held, topic, band)
            self._plain_run += 1
            # Predicted on the costs of the scoring that chose it (the table is not worked
            # out again for a plain step: on a small model that was a sizeable share of it).
            return self._chosen(plain(self.reason), got=self._held_step)
        return None

    def _scored(self, step: _Step) -> Plan:
        """Every candidate scored on the measured costs and estimates; then the best, plain,
        or a probe."""
        base, cands, chosen, sampled_best = self._choose(step.available)
        catch = self.catch_up_cost(self.reads.behind)
        if self._drafts_model(chosen.plan.drafter) and catch > 0:
            # Worth switching back to the draft only if the faster steps repay its catch-up
            # within the tokens the reply is still expected to write.
            gain = (1 / base.rate - 1 / chosen.rate) * self.expected_remaining()
            if gain < catch:
                self._plain_run += 1
                return self._chosen(plain(f"plain: the draft would first re-read "
                                          f"{self.reads.behind} tokens"))
        if chosen.plan.drafter == NONE:
            return self._plain_or_probe(step, base, cands, sampled_best, catch)
        return self._speculate(base, chosen)

    def _choose(self, available: tuple[str, ...]
                ) -> tuple[Candidate, list[Candidate], Candidate, float]:
        """Plain's candidate, the candidates, the one chosen (the best on the mean estimates,
        or exploration's pick on sampled ones where that costs little), and the best rate on
        the sampled ones."""
        s, ps = self.settings, self.plan_settings
        model = self.current.model
        mean = model.alpha()
        self._alphas = model.position_alphas(mean)
        self._mean = mean
        ng = {n: x.alpha.position_alphas() for n, x in self.lookups.items()}
        base, cands = self.candidates(available, self._alphas, ng)
        planned = self._fastest_paying(cands, base)
        self.planned = planned.plan.size \
            if self._kind(planned.plan.drafter) is ArmKind.DRAFT_CHAIN else 0
        self._rate = max(planned.rate, base.rate)
        chosen = planned
        sampled_best = 0.0  # the best speculative rate on exploration's sampled α
        if s.explore:
            sampled = model.position_alphas(model.sample_alpha(self.rng))
            ng_s = {n: x.alpha.position_alphas(x.alpha.sample_alpha(self.rng))
                    if n in available else ng[n] for n, x in self.lookups.items()}
            s_base, s_cands = self.candidates(available, sampled, ng_s, reshape=False)
            pick = self._fastest_paying(s_cands, s_base)
            sampled_best = max((c.rate for c in s_cands), default=0.0)
            # What the mean estimates say of the sampled pick: explore, but not at any price
            # (a lookup outside a long run: not below its own margin).
            if pick.plan.drafter == NONE:
                chosen = base
            else:
                at_mean = Candidate(pick.plan, self._expected(pick.plan, self._alphas, ng),
                                    pick.seconds, pick.explore)
                floor = ps.lookup_margin if self._short_lookup(pick.plan.drafter) \
                    else ps.explore_floor
                if at_mean.rate >= base.rate * floor:
                    chosen = at_mean
        return base, cands, chosen, sampled_best

    def _bands(self) -> tuple[int, ...]:
        """Each banded lookup's band (lookup_estimate's COLD, HOT, LONG)."""
        return tuple(x.estimate.band for x in self.lookups.values())

    def _short_lookup(self, drafter: str) -> bool:
        """A lookup step now would start outside a long run of right guesses."""
        return self._banded(drafter) and not self.lookups[drafter].long_run

    def _needed(self, drafter: str) -> float:
        """How many times plain's rate a step of ``drafter`` must promise now."""
        ps = self.plan_settings
        return ps.lookup_margin if self._short_lookup(drafter) else ps.margin

    def _fastest_paying(self, cands: Sequence[Candidate], base: Candidate) -> Candidate:
        """The fastest candidate of those that beat plain by the margin each needs; else
        plain."""
        return max((c for c in cands if c.rate >= base.rate * self._needed(c.plan.drafter)),
                   key=lambda c: c.rate, default=base)

    def _plain_or_probe(self, step: _Step, base: Candidate, cands: Sequence[Candidate],
                        sampled_best: float, catch: float) -> Plan:
        """Nothing pays: plain, held for the next few steps; or, every so often, a probe of
        whether drafting has started to pay."""
        s, ps = self.settings, self.plan_settings
        if self._probed and not self._banded(self._probed):
            # The probe found nothing: wait longer before the next one. Not for an n-gram
            # probe: one token checked costs little, and a reply that copies its prompt must
            # not lose its lookups to an unlucky first guess at a changed word.
            self._probe_wait = min(self._probe_wait * 2, s.probe_every * ps.probe_backoff)
        self._probed = ""
        self._plain_run += 1
        available = step.available
        if self._plain_run < self._probe_wait or not (
                step.chains or any(not self._known(n) for n in available)):
            # The next few plain steps keep this answer unscored (scoring costs a few ms of
            # Python, a tenth of a small model's step).
            best = max([c.rate for c in cands] + [sampled_best])
            # (No hold while the lookup is hot: its estimate moves with every guess.)
            every = 1 if any(x.hot for x in self.lookups.values()) else REPLAN_EVERY \
                if best >= NEAR_PLAIN * base.rate \
                else REPLAN_FAR
            self._hold = (every - 1, available, id(self.current), self._bands())
            self._held_step = (base.expected, base.seconds)
            return self._chosen(plain(self._plain_reason(base, cands)), got=self._held_step)
        # A probe (n-gram first: it costs nearly nothing; the draft model only if re-reading
        # what it missed is cheap here).
        affordable = catch <= ps.probe_budget * self.reads.behind * base.seconds \
            and not self._draft_unpriced()
        others = sorted((self._tried(n), n) for n in available if not self._known(n)
                        and n not in self._guessed and self._lags.get(n, 0) <= ps.warmup_max_lag
                        and (n not in self.own or self._own_can_pay(n)))
        # A lookup whose guesses are scored is not probed: its estimate already holds what a
        # probe would learn, so a probe is a bet the scoring turned down (figures:
        # docs/performance.md).
        banded = [n for n in step.chains if self._banded(n)]
        model = [n for n in step.chains if self._kind(n) is ArmKind.DRAFT_CHAIN]
        if banded:
            probe = "" if banded[0] in self._guessed else banded[0]
        elif model and affordable:
            probe = model[0]
        else:
            probe = others[0][1] if others else ""
        self._plain_run = 0
        if not probe:
            return self._chosen(plain(self._plain_reason(base, cands)))
        self._probed = probe
        if probe in self.own:
            self.own[probe].tried += 1
            return self._chosen(self.own[probe].plan("probe"))
        if probe in self.others:
            self.others[probe].tried += 1
        return self._chosen(chain(probe, min(s.probe_gamma, s.gamma_max), "probe"))

    def _speculate(self, base: Candidate, chosen: Candidate) -> Plan:
        """The chosen speculative step, labelled for the stats bar."""
        s = self.settings
        self._plain_run = 0
        self._probed = ""
        self._probe_wait = s.probe_every
        plan = chosen.plan
        if plan.drafter in self.others:
            self.others[plan.drafter].tried += 1
        if plan.drafter in self.own:
            self.own[plan.drafter].tried += 1
            return self._chosen(Plan(plan.drafter, plan.parents,
                                     f"{plan.reason} · {chosen.rate / base.rate:.2f}× plain"))
        kind = self._kind(plan.drafter)
        if kind is ArmKind.DRAFT_TREE:
            return self._chosen(Plan(plan.drafter, plan.parents,
                                     f"tree {plan.size} · depth {plan.depth}"))
        reason = f"{'chain' if kind is ArmKind.DRAFT_CHAIN else plan.drafter} {plan.size}"
        if chosen.explore:
            self._timing[plan.size] = self._timing.get(plan.size, 0) + 1
            if self._banded(plan.drafter):
                self.lookups[plan.drafter].timing_plan = plan.size
            reason += " · timing a longer check"
        if kind is ArmKind.DRAFT_CHAIN and s.early_stop and self._confident():
            # The confidence rule (keep_drafting) decides where the step stops; the
            # prediction stays the planned chain's.
            return self._chosen(chain(plan.drafter, s.gamma_max, reason), predict=plan)
        return self._chosen(Plan(plan.drafter, plan.parents, reason))

    def catch_up_cost(self, tokens: int) -> float:
        """Seconds for the draft model to read ``tokens`` it missed (DraftReads.catch_up)."""
        return self.reads.catch_up(tokens, self.costs.verify_table(), self.t_draft)

    def _expected(self, plan: Plan, alphas: Sequence[float],
                  lookups: Mapping[str, Sequence[float]]) -> float:
        if self._kind(plan.drafter) is ArmKind.DRAFT_TREE:
            return self.trees.expected(alphas, plan)
        if plan.drafter in self.others:
            return expected_tokens(self.others[plan.drafter].model.position_alphas(), plan.size)
        return expected_tokens(lookups.get(plan.drafter, alphas), plan.size)

    def predict(self, plan: Plan) -> tuple[float, float] | None:
        """(expected tokens, seconds) of ``plan`` on the current estimates and costs, the draft
        model's catch-up included; None for a drafter the planner does not score."""
        c = self.costs
        table = c.verify_table()
        o = c.overhead
        n = min(plan.size, len(table) - 1)
        if plan.drafter == NONE or n == 0:
            return 1.0, table[0] + o
        if plan.drafter in self.own:
            got = self.own[plan.drafter].per_step()
            return (got[0], got[1] + o) if got is not None else None
        alphas = self.current.model.position_alphas(self.current.model.alpha())
        expected = self._expected(plan, alphas, {n: x.alpha.position_alphas()
                                                 for n, x in self.lookups.items()})
        if self._banded(plan.drafter):
            return expected, n * self.lookups[plan.drafter].t + table[n] + o
        catch = self.catch_up_cost(self.reads.behind)
        kind = self._kind(plan.drafter)
        if kind is ArmKind.DRAFT_CHAIN:
            return expected, catch + n * self.t_draft + table[n] + o
        if kind is ArmKind.DRAFT_TREE:
            return expected, catch + tree_draft_cost(plan, self.t_draft, table) + table[n] + o
        if plan.drafter in self.others and plan.is_chain:
            return expected, n * self.others[plan.drafter].t(table[0]) + table[n] + o
        return None

    def _chosen(self, plan: Plan, predict: Plan | None = None, scored: bool = True,
                got: tuple[float, float] | None = None) -> Plan:
        # Warm-up and timing steps run before the costs are known: not predictions.
        if got is None and scored:
            got = self.predict(predict or plan)
        p = self.prediction
        self.prediction = p.add(*got) if got is not None else Prediction(
            p.tokens, p.seconds, p.steps, p.unscored + 1)
        self.last_plan = plan
        self.reason = plan.reason
        self.label = f"plan · {plan.reason}" if plan.reason else "plan"
        return plan

    def _plain_reason(self, base: Candidate, cands: Sequence[Candidate]) -> str:
        """Why nothing pays, in a few words, from the measured costs."""
        table = self.costs.verify_table()
        ratio = self.t_draft / table[0] if table[0] > 0 else 0.0
        model = next((c for c in cands if self._kind(c.plan.drafter) is ArmKind.DRAFT_CHAIN),
                     None)
        if model is not None and ratio >= 0.3:
            return f"plain: a draft token costs {ratio:.0%} of a target step"
        n = 5  # a typical chain's check: the last token and four drafts
        growth = table[n - 1] / table[0] if table[0] > 0 else 0.0
        if growth > 0.4 * n:  # far from the nearly flat curve speculation counts on
            return f"plain: a {n}-token check costs {growth:.1f}× one token here"
        if model is not None:
            return f"plain: the draft agrees on only {self._mean:.0%}"
        return "plain: no draft pays here"

    # ------------------------------------------------------------------------- observing

    def observe(self, step: StepEvent) -> None:
        self._step_s = step.draft_s + step.verify_s
        self.costs.add_verify(step.batch, step.verify_s)
        model_drafted = self._drafts_model(step.drafter)
        kind = self._kind(step.drafter)
        lam = self.overall.lam_slow
        self.reads.learn(step, lam, model_drafted)
        if step.gamma > 0 and kind is ArmKind.LOOKUP:
            self.pauses.outcome(step.drafter, step.accepted > 0)
            if self._banded(step.drafter):
                self.lookups[step.drafter].outcome(step)
        for lookup in self.lookups.values():
            lookup.timing_plan = 0
        if step.gamma > 0 and kind is ArmKind.DRAFT_CHAIN:
            if self.reads.pending:
                # After plain or n-gram steps (or a new prompt) the draft first catches up on
                # what they committed, a batched decode: that time is not a draft token's.
                self.costs.draft_seen()
            else:
                self.costs.add_draft(step.gamma, step.draft_s)
            self._learn(step)
        elif step.gamma > 0 and self._banded(step.drafter):
            self.lookups[step.drafter].learn(step, lam)
        elif step.gamma > 0 and kind is ArmKind.DRAFT_TREE:
            outcomes = self.trees.learn(self.last_plan, step)
            if outcomes:
                self.current.model.observe(outcomes)
                self.overall.observe(outcomes)
        elif step.gamma > 0 and not self._known(step.drafter) and step.drafter != NONE \
                and step.drafter not in self.own:
            self._other(step.drafter).observe(step)
        if self.last_plan.drafter in self.own:
            # By the plan, not the step's drafter: a Lookahead step whose pool had nothing
            # still paid for its window (its drafter then reads "none").
            self.own[self.last_plan.drafter].observe(step)
        self.reads.after(step, model_drafted)
        if self._reply_tokens is not None:
            self._reply_tokens += step.committed
        self._after_observe()

    def score_guesses(self, committed: Sequence[int], ran: str,
                      guessers: Mapping[str, Callable[[int], Sequence[int]]]) -> None:
        """The decoder, after each step: ``committed`` are the tokens it added, ``ran`` the
        drafter that proposed them ("none": a plain step), ``guessers`` what the drafters whose
        proposals cost nothing would propose now (``k`` tokens at most). The n-gram lookup's
        acceptance is learnt from its guesses on every step this way, not only from its own
        steps and probes (:mod:`specchat.engine.policy.guesses`)."""
        # Every other free drafter's guesses too: a lookup's prior alone (a predicted output's
        # is 0.8 a token) never pays on a steep CPU curve, so without them a warm home never
        # tried a predicted output the reply followed (serve, a 40-line rename: 0 of 82
        # predicted tokens used).
        k = self.settings.gamma_max
        for name, got in self._other_guesses.resolve(committed, ran).items():
            for _, start, outcome in got:
                self._other(name).model.observe(outcome, start)
        self._guessed.update(guessers)
        for name, guesser in guessers.items():
            if not self._banded(name):
                self._other_guesses.offer(name, guesser(k))
        # Guesses as long as the draft model's chains: scored deeper, a copy's long runs of
        # right tokens would outweigh the first token in the pooled α that every depth shrinks
        # toward (deeper depths learn from the lookup's own steps).
        for name, lookup in self.lookups.items():
            guess = guessers.get(name)
            lookup.estimate.score(committed, ran, guess(k) if guess else None)

    # ------------------------------------------------------------------------ persistence

    def state(self) -> dict[str, object]:
        d = super().state()
        for lookup in self.lookups.values():
            d.update(lookup.state())
        d.update(ranks=self.trees.ranks.state(), read_cost=self.reads.state(),
                 **self._lengths_now().state())
        return d

    def learnt(self) -> int:
        """Draft steps, lookup steps and timed steps: a planner that only ever ran plain steps
        and lookups (a draft that never paid here) still learnt the machine's verify costs."""
        return self.overall.steps + sum(x.steps() for x in self.lookups.values()) \
            + self.costs.observations

    def _costs_usable(self, costs: OnlineCostModel) -> bool:
        # The verify curve suffices: an unmeasured draft is priced by the models' sizes.
        return costs.verify_known

    def _lengths_now(self) -> ReplyLengths:
        """The reply lengths with the reply in progress (or the last one) counted."""
        if not self._reply_tokens:
            return self.lengths
        out = ReplyLengths()
        out.lengths = list(self.lengths.lengths)
        out.add(self._reply_tokens)
        return out

    def load_state(self, d: dict[str, object]) -> None:
        a = self.settings
        costs = {n: x.read_state(d, a.slow_half_life, a.fast_half_life)
                 for n, x in self.lookups.items()}
        ranks = self.trees.read_ranks(d["ranks"])  # type: ignore[arg-type]
        read = DraftReads.read_state(d.get("read_cost", [0.0, 0.0]))
        lengths = ReplyLengths()
        lengths.load_state(d)  # (older states have neither: nothing measured yet)
        super().load_state(d)
        for name, cost in costs.items():  # (checked above, before anything changed)
            if cost is not None:
                self.lookups[name].take(d, cost)
        self.trees.ranks = ranks
        self.reads.load(read)
        self.lengths = lengths
        self.label = "plan"

    def begin(self, prompt_text: str) -> None:
        if self._reply_tokens:
            self.lengths.add(self._reply_tokens)
        super().begin(prompt_text)
        self.prediction = Prediction()
        for lookup in self.lookups.values():
            lookup.begin()
        self._other_guesses.clear()
        self._guessed = set()
        self.reads.begin()
        self._lags = {}
        self._reply_tokens = 0
        self.pauses.clear()

    def start_reply(self, info: ReplyStart) -> None:
        self._budget = info.max_tokens
        self.reads.start_reply(info)

    def draft_lag(self, tokens: int) -> None:
        """The draft model's cache lacks ``tokens`` of the prompt (the decoder says so after
        ``begin``): a first draft step pays for reading them, as after plain steps."""
        self.reads.lag(tokens)

    def drafter_lags(self, lags: dict[str, int]) -> None:
        """What each drafter with a cache of its own lacks of the prompt (the decoder says so
        after ``begin``): one that would first read more than ``warmup_max_lag`` tokens is not
        probed this reply — on a CPU that read costs more than a short reply gains (a layer-skip
        cut reads a prompt nearly as slowly as the target)."""
        self._lags = dict(lags)

    def describe(self) -> str:
        lookups = "".join(f"; {n} α {x.alpha.alpha():.2f}" for n, x in self.lookups.items())
        return f"{super().describe()}{lookups}; last: {self.reason}"
