"""Auto-γ: choose each step's draft length from what this machine and this text cost and yield.

Each step it picks the γ in 0..γ_max that maximises expected tokens per second,

    E(γ) / (γ·t_d + T_v(γ + 1) + o),    E(γ) = 1 + Σ_{i ≤ γ} Π_{j ≤ i} α_j,

with t_d, T_v and o from :class:`OnlineCostModel` and the per-position acceptance α_j from
:class:`AcceptanceModel` (for a constant α, E(γ) = (1 − α^(γ+1)) / (1 − α)). γ = 0 — a plain
step — wins when drafting does not pay; a probe every ``probe_every`` plain steps lets it come
back. Exploration is Thompson sampling: the pooled α is drawn from its Beta posterior, so a γ
that lost on bad luck gets tried again in proportion to the chance that it is in fact the best.

What it learns, how a step stops early on the draft's confidence, and its topics are its base's,
:class:`~specchat.engine.policy.learning.LearningPolicy`, which the planner shares.
"""

from __future__ import annotations

from specchat.engine.decode.events import StepEvent
from specchat.engine.decode.plan import MODEL
from specchat.engine.policy.acceptance import expected_tokens
from specchat.engine.policy.learning import (
    CODE,
    STATE_VERSION,
    AutoGammaSeed,
    AutoGammaSettings,
    LearningPolicy,
)

__all__ = ["CODE", "STATE_VERSION", "AutoGamma", "AutoGammaSeed", "AutoGammaSettings"]

MODEL_DRAFTERS = ("draft", MODEL)  # a draft-model chain, as StepEvent names it (old, new)


class AutoGamma(LearningPolicy):
    """The draft model's chain length, each step (see the module's docstring)."""

    _plain_run = 0  # plain steps in a row (each controller counts its own): a probe at probe_every

    def next_gamma(self) -> int:
        self._step_starts()
        s = self.settings
        if self._warmup_left:
            gamma = self.warmup_gamma()
            self._warmup_left -= 1
            self.label = "auto · warm-up"
            self.planned = min(gamma, s.gamma_max)
            return self.planned
        if self._warmup_left == 0 and not self.seeded and self.costs.ratio is None:
            self.costs.set_shape(*self.costs.line())  # warm-up over: anchor the slope's shape
        model = self.current.model
        self.label = f"auto · {self.current.name}"
        mean = model.alpha()
        self._alphas = model.position_alphas(mean)
        self._mean = mean
        self.planned, self._rate = self._best(self._alphas)
        if s.explore:
            gamma, _ = self._best(model.position_alphas(model.sample_alpha(self.rng)))
        else:
            gamma = self.planned
        if gamma == 0:
            self._plain_run += 1
            if self._plain_run < s.probe_every:
                return 0
            gamma = min(s.probe_gamma, s.gamma_max)  # a probe: has drafting started to pay?
        self._plain_run = 0
        if s.early_stop and self.confident():
            return s.gamma_max  # the confidence rule decides where the step stops
        return gamma

    def _best(self, alphas: list[float]) -> tuple[int, float]:
        """(γ, expected tokens per second) of the best γ for these acceptance rates."""
        best, rate = 0, 0.0
        cost = self.costs
        if not cost.ready:
            return 1, 0.0
        for g in range(self.settings.gamma_max + 1):
            r = expected_tokens(alphas, g) / cost.step_cost(g)
            if r > rate * 1.0001:
                best, rate = g, r
        return best, rate

    def observe(self, step: StepEvent) -> None:
        self._step_s = step.draft_s + step.verify_s
        if step.drafter in MODEL_DRAFTERS and step.gamma > 0:
            self.costs.add_draft(step.gamma, step.draft_s)
        self.costs.add_verify(step.batch, step.verify_s)
        if step.drafter in MODEL_DRAFTERS and step.gamma > 0:
            self.learn_step(step)
        self._after_observe()
