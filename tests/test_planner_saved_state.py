"""What a planner learnt and saved stays learnt across specchat versions.

``fixtures/controllers-planner-2026-12.json`` is a controllers file as the store writes it
(``models.controller_store.save_state``), holding a ``Planner`` state written by the planner of
commit 5849fd4 — before the drafters declared how the planner treats them — after 160 steps
over the draft model, the n-gram lookup, a tree and a predicted output on a CPU-like curve. It
is a state of version 1: the banded lookup's estimates and the tree's rank counts at its top
level. Today's (version 2) keeps each arm's state apart, under the arm's name.
"""

from __future__ import annotations

import json
from pathlib import Path

from specchat.engine.policy.planner import Planner
from specchat.engine.policy.planner_settings import PlannerSettings
from specchat.models.controller_store import load_states

SAVED = Path(__file__).parent / "fixtures" / "controllers-planner-2026-12.json"


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
