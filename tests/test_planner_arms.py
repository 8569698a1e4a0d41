"""The planner scores arms, not drafters it knows by name: each drafter's module declares its
arm (engine/decode/arms.py), several drafters may declare the same kind, and what the planner
learns of each is kept, saved and loaded under that drafter's name."""

from __future__ import annotations

import json
from pathlib import Path

from specchat.engine.decode import arms, registry
from specchat.engine.decode.events import StepEvent
from specchat.engine.policy.auto_gamma import AutoGammaSeed
from specchat.engine.policy.costs import CostCurve
from specchat.engine.policy.planner import Planner
from specchat.engine.policy.planner_settings import PlannerSettings
from specchat.models.controller_store import load_states

FLAT = CostCurve(0.0015, tuple(0.010 + 0.00005 * n for n in range(1, 33)))
SAVED = Path(__file__).parent / "fixtures" / "controllers-planner-2026-12.json"
# The registry's arms, and a second banded lookup beside the n-gram one (a suffix cache, say).
TWO_LOOKUPS = {**registry.arms(), "suffix": arms.banded_lookup(prior_alpha=0.3, cost_prior=1e-4)}


def test_the_built_in_drafters_declare_their_arms() -> None:
    got = registry.arms()
    assert got["model"].kind is arms.ArmKind.DRAFT_CHAIN
    assert got["tree"].kind is arms.ArmKind.DRAFT_TREE
    assert got["ngram"].kind is arms.ArmKind.LOOKUP and got["ngram"].banded
    assert got["prediction"].kind is arms.ArmKind.LOOKUP and not got["prediction"].banded
    assert {got[n].kind for n in ("layerskip", "kangaroo", "mtp")} == {arms.ArmKind.CHAIN}


def test_two_lookups_of_one_kind_learn_apart() -> None:
    p = Planner(PlannerSettings(), AutoGammaSeed(FLAT, 0.7), clock=lambda: 0.0, arms=TWO_LOOKUPS)
    assert set(p.lookups) == {"ngram", "suffix"}
    assert p.lookups["suffix"].alpha.alpha() < p.lookups["ngram"].alpha.alpha()  # its prior
    p.begin("the cat sat")
    for _ in range(20):  # the suffix lookup's steps: every token right
        p.next_plan(("ngram", "suffix"))
        p.observe(StepEvent(4, 4, 0.0002, 0.0102, "suffix", committed=5))
    suffix, ngram = p.lookups["suffix"], p.lookups["ngram"]
    assert suffix.alpha.alpha() > 0.8 and suffix.run == 80 and suffix.t < 1e-4
    assert ngram.steps() == 0 and ngram.run == 0  # the n-gram lookup learnt nothing of them
    assert p.next_plan(("ngram", "suffix")).drafter == "suffix"


def test_each_lookups_state_is_saved_under_its_name_and_old_states_still_load() -> None:
    p = Planner(PlannerSettings(), AutoGammaSeed(FLAT, 0.7), clock=lambda: 0.0, arms=TWO_LOOKUPS)
    p.begin("the cat sat")
    for _ in range(10):
        p.next_plan(("suffix",))
        p.observe(StepEvent(3, 3, 0.0003, 0.0102, "suffix", committed=4))
    d = json.loads(json.dumps(p.state()))
    assert {"suffix", "suffix_cold", "suffix_long", "suffix_cost"} <= set(d)
    assert {"ngram", "ngram_cold", "ngram_long", "ngram_cost"} <= set(d)  # as states always had
    q = Planner(PlannerSettings(), clock=lambda: 0.0, arms=TWO_LOOKUPS)
    q.load_state(d)
    assert q.state() == d and q.lookups["suffix"].steps() == p.lookups["suffix"].steps() > 0
    # A state saved before the suffix lookup existed loads whole; the new lookup keeps its prior.
    old = load_states(SAVED)["Planner"]
    r = Planner(PlannerSettings(), clock=lambda: 0.0, arms=TWO_LOOKUPS)
    r.load_state(old)
    assert r.learnt() == 314 and r.lookups["suffix"].steps() == 0
    assert r.lookups["suffix"].alpha.alpha() == 0.3
    assert {k: v for k, v in r.state().items() if not k.startswith("suffix")} == old
