"""What a planner learnt and saved stays learnt across specchat versions.

``fixtures/controllers-planner-2026-12.json`` is a controllers file as the store writes it
(``models.controller_store.save_state``), holding a ``Planner`` state written by the planner of
commit 5849fd4 — before the drafters declared how the planner treats them — after 160 steps
over the draft model, the n-gram lookup, a tree and a predicted output on a CPU-like curve.
"""

from __future__ import annotations

from pathlib import Path

from specchat.engine.policy.planner import Planner
from specchat.engine.policy.planner_settings import PlannerSettings
from specchat.models.controller_store import load_states

SAVED = Path(__file__).parent / "fixtures" / "controllers-planner-2026-12.json"


def test_a_state_saved_before_arms_loads_whole_and_plans_as_it_did() -> None:
    saved = load_states(SAVED)["Planner"]
    p = Planner(PlannerSettings(), clock=lambda: 0.0)
    p.load_state(saved)
    assert p.seeded and p.learnt() == 314  # its steps, lookups and timings, all kept
    assert p.state() == saved  # nothing dropped, nothing renamed
    p.begin("def g(y): return y")
    plan = p.next_plan(("model", "ngram", "tree", "prediction"))
    # What the planner of 5849fd4 chose from this state: the predicted output, on its prior.
    assert (plan.drafter, plan.parents, plan.reason) == ("prediction", (-1, 0), "prediction 2")
