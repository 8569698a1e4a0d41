"""The draft model's arms, as the planner plays them (:mod:`specchat.engine.policy.planner_arms`):
its chain and its token tree (:mod:`specchat.engine.decode.arms`).

Both take the draft model's per-position α, per topic, from the planner's learning base
(:mod:`specchat.engine.policy.learning`), and both are priced at the draft model's seconds per
token plus, after steps it did not draft, the catch-up read of what they committed
(:mod:`specchat.engine.policy.draft_reads`). The chain is warmed up and probed while that read is
cheap, and its steps may stop early on the draft's confidence. The tree is one batched draft
pass per level; its lower ranks are learnt from its trees' accepted ranks
(:mod:`specchat.engine.policy.planner_trees`), saved as the state's ``ranks``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from specchat.engine.decode.arms import Arm
from specchat.engine.decode.events import StepEvent
from specchat.engine.decode.plan import Plan, chain
from specchat.engine.policy.acceptance import expected_tokens
from specchat.engine.policy.learning import AutoGammaSettings
from specchat.engine.policy.planner_arms import FIRST_STEP_READ, ArmRecord, Scene, Scoring
from specchat.engine.policy.planner_settings import Candidate, PlannerSettings
from specchat.engine.policy.planner_trees import TreePlans
from specchat.engine.policy.tree_stats import tree_draft_cost


def t_draft(p: Scene) -> float:
    """A draft token's cost: measured (or calibrated), else the target's step scaled by the
    models' sizes (decoding reads every weight once a token), else 0 (unknown)."""
    c = p.costs
    if c.draft_known or p.reads.size_ratio is None:
        return c.t_draft
    return p.reads.size_ratio * c.verify_table()[0]


def catch_up_cost(p: Scene, tokens: int) -> float:
    """Seconds for the draft model to read ``tokens`` it missed (DraftReads.catch_up)."""
    return p.reads.catch_up(tokens, p.costs.verify_table(), t_draft(p))


def draft_unpriced(p: Scene) -> bool:
    """The draft model's cost was never measured (no calibration, and the warm-up left it out
    because it would first read a long prompt) and it is that far behind: its cost reads 0, not
    unknown. Priced free it would win, and then read the whole prompt (seconds for a long one on
    a CPU), so it is neither scored nor probed."""
    return not p.costs.draft_known and p.reads.size_ratio is None \
        and p.reads.behind > p.plan_settings.warmup_max_lag


class DraftArm(ArmRecord):
    """What the draft model's chain and tree share."""

    drafts_model = True

    def alphas(self, model: Sequence[float], rng: np.random.Generator | None) -> Sequence[float]:
        return model

    def lags_behind(self, p: Scene) -> bool:
        return p.reads.pending and p.reads.behind > FIRST_STEP_READ

    def holds_back(self, p: Scene, base: Candidate, chosen: Candidate) -> str | None:
        # Worth switching back to the draft only if the faster steps repay its catch-up within
        # the tokens the reply is still expected to write.
        catch = catch_up_cost(p, p.reads.behind)
        if catch > 0 and (1 / base.rate - 1 / chosen.rate) * p.lengths.remaining() < catch:
            return f"plain: the draft would first re-read {p.reads.behind} tokens"
        return None


class DraftChain(DraftArm):
    order = 1
    warm_order = 0
    probe_rank = 1
    decoder_gamma = True
    gamma_chain = True

    def candidate(self, p: Scene, sc: Scoring) -> Candidate | None:
        if draft_unpriced(p):
            return None
        return p.chains.best(self, sc.alphas, t_draft(p), p.costs, sc.base)

    def expected(self, plan: Plan, sc: Scoring) -> float:
        return expected_tokens(sc.alphas, plan.size)

    def draft_seconds(self, p: Scene, plan: Plan, n: int) -> float | None:
        return catch_up_cost(p, p.reads.behind) + n * t_draft(p)

    def may_warm(self, p: Scene) -> bool:
        # Not when a warm-up step would first read the whole prompt into the draft: not for a
        # guess (after a long document that costs more than the reply gains), nor when the
        # read costs more than a share of what the rest of the reply is expected to take (a
        # reply about to end cannot pay it back).
        ps = self.ps
        return not (p.reads.behind > ps.warmup_max_lag
                    or (p.warming_up and not read_pays(p, ps.warmup_read_share)))

    def probe(self, p: Scene, base: Candidate) -> str | None:
        # Only if re-reading what it missed is cheap here.
        catch = catch_up_cost(p, p.reads.behind)
        affordable = catch <= self.ps.probe_budget * p.reads.behind * base.seconds
        return self.name if affordable and not draft_unpriced(p) else None

    def speculate(self, p: Scene, chosen: Candidate, base: Candidate) -> tuple[Plan, Plan | None]:
        plan, _ = super().speculate(p, chosen, base)
        if self.s.early_stop and p.confident():
            # The confidence rule (keep_drafting) decides where the step stops; the
            # prediction stays the planned chain's.
            return chain(plan.drafter, self.s.gamma_max, plan.reason), chosen.plan
        return plan, None

    def word(self) -> str:
        return "chain"

    def learn(self, p: Scene, step: StepEvent) -> None:
        if p.reads.pending:
            # After plain or lookup steps (or a new prompt) the draft first catches up on what
            # they committed, a batched decode: that time is not a draft token's.
            p.costs.draft_seen()
        else:
            p.costs.add_draft(step.gamma, step.draft_s)
        p.learn_step(step)


class DraftTree(DraftArm):
    order = 4

    def __init__(self, name: str, arm: Arm, s: AutoGammaSettings, ps: PlannerSettings) -> None:
        super().__init__(name, arm, s, ps)
        self.plans = TreePlans(ps)

    def candidate(self, p: Scene, sc: Scoring) -> Candidate | None:
        c = p.costs
        if draft_unpriced(p):
            return None
        return self.plans.best(self.name, sc.alphas, c.verify_table(), t_draft(p), c.overhead,
                               sc.chains, sc.reshape)

    def expected(self, plan: Plan, sc: Scoring) -> float:
        return self.plans.expected(sc.alphas, plan)

    def draft_seconds(self, p: Scene, plan: Plan, n: int) -> float | None:
        table = p.costs.verify_table()
        return catch_up_cost(p, p.reads.behind) + tree_draft_cost(plan, t_draft(p), table)

    def speculate(self, p: Scene, chosen: Candidate, base: Candidate) -> tuple[Plan, Plan | None]:
        plan = chosen.plan
        return Plan(plan.drafter, plan.parents, f"tree {plan.size} · depth {plan.depth}"), None

    def learn(self, p: Scene, step: StepEvent) -> None:
        outcomes = self.plans.learn(p.last_plan, step)
        if outcomes:
            p.observe_outcomes(outcomes)

    def state(self) -> object | None:
        return self.plans.ranks.state()  # its lower ranks' counts

    def read(self, saved: object) -> object:
        return self.plans.read_ranks(saved)  # type: ignore[arg-type]

    def take(self, got: object) -> None:
        self.plans.ranks = got  # type: ignore[assignment]

    def old_state(self, d: Mapping[str, object]) -> object | None:
        return d["ranks"]  # (every version-1 state has them)


def read_pays(p: Scene, share: float) -> bool:
    """Whether the draft's catch-up costs at most ``share`` of the plain time the rest of the
    reply is expected to take (a warm-up's guess of what drafting could gain)."""
    catch = catch_up_cost(p, p.reads.behind)
    t1 = p.costs.verify_table()[0]
    return catch <= 0 or t1 <= 0 or catch <= share * p.lengths.remaining() * t1


def plain_reason(p: Scene, drafts: bool, mean: float) -> str:
    """Why nothing pays, in a few words, from the measured costs (``drafts``: the draft model's
    chain was scored, its α ``mean``)."""
    table = p.costs.verify_table()
    ratio = t_draft(p) / table[0] if table[0] > 0 else 0.0
    if drafts and ratio >= 0.3:
        return f"plain: a draft token costs {ratio:.0%} of a target step"
    n = 5  # a typical chain's check: the last token and four drafts
    growth = table[n - 1] / table[0] if table[0] > 0 else 0.0
    if growth > 0.4 * n:  # far from the nearly flat curve speculation counts on
        return f"plain: a {n}-token check costs {growth:.1f}× one token here"
    if drafts:
        return f"plain: the draft agrees on only {mean:.0%}"
    return "plain: no draft pays here"
