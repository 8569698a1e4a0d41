"""What a planner learnt and saved stays learnt across specchat versions.

``fixtures/controllers-planner-2026-12.json`` is a controllers file as the store writes it
(``models.controller_store.save_state``), holding a ``Planner`` state written by the planner of
commit 5849fd4 — before the drafters declared how the planner treats them — after 160 steps
over the draft model, the n-gram lookup, a tree and a predicted output on a CPU-like curve. It
is a state of version 1: the banded lookup's estimates and the tree's rank counts at its top
level. Today's (version 2) keeps each arm's state apart, under the arm's name.

``fixtures/controllers-planner-v2-2026-12.json`` holds a version-2 state written by the planner
of commit 6fb414b — before a self-planning drafter's measured steps were saved — from the first
fixture's state and 40 steps with a Lookahead-like drafter beside the n-gram lookup (its steps
as :func:`lookahead_steps` below takes them): its ``arms`` have no entry for that drafter.
"""

from __future__ import annotations

import json
from pathlib import Path

from specchat.engine.decode.events import StepEvent
from specchat.engine.decode.plan import Plan
from specchat.engine.policy.planner import Planner
from specchat.engine.policy.planner_own import OwnRecord
from specchat.engine.policy.planner_settings import PlannerSettings
from specchat.models.controller_store import load_states

SAVED = Path(__file__).parent / "fixtures" / "controllers-planner-2026-12.json"
SAVED_V2 = Path(__file__).parent / "fixtures" / "controllers-planner-v2-2026-12.json"
WINDOW = Plan("lookahead", (-1, 0, -1, 2), "lookahead W2 N3 G2")  # a self-planning drafter's step


def as_version_1(d: dict[str, object]) -> dict[str, object]:
    """A version-2 state of the n-gram lookup and the tree laid out as version 1 was."""
    arms: dict[str, dict[str, object]] = d["arms"]  # type: ignore[assignment]
    ngram = arms["ngram"]
    out = {k: v for k, v in d.items() if k != "arms"}
    out.update(version=1, ranks=arms["tree"], ngram=ngram["hot"], ngram_cold=ngram["cold"],
               ngram_long=ngram["long"], ngram_cost=ngram["cost"])
    return out


def test_a_state_saved_before_arms_loads_whole_and_plans_as_it_did() -> None:
    saved = load_states(SAVED)["Planner"]
    assert saved["version"] == 1 and "arms" not in saved
    p = Planner(PlannerSettings(), clock=lambda: 0.0)
    p.load_state(saved)
    assert p.seeded and p.learnt() == 314  # its steps, lookups and timings, all kept
    now = json.loads(json.dumps(p.state()))
    assert now["version"] == 2 and set(now["arms"]) == {"ngram", "tree"}
    assert as_version_1(now) == saved  # nothing dropped, nothing changed: only moved
    again = Planner(PlannerSettings(), clock=lambda: 0.0)
    again.load_state(now)
    assert again.state() == now and again.learnt() == 314
    for q in (p, again):
        q.begin("def g(y): return y")
        plan = q.next_plan(("model", "ngram", "tree", "prediction"))
        # What the planner of 5849fd4 chose from this state: the predicted output, on its prior.
        assert (plan.drafter, plan.parents, plan.reason) == ("prediction", (-1, 0), "prediction 2")


def lookahead_steps(p: Planner, n: int) -> list[Plan]:
    """``n`` steps with a self-planning drafter (3 tokens in 12 ms) beside the n-gram lookup;
    the plans."""
    p.own_plans({"lookahead": lambda: WINDOW})
    p.begin("def f(x): return x")
    plans = []
    for _ in range(n):
        plan = p.next_plan(("lookahead", "ngram"))
        plans.append(plan)
        la = plan.drafter == "lookahead"
        p.observe(StepEvent(4, 2, 0.0, 0.012, "lookahead", committed=3, plan_size=4, kind="tree",
                            depth=2) if la else StepEvent(0, 0, 0.0, 0.010, "none", committed=1))
    return plans


def test_a_self_planning_drafters_measured_steps_are_saved_and_a_v2_state_still_loads() -> None:
    old = load_states(SAVED_V2)["Planner"]
    assert old["version"] == 2 and "lookahead" not in old["arms"]
    p = Planner(PlannerSettings(), clock=lambda: 0.0)
    p.load_state(old)
    assert p.state() == old  # nothing dropped, nothing changed
    # Nothing saved of it: its first steps measure it, as they did before.
    assert all("measuring" in x.reason for x in lookahead_steps(p, 3))
    lookahead_steps(p, 20)
    now = json.loads(json.dumps(p.state()))
    assert now["version"] == 2 and set(now["arms"]["lookahead"]) == {"tokens", "seconds", "count"}
    assert {k: v for k, v in now["arms"].items() if k != "lookahead"}.keys() == old["arms"].keys()
    again = Planner(PlannerSettings(), clock=lambda: 0.0)
    again.load_state(now)
    assert again.state() == now
    was, got = p.records["lookahead"], again.records["lookahead"]
    assert isinstance(was, OwnRecord) and isinstance(got, OwnRecord)
    assert got.measured.per_step() == was.measured.per_step() is not None
    # Measured in an earlier process: scored at once, and its 3 tokens in 12 ms beat plain.
    first = lookahead_steps(again, 1)[0]
    assert first.drafter == "lookahead" and "measuring" not in first.reason
    assert "× plain" in first.reason
