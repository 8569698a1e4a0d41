"""When nothing pays: the planner's plain steps, held, and its probes
(:mod:`specchat.engine.policy.planner`).

Scoring costs a few ms of Python, a tenth of a small model's step, so a plain answer is *held*:
the next ``REPLAN_EVERY`` − 1 plain steps take it unscored (``REPLAN_FAR`` − 1 when the best
speculative step rates below ``NEAR_PLAIN`` × plain: plain steps then teach little). A held
answer lapses as soon as something could have changed it: other drafters available, another
topic, a banded lookup's run grown (it entered a repeated passage), or a probe due; none is
held while a lookup is hot.

Every ``probe_every`` plain steps a *probe* asks whether drafting has started to pay: the first
warm-up chain's arm says which (a lookup costs nearly nothing), else the least tried of the arms
probed in turn — not one whose free guesses are scored anyway (a probe would buy at a check's
price what they already say), nor one that would first read a long prompt. A probe that found
nothing doubles the wait for the next, up to ``probe_backoff`` × ``probe_every``.

:class:`PlainRun` keeps that bookkeeping; the planner asks it only when scoring found no
speculative step worth its margin (and, before scoring, whether a held answer stands).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from specchat.engine.decode.plan import Plan, plain
from specchat.engine.policy.learning import AutoGammaSettings
from specchat.engine.policy.planner_arms import ArmRecord, Scene
from specchat.engine.policy.planner_records import Records
from specchat.engine.policy.planner_settings import Candidate, PlannerSettings
from specchat.engine.policy.planner_unscored import Step

REPLAN_EVERY = 4  # after a plain answer, score again every this many plain steps
# ... or every REPLAN_FAR when the best speculative step rates below NEAR_PLAIN × plain: plain
# steps then teach little, and scoring costs a sizeable share of a small model's plain step.
NEAR_PLAIN = 0.85
REPLAN_FAR = 16


class Probing(Scene, Protocol):
    """What the plain run reads of the planner, beyond what an arm's record reads."""

    records: Records

    def record(self, name: str) -> ArmRecord: ...


@dataclass(frozen=True)
class Held:
    """A plain answer held: plain steps it still answers, what it was chosen under (the
    drafters available, the topic, each banded lookup's band) and its predicted step."""

    left: int
    available: tuple[str, ...]
    topic: int
    bands: tuple[int, ...]
    step: tuple[float, float]  # a plain step's (tokens, seconds) when it was chosen


class PlainRun:
    """The run of plain steps, the plain answer held and the wait for the next probe (see the
    module's docstring)."""

    def __init__(self, s: AutoGammaSettings, ps: PlannerSettings) -> None:
        self.s, self.ps = s, ps
        self.run = 0  # plain steps since the last speculative (or unscored trying) step
        self.wait = s.probe_every  # plain steps before the next probe
        self.probed = ""  # the drafter of the last speculative step when it was a probe
        self.held: Held | None = None

    def keep(self, available: tuple[str, ...], topic: int, bands: tuple[int, ...]
             ) -> tuple[float, float] | None:
        """The held answer's predicted plain step if it answers this one (nothing changed,
        no probe due); None: score. Asked once per step, before scoring."""
        h, self.held = self.held, None
        if h is not None and h.left > 0 and h.available == available and h.topic == topic \
                and all(b >= now for b, now in zip(h.bands, bands, strict=True)) \
                and self.run + 1 < self.wait:
            self.held = Held(h.left - 1, h.available, h.topic, h.bands, h.step)
            self.run += 1
            return h.step
        return None

    def speculated(self) -> None:
        """Scoring chose a speculative step: the run ends and the probe's wait starts over."""
        self.run, self.probed, self.wait = 0, "", self.s.probe_every

    def plain_or_probe(self, p: Probing, step: Step, topic: int, base: Candidate,
                       cands: Sequence[Candidate], sampled_best: float,
                       reason: Callable[[], str]) -> tuple[Plan, tuple[float, float] | None]:
        """Nothing pays (``base``: plain's candidate; ``cands``: the candidates scored,
        ``sampled_best`` the best rate on exploration's sampled estimates): a plain step, held
        for the next few, or a probe. The plan, and the predicted step it is held with (None:
        the planner predicts it); ``reason()`` says why plain."""
        s, ps = self.s, self.ps
        if self.probed and p.record(self.probed).backs_off:
            # The probe found nothing: wait longer before the next one.
            self.wait = min(self.wait * 2, s.probe_every * ps.probe_backoff)
        self.probed = ""
        self.run += 1
        others = [r for r in map(p.record, step.available) if r.probe_by_tries]
        if self.run < self.wait or not (step.chains or others):
            best = max([c.rate for c in cands] + [sampled_best])
            every = 1 if any(r.hot for r in p.records.values()) else REPLAN_EVERY \
                if best >= NEAR_PLAIN * base.rate else REPLAN_FAR
            held = (base.expected, base.seconds)
            self.held = Held(every - 1, step.available, topic, p.records.bands(), held)
            return plain(reason()), held
        lead = min(step.chains, key=lambda n: p.record(n).probe_rank, default=None)
        probe = p.record(lead).probe(p, base) if lead is not None else None
        if probe is None:
            tries = sorted((r.tried, r.name) for r in others if r.name not in p.guessed
                           and p.lag(r.name) <= ps.warmup_max_lag and r.may_probe(p))
            probe = tries[0][1] if tries else ""
        self.run = 0
        if not probe:
            return plain(reason()), None
        self.probed = probe
        p.record(probe).tried += 1
        return p.record(probe).probe_plan("probe"), None
