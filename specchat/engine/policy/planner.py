"""The planner: per step, the drafter, the shape (chain or tree) and its size — or a plain step —
that maximise expected tokens per second on this machine's measured costs (Sequoia's
hardware-aware rule, Chen et al. 2024, arXiv:2402.12374, §3.3).

Each candidate's expected tokens per step E are set against the step's cost,

    rate = E / (draft cost + T(n + 1) + o),        plain: 1 / (T(1) + o),

where T is the target's verify-cost table (:class:`~specchat.engine.policy.verify_table.
VerifyTable`: calibrated, then updated from every step's measured verify time by batch size)
and o the loop's overhead. The planner knows no drafter by name: each drafter's module declares
its arm (:mod:`specchat.engine.decode.arms`), and the record made for the arm's kind
(:mod:`specchat.engine.policy.planner_arms`) gives its candidates, their E and draft cost, its
warm-up, timing and probe rules, what its steps teach and its saved state. The loop is
candidates → rate → choose against plain: speculation must beat plain by a margin (estimates
are noisy; losing to plain is the one outcome the planner must not risk), a plain answer is
held for a few steps, and a probe now and then asks whether drafting has started to pay
(:mod:`specchat.engine.policy.planner_plain`).

What it learns of the draft model (costs, α per topic, confidences) is
:class:`~specchat.engine.policy.learning.LearningPolicy`'s, which auto-γ shares.
``next_plan(available)`` answers the decoder for the drafters usable this step; ``next_gamma()``
is the chain length of the plan over this planner's ``drafters`` (0 = plain).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from specchat.engine.decode import registry
from specchat.engine.decode.arms import Arm, ArmKind
from specchat.engine.decode.events import StepEvent
from specchat.engine.decode.plan import NONE, Plan, plain
from specchat.engine.decode.step_policy import ReplyStart
from specchat.engine.policy import planner_state
from specchat.engine.policy.cost_model import OnlineCostModel
from specchat.engine.policy.draft_reads import DraftReads
from specchat.engine.policy.learning import AutoGammaSeed, LearningPolicy
from specchat.engine.policy.lookup_pauses import LookupPauses
from specchat.engine.policy.planner_arms import ArmRecord, Scoring
from specchat.engine.policy.planner_chains import ChainScorer
from specchat.engine.policy.planner_draft import plain_reason
from specchat.engine.policy.planner_plain import PlainRun
from specchat.engine.policy.planner_records import Records
from specchat.engine.policy.planner_settings import Candidate, PlannerSettings, Prediction
from specchat.engine.policy.planner_unscored import Step, unscored
from specchat.engine.policy.reply_length import ReplyLengths


class Planner(LearningPolicy):
    skip_first_shapes = True
    state_version = planner_state.STATE_VERSION  # (planner_state.migrate reads version 1)
    plans_steps = True  # next_plan chooses every step (see step_policy)

    def __init__(self, settings: PlannerSettings = PlannerSettings(),
                 seed: AutoGammaSeed | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 drafters: Sequence[str] | None = None,
                 arms: Mapping[str, Arm] | None = None) -> None:
        super().__init__(settings.auto, seed, clock)
        self.plan_settings = settings
        arms = dict(registry.arms() if arms is None else arms)  # as each module declares
        # What next_gamma() plans over (today's decoder): by default the draft model's chain.
        self.drafters = tuple(drafters) if drafters is not None else tuple(
            n for n, a in sorted(arms.items()) if a.kind is ArmKind.DRAFT_CHAIN)
        self.records = Records(arms, self.settings, settings, seed)
        self.chains = ChainScorer(self.settings.gamma_max, settings.lookup_depth)
        self._lags: dict[str, int] = {}  # tokens each drafter's own cache lacks at the reply's start
        self.plain = PlainRun(self.settings, settings)  # plain answers held, and probes
        self.last_plan: Plan = plain()
        self.reason = "warm-up" if self._warmup_left else ""
        self.label = "plan · warm-up" if self._warmup_left else "plan"
        self.prediction = Prediction()  # this reply's, against which its speed is judged
        # What the draft model lacks and what reading it costs (planner_draft.catch_up_cost),
        # priced against the tokens the reply is still expected to write (within its budget).
        self.reads = DraftReads()
        self.lengths = ReplyLengths()
        self.pauses = LookupPauses()  # lookups that kept nothing lately, not tried for a while
        # The free drafters whose guesses are scored in this reply: a probe of one would only
        # buy, at a check's price, what its guesses already say.
        self.guessed: set[str] = set()

    def record(self, name: str) -> ArmRecord:
        return self.records.of(name)

    def reseed(self, seed: AutoGammaSeed) -> None:
        super().reseed(seed)
        self.records.reseed(seed)
        if self.reason == "warm-up" and not self._warmup_left:
            self.reason, self.label = "", "plan"

    def own_plans(self, plans: Mapping[str, Callable[[], Plan]]) -> None:
        """Drafters that plan their own shape (``own_plan`` of :mod:`specchat.engine.drafters`):
        the decoder registers them; the planner scores them on their measured rate."""
        self.records.own(plans)

    # ------------------------------------------------------------------------ estimates

    def candidates(self, available: Sequence[str], alphas: Sequence[float],
                   arm_alphas: Mapping[str, Sequence[float]], reshape: bool = True
                   ) -> tuple[Candidate, list[Candidate]]:
        """Plain's candidate and the best of each arm's shapes, on the current costs, with the
        draft model's ``alphas`` and the other arms' ``arm_alphas`` (an arm missing there: its
        mean). ``reshape`` False scores the tree shapes found last time instead of searching
        again (exploration's sampled α: a new score, not a new search)."""
        c = self.costs
        base = Candidate(plain(), 1.0, c.verify_table()[0] + c.overhead)
        arms = sorted((self.record(n) for n in available), key=lambda r: r.order)
        sc = Scoring(alphas, arm_alphas, base, any(r.gamma_chain for r in arms), reshape)
        return base, [x for x in (r.candidate(self, sc) for r in arms) if x is not None]

    def predict(self, plan: Plan) -> tuple[float, float] | None:
        """(expected tokens, seconds) of ``plan`` on the current estimates and costs, the draft
        model's catch-up included; None for a plan its arm does not price."""
        table = self.costs.verify_table()
        if plan.drafter == NONE or min(plan.size, len(table) - 1) == 0:
            return 1.0, table[0] + self.costs.overhead
        alphas = self.current.model.position_alphas(self.current.model.alpha())
        base = Candidate(plain(), 1.0, table[0] + self.costs.overhead)
        return self.record(plan.drafter).predict(self, plan, Scoring(alphas, {}, base))

    def lag(self, name: str) -> int:
        return self._lags.get(name, 0)

    # ------------------------------------------------------------------------- choosing

    def next_gamma(self) -> int:
        plan = self.next_plan(self.drafters)
        return plan.size if self.record(plan.drafter).decoder_gamma else 0

    def next_plan(self, available: tuple[str, ...]) -> Plan:
        """The step's plan: an unscored step (:mod:`~specchat.engine.policy.planner_unscored`),
        a plain answer held, or the scoring's."""
        self._step_starts()
        step = Step(self.pauses.unpaused(available, self.records.hot()), self.lengths.tokens)
        got = unscored(self, step)
        if got is None:
            held = self.plain.keep(step.available, id(self.current), self.records.bands())
            # A held plain answer is predicted on the costs of the scoring that chose it.
            return self._chosen(plain(self.reason), got=held) if held is not None \
                else self._scored(step)
        if got.warm is not None:
            self._warmup_left -= 1
            self.planned = got.warm
        if got.tries is not None:
            got.tries.tried += 1
            self.plain.run = 0
        return self._chosen(got.plan, scored=got.scored)

    def _scored(self, step: Step) -> Plan:
        """Every candidate scored; then the best, plain, or a probe."""
        base, cands, chosen, sampled_best = self._choose(step.available)
        why = self.record(chosen.plan.drafter).holds_back(self, base, chosen)
        if why is not None:
            self.plain.run += 1
            return self._chosen(plain(why))
        if chosen.plan.drafter == NONE:
            plan, held = self.plain.plain_or_probe(self, step, id(self.current), base, cands,
                                                   sampled_best, lambda: self._plain_reason(cands))
            return self._chosen(plan, got=held)
        self.plain.speculated()
        arm = self.record(chosen.plan.drafter)
        arm.tried += 1
        plan, predict = arm.speculate(self, chosen, base)
        return self._chosen(plan, predict=predict)

    def _choose(self, available: tuple[str, ...]
                ) -> tuple[Candidate, list[Candidate], Candidate, float]:
        """Plain's candidate, the candidates, the one chosen (the best on the mean estimates,
        or exploration's pick on sampled ones where that costs little), and the best rate on
        the sampled ones."""
        model = self.current.model
        self._mean = mean = model.alpha()
        self._alphas = model.position_alphas(mean)
        arms = {n: r.alphas(self._alphas, None) for n, r in self.records.items()
                if n in available or r.band is not None}
        base, cands = self.candidates(available, self._alphas, arms)
        planned = self._fastest_paying(cands, base)
        self.planned = planned.plan.size if self.record(planned.plan.drafter).gamma_chain else 0
        self._rate = max(planned.rate, base.rate)
        chosen, sampled_best = planned, 0.0  # (the best speculative rate on sampled α)
        if self.settings.explore:
            sampled = model.position_alphas(model.sample_alpha(self.rng))
            arms_s = {n: r.alphas(sampled, self.rng) if n in available else arms[n]
                      for n, r in self.records.items() if n in arms}
            s_base, s_cands = self.candidates(available, sampled, arms_s, reshape=False)
            pick = self._fastest_paying(s_cands, s_base)
            sampled_best = max((c.rate for c in s_cands), default=0.0)
            # What the mean estimates say of the sampled pick: explore, but not at any price.
            if pick.plan.drafter == NONE:
                chosen = base
            else:
                arm = self.record(pick.plan.drafter)
                at_mean = Candidate(pick.plan, arm.expected(pick.plan, Scoring(
                    self._alphas, arms, base)), pick.seconds, pick.explore)
                if at_mean.rate >= base.rate * arm.explore_floor():
                    chosen = at_mean
        return base, cands, chosen, sampled_best

    def _fastest_paying(self, cands: Sequence[Candidate], base: Candidate) -> Candidate:
        """The fastest candidate of those that beat plain by the margin each needs; else
        plain."""
        return max((c for c in cands if c.rate >= base.rate * self.record(c.plan.drafter)
                    .needed()), key=lambda c: c.rate, default=base)

    def _plain_reason(self, cands: Sequence[Candidate]) -> str:
        drafts = any(self.record(c.plan.drafter).gamma_chain for c in cands)
        return plain_reason(self, drafts, self._mean)

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

    # ------------------------------------------------------------------------ observing

    def observe(self, step: StepEvent) -> None:
        self._step_s = step.draft_s + step.verify_s
        self.costs.add_verify(step.batch, step.verify_s)
        arm = self.record(step.drafter)
        self.reads.learn(step, self.overall.lam_slow, arm.drafts_model)
        if step.gamma > 0:
            arm.learn(self, step)
        for r in self.records.values():
            r.step_done()
        self.record(self.last_plan.drafter).observe_planned(step)
        self.reads.after(step, arm.drafts_model)
        self.lengths.committed(step.committed)
        self._after_observe()

    def score_guesses(self, committed: Sequence[int], ran: str,
                      guessers: Mapping[str, Callable[[int], Sequence[int]]]) -> None:
        """The free drafters' acceptance is learnt from their guesses on every step, not only
        from their own steps and probes (:mod:`specchat.engine.policy.guesses`): a lookup's
        prior alone never pays on a steep CPU curve, so a predicted output the reply followed
        would never be tried."""
        self.guessed.update(guessers)
        self.records.score_guesses(committed, ran, guessers, self.settings.gamma_max)

    # ---------------------------------------------------------------------- persistence

    def state(self) -> dict[str, object]:
        return {**super().state(), **planner_state.saved(self.records, self.reads, self.lengths)}

    def learnt(self) -> int:
        """Draft steps, the other arms' steps and timed steps: a planner that only ever ran
        plain steps and lookups (a draft that never paid here) still learnt the machine's
        verify costs."""
        return self.overall.steps + sum(r.learnt() for r in self.records.values()) \
            + self.costs.observations

    def _costs_usable(self, costs: OnlineCostModel) -> bool:
        return costs.verify_known  # an unmeasured draft is priced by the models' sizes

    def load_state(self, d: dict[str, object]) -> None:
        got = planner_state.read(self.records, d)  # (everything checked before anything is taken)
        super().load_state(got.base)
        got.into(self.records, self.reads, self.lengths)
        self.label = "plan"

    def begin(self, prompt_text: str) -> None:
        self.lengths.begin()
        super().begin(prompt_text)
        self.prediction = Prediction()
        self.records.begin()
        self.guessed = set()
        self.reads.begin()
        self._lags = {}
        self.pauses.clear()

    def start_reply(self, info: ReplyStart) -> None:
        self.lengths.budget = info.max_tokens
        self.reads.start_reply(info)

    def draft_lag(self, tokens: int) -> None:
        """A first draft step pays for reading these, as after plain steps."""
        self.reads.lag(tokens)

    def drafter_lags(self, lags: dict[str, int]) -> None:
        """One that would first read more than ``warmup_max_lag`` tokens is not probed this
        reply (on a CPU that read costs more than a short reply gains)."""
        self._lags = dict(lags)

    def forecast(self) -> float | None:
        return self.prediction.tok_s

    def describe(self) -> str:
        return f"{super().describe()}{''.join(r.describe() for r in self.records.values())}" \
            f"; last: {self.reason}"
