"""The steps the planner takes before scoring decides (:mod:`specchat.engine.policy.planner`),
each phase in turn answering a step or passing it on:

- the reply's first token, plain when a drafter would first have to read the prompt: the time
  to first token is then plain decoding's, and the read is paid (if at all) once the planner has
  chosen to draft;
- the warm-up's unscored chains, which time the first checks (each arm says whether it may run
  one now and how long: :mod:`specchat.engine.policy.planner_arms`);
- a plain step when no drafter can propose;
- the first steps of a drafter that plans its own step, which measure what it yields here;
  a short probe of a chain drafter never timed here;
- before the verify curve's slope is known (one batch size timed), a step that times it rather
  than a guess: a lookup's check of two (a plain step where it finds nothing, so a reply whose
  warm-up lookups found nothing still leaves plain), else a plain step (which times T(1)).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from specchat.engine.decode.plan import NONE, Plan, chain, plain
from specchat.engine.policy.planner_arms import ArmRecord, Scene


class Unscoring(Scene, Protocol):
    """What the phases read of the planner, beyond what an arm's record reads."""

    def record(self, name: str) -> ArmRecord: ...

    def warmup_gamma(self) -> int: ...


@dataclass
class Step:
    """What the phases of one step's choice share."""

    available: tuple[str, ...]  # the drafters that can propose this step
    reply: int | None  # tokens this reply has committed (None: not driven reply by reply)
    chains: list[str] = field(default_factory=list)  # the chains a warm-up may run, in order
    warm: list[str] = field(default_factory=list)  # those it may run now


@dataclass(frozen=True)
class Unscored:
    """A phase's step: its plan, whether it is predicted like a scored one (a plain step), the
    warm-up's γ (None: not a warm-up step), and the arm it tries (its tries counted)."""

    plan: Plan
    scored: bool = False
    warm: int | None = None
    tries: ArmRecord | None = None


def unscored(p: Unscoring, step: Step) -> Unscored | None:
    """The step of the first phase that decides; None: scoring decides."""
    return (_first_token(p, step) or _warm_up(p, step) or _no_drafter(step)
            or _measure(p, step) or _time_costs(p, step))


def _first_token(p: Unscoring, step: Step) -> Unscored | None:
    if step.reply == 0 and any(p.record(n).lags_behind(p) for n in step.available):
        step.available = tuple(n for n in step.available if not p.record(n).lags_behind(p))
        if not step.available:
            return Unscored(plain("plain: the first token before the draft reads the prompt"),
                            scored=True)
    return None


def _warm_up(p: Unscoring, step: Step) -> Unscored | None:
    chains = [n for n in step.available if p.record(n).warm_order is not None]
    step.chains = sorted(chains, key=lambda n: p.record(n).warm_order or 0)
    step.warm = [n for n in step.chains if p.record(n).may_warm(p)]
    first = p.record(step.warm[0]) if step.warm else None
    if p.warming_up and first is not None and (
            step.reply is None or step.reply >= p.plan_settings.warmup_after or first.warms_early):
        gamma = first.warm_gamma(min(p.warmup_gamma(), p.settings.gamma_max))
        return Unscored(chain(first.name, gamma, "warm-up"), warm=gamma)
    return None


def _no_drafter(step: Step) -> Unscored | None:
    return None if step.available else Unscored(plain("plain: no drafter can propose here"),
                                                scored=True)


def _measure(p: Unscoring, step: Step) -> Unscored | None:
    for r in map(p.record, step.available):
        if r.measuring and r.may_probe(p):
            own = r.probe_plan("measuring")
            if own.drafter != NONE:
                return Unscored(own, tries=r)
    unseen = [r for r in map(p.record, step.available) if r.probed_unseen and not r.tried
              and p.lag(r.name) <= p.plan_settings.warmup_max_lag]
    return Unscored(unseen[0].probe_plan("probe"), tries=unseen[0]) if unseen else None


def _time_costs(p: Unscoring, step: Step) -> Unscored | None:
    if p.seeded or p.costs.ratio is not None:
        return None
    if sum(1 for w in p.costs.table.weight if w > 0) >= 2:
        p.costs.set_shape(*p.costs.line())  # warm-up over: anchor the slope's shape
        return None
    ranks = [(k, n) for n in step.available if (k := p.record(n).check_rank()) is not None]
    if ranks:
        return Unscored(chain(min(ranks, key=lambda x: x[0])[1], 2, "timing a check"))
    if p.warming_up and step.warm and step.reply is not None:
        # The stats bar's words while the warm-up waits for a longer reply.
        return Unscored(plain(f"plain: drafting tried from token "
                              f"{p.plan_settings.warmup_after}"))
    return Unscored(plain("plain: timing a target step"))
