"""A learning γ controller's common part: what auto-γ (:mod:`specchat.engine.policy.auto_gamma`)
and the planner (:mod:`specchat.engine.policy.planner`) both learn and keep, and what the app
asks of either (:class:`~specchat.engine.policy.controller.Controller`: ``reseed``, ``state``,
``load_state``, ``learnt``, ``forecast``).

It learns the verify costs and the draft model's costs (:class:`OnlineCostModel`) and the draft
model's acceptance per position (:class:`AcceptanceModel`), per topic: the request's guessed
topic, and "code" inside a code fence, remembered across turns, so coming back to code restores
its long γ at once. A Page-Hinkley test on the accept/reject stream catches changes no signal
announced; the topic's slow estimate then jumps to the fast one. Exploration is Thompson
sampling: the pooled α is drawn from its Beta posterior (``rng``).

Within a step, once the draft model's confidences are calibrated (:class:`ConfidenceBins`), the
step may run up to γ_max but stops as soon as another token no longer pays: with s the
probability that every token drafted so far survives, drafting on to length L adds
s·Σ_k Π_{j ≤ k} α_j tokens for (L − drafted)·(t_d + b) seconds: worth it while some L beats the
best step rate R* (the marginal-value rule of a renewal process). Easy stretches thus draft
long and hard ones stop early (``keep_drafting``).

A subclass chooses the steps (``next_gamma``, ``next_plan``) and says what it observes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from specchat.engine.decode.events import StepEvent
from specchat.engine.decode.step_policy import PolicyBase
from specchat.engine.policy.acceptance import AcceptanceModel, ConfidenceBins, step_outcomes
from specchat.engine.policy.change_detect import PageHinkley
from specchat.engine.policy.cost_model import OnlineCostModel
from specchat.engine.policy.costs import CostCurve
from specchat.engine.policy.topics import FenceTracker, guess_topic

CODE = "code"
STATE_VERSION = 1



@dataclass(frozen=True)
class AutoGammaSettings:
    gamma_max: int = 10
    explore: bool = True  # Thompson sampling on α (else the posterior mean)
    early_stop: bool = True  # stop drafting within a step on low draft confidence
    topics: bool = True  # per-topic statistics, switched by the request and code fences
    detect_changes: bool = True  # Page-Hinkley on accept events
    probe_every: int = 24  # plain steps before a probe with a short draft
    probe_gamma: int = 1
    warmup: tuple[int, ...] = (2, 5, 1, 3)  # γ of the first steps when no costs are known
    confidence_after: float = 30.0  # observations before confidences are trusted
    prior_alpha: float = 0.5  # α before anything is known about the pair
    slow_half_life: float = 40.0  # steps
    fast_half_life: float = 5.0
    cost_half_life: float = 48.0
    realized_rate: bool = True  # stop threshold from the rate steps achieve, if above the model's
    pooled_future: bool = True  # the stop rule's later tokens at the pooled α (not per position)
    next_bins: bool = True  # the next token's α from this token's confidence (persistence)
    seed: int = 0


@dataclass(frozen=True)
class AutoGammaSeed:
    """What is known before the first step, from the pair's calibration."""

    costs: CostCurve | None = None
    prior_alpha: float | None = None
    topic_priors: Mapping[str, float] = field(default_factory=dict)
    confidence: Sequence[tuple[float, float]] = ()  # (kept, seen) per confidence bin
    ngram_alpha: float | None = None  # the n-gram drafter's α on the pair's replies (planner)


@dataclass
class _Topic:
    name: str
    model: AcceptanceModel
    visits: int = 0


class LearningPolicy(PolicyBase):
    """The costs, the draft model's acceptance per topic and its confidences, learnt step by
    step; saved and loaded whole (see the module's docstring)."""

    skip_first_shapes = False  # see OnlineCostModel's skip_first
    state_version = STATE_VERSION  # of what state() writes and load_state() reads

    def __init__(self, settings: AutoGammaSettings = AutoGammaSettings(),
                 seed: AutoGammaSeed | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        s = self.settings = settings
        seed = seed or AutoGammaSeed()
        self.clock = clock
        self.costs = OnlineCostModel(s.cost_half_life, skip_first=self.skip_first_shapes)
        self.seeded = seed.costs is not None  # costs known: no warm-up
        if seed.costs is not None:
            self.costs.seed(seed.costs)
        self.topic_priors = dict(seed.topic_priors)
        alpha0 = seed.prior_alpha if seed.prior_alpha is not None else s.prior_alpha
        self.overall = self._model(alpha0, weight=4.0)  # every topic: the prior of a new one
        self.topics: dict[str, _Topic] = {}
        self.confidence = ConfidenceBins()
        self.confidence.seed(seed.confidence)
        self.next_confidence = ConfidenceBins()  # P(next token kept | this token's top-1)
        self.detector = PageHinkley()
        self.fence = FenceTracker()
        self.rng = np.random.default_rng(s.seed)
        self.turn_topic = "chat"
        self.current = self._topic("chat")
        self._pending: str | None = None  # a topic switch to apply after the step's observe
        self._warmup_left = 0 if self.seeded else len(s.warmup)
        self._t_prev: float | None = None
        self._step_s = 0.0  # draft + verify time of the last observed step
        self._alphas: list[float] = []
        self._mean = 0.5
        self._rate = 0.0  # R*: the best expected tokens per second
        self._realized = [0.0, 0.0]  # decayed Σ tokens, Σ modelled seconds of recent steps
        self._survive = 1.0
        self._tops: list[float] = []
        self.planned = 0  # γ* under the posterior mean (no exploration): where it settles
        self.changes = 0  # changes the detector signalled
        self.label = "auto · warm-up" if self._warmup_left else "auto · chat"

    # ------------------------------------------------------------------------------ topics

    def _model(self, alpha: float, weight: float = 6.0) -> AcceptanceModel:
        s = self.settings
        return AcceptanceModel(s.gamma_max, alpha, prior_weight=weight,
                               slow_half_life=s.slow_half_life,
                               fast_half_life=s.fast_half_life)

    def _topic(self, name: str) -> _Topic:
        t = self.topics.get(name)
        # A topic not observed yet takes its prior now, from all that was seen so far: the one
        # made before the first step would otherwise keep the uninformed starting guess.
        if t is None or t.model.steps == 0:
            prior = self.topic_priors.get(name, self.overall.alpha())
            t = self.topics[name] = _Topic(name, self._model(prior), t.visits if t else 0)
        return t

    def _switch(self, name: str) -> None:
        if not self.settings.topics:
            name = "chat"
        self.current = self._topic(name)
        self.current.visits += 1
        self.detector.reset(self.current.model.alpha(), weight=10.0)

    # --------------------------------------------------------------------------- the hooks

    def begin(self, prompt_text: str) -> None:
        self.turn_topic = guess_topic(prompt_text) if self.settings.topics else "chat"
        self.fence.reset()
        self._pending = None
        self._t_prev = None  # the prompt's processing is not a step's overhead
        self._switch(self.turn_topic)

    def _step_starts(self) -> None:
        """A step is about to be chosen: the time since the last one, less its draft and
        verify time, is the loop's overhead."""
        now = self.clock()
        if self._t_prev is not None and self._step_s > 0:
            self.costs.add_overhead(now - self._t_prev - self._step_s)
        self._t_prev = now
        self._step_s = 0.0
        self._survive = 1.0
        self._tops = []

    def confident(self) -> bool:
        return self.confidence.total >= self.settings.confidence_after

    def keep_drafting(self, drafted: int, top_prob: Callable[[], float]) -> bool:
        s = self.settings
        if not s.early_stop or self._warmup_left or not self._alphas:
            return True
        top = top_prob()
        self._tops.append(top)
        if not self.confident() or drafted >= s.gamma_max:
            return True
        alphas = self._alphas
        self._survive *= self.confidence.p_keep(top, alphas[drafted - 1])
        # Worth going on if drafting up to some later length L adds tokens faster than R*:
        # s·Σ_{k ≤ L} Π α (the run must survive each) against (L − drafted)·(t_d + b).
        _, b = self.costs.line()
        rate = self._rate
        if s.realized_rate and self._realized[1] > 0:
            rate = max(rate, self._realized[0] / self._realized[1])
        per_token = rate * (self.costs.t_draft + b)
        run, gain = self._survive, 0.0
        future = [self._mean] * (len(alphas) - drafted) if s.pooled_future else alphas[drafted:]
        if s.next_bins and future:
            future[0] = self.next_confidence.p_keep(top, future[0])
        for extra, a in enumerate(future, 1):
            run *= a
            gain += run
            if gain > per_token * extra:
                return True
        return False

    def committed(self, text: str) -> None:
        if self.settings.topics and self.fence.feed(text):
            self._pending = CODE if self.fence.inside else self.turn_topic

    def _after_observe(self) -> None:
        if self._pending is not None:
            if self._pending != self.current.name:
                self._switch(self._pending)
            self._pending = None

    def warmup_gamma(self) -> int:
        """The γ of the warm-up's next step (while ``warming_up``)."""
        s = self.settings
        return s.warmup[len(s.warmup) - self._warmup_left]

    @property
    def warming_up(self) -> bool:
        """Steps of the warm-up are left (neither a calibration nor a saved state gave costs)."""
        return self._warmup_left > 0

    def observe_outcomes(self, outcomes: Sequence[float]) -> None:
        """The draft model's outcomes per depth from a step that is not its chain (a tree's
        first-ranked children): its α, this topic's and overall."""
        self.current.model.observe(outcomes)
        self.overall.observe(outcomes)

    def learn_step(self, step: StepEvent) -> None:
        """A step of the draft model's chain: its acceptance, confidences and realised rate."""
        lam = self.overall.lam_slow
        cost = self.costs.step_cost(step.gamma)  # modelled, not measured: no timing noise
        self._realized = [lam * self._realized[0] + step.committed,
                          lam * self._realized[1] + cost]
        outcomes = step_outcomes(step)
        model = self.current.model
        expected = model.position_alphas()  # what the controller believed before this step
        model.observe(outcomes)
        self.overall.observe(outcomes)
        for top, kept in zip(self._tops, outcomes, strict=False):
            self.confidence.add(top, kept)
        for top, kept in zip(self._tops, outcomes[1:], strict=False):
            self.next_confidence.add(top, kept)
        if self.settings.detect_changes:
            for x, ref in zip(outcomes, expected, strict=False):
                if self.detector.update(x, ref):
                    model.adopt_fast()
                    self.changes += 1

    def reseed(self, seed: AutoGammaSeed) -> None:
        """Take a calibration that ended while this controller was in use (the app calibrates
        in the background): its costs join those the steps measured and end the warm-up, its
        α priors stand where nothing was observed yet. What the steps taught stays."""
        if seed.costs is not None:
            self.costs.seed(seed.costs)
            self.seeded = True
            self._warmup_left = 0
        self.topic_priors.update(seed.topic_priors)
        if self.overall.steps == 0 and seed.prior_alpha is not None:
            self.overall = self._model(seed.prior_alpha, weight=4.0)
        if self.confidence.total == 0:
            self.confidence.seed(seed.confidence)
        self.current = self._topic(self.current.name)  # unobserved: takes the new prior
        if self.label.endswith("warm-up"):
            self.label = f"auto · {self.current.name}"

    # ------------------------------------------------------------------------ persistence

    def state(self) -> dict[str, object]:
        """What the controller learnt (costs, acceptance per topic, confidences), JSON-able,
        for :meth:`load_state` in a later process."""
        return {"version": self.state_version, "kind": type(self).__name__,
                "costs": self.costs.state(), "overall": self.overall.state(),
                "topics": {n: {"model": t.model.state(), "visits": t.visits}
                           for n, t in self.topics.items() if t.model.steps},
                "confidence": self.confidence.state(),
                "next_confidence": self.next_confidence.state()}

    def learnt(self) -> int:
        """How much this controller learnt (what a saved state of it is worth): its steps."""
        return self.overall.steps

    def forecast(self) -> float | None:
        """The tok/s it expected of the reply it last planned: auto-γ forecasts none."""
        return None

    def _costs_usable(self, costs: OnlineCostModel) -> bool:
        """Whether a saved state's costs can replace the warm-up (auto-γ needs the draft's)."""
        return costs.ready

    def load_state(self, d: dict[str, object]) -> None:
        """Start from a saved :meth:`state` instead of the warm-up. All or nothing: a record
        that does not parse raises ValueError (TypeError, KeyError) and changes nothing."""
        if d.get("version") != self.state_version:
            raise ValueError(f"controller state version {d.get('version')!r}")
        costs = OnlineCostModel(self.settings.cost_half_life, skip_first=self.skip_first_shapes)
        costs.load_state(d["costs"])  # type: ignore[arg-type]
        overall = self._model(0.5, weight=4.0)
        overall.load_state(d["overall"])  # type: ignore[arg-type]
        topics: dict[str, _Topic] = {}
        for name, t in dict(d["topics"]).items():  # type: ignore[call-overload]
            m = self._model(0.5)
            m.load_state(t["model"])
            topics[str(name)] = _Topic(str(name), m, int(t["visits"]))
        conf, nxt = ConfidenceBins(), ConfidenceBins()
        conf.load_state(d["confidence"])  # type: ignore[arg-type]
        nxt.load_state(d["next_confidence"])  # type: ignore[arg-type]
        if not self._costs_usable(costs):
            raise ValueError("controller state without costs")
        self.costs, self.overall, self.confidence, self.next_confidence = costs, overall, conf, nxt
        self.topics.update(topics)
        self.seeded = True
        self._warmup_left = 0
        self.current = self._topic(self.current.name)
        self.label = f"auto · {self.current.name}"

    # ------------------------------------------------------------------------- reporting

    def describe(self) -> str:
        """A line for logs: the cost model and each topic's α."""
        topics = ", ".join(f"{t.name} α {t.model.alpha():.2f}" for t in self.topics.values())
        return f"{self.costs.describe()}; {topics}; γ* {self.planned}"
