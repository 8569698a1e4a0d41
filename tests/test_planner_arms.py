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
from specchat.engine.policy.planner_arms import ChainRecord
from specchat.engine.policy.planner_banded import BandedLookup
from specchat.engine.policy.planner_settings import PlannerSettings
from specchat.models.controller_store import load_states
from tests.test_planner_saved_state import as_version_1

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
    assert {got[n].kind for n in ("lookahead", "medusa")} == {arms.ArmKind.OWN_STEP}


def test_two_lookups_of_one_kind_learn_apart() -> None:
    p = Planner(PlannerSettings(), AutoGammaSeed(FLAT, 0.7), clock=lambda: 0.0, arms=TWO_LOOKUPS)
    assert {n for n, r in p.records.items() if isinstance(r, BandedLookup)} == {"ngram", "suffix"}
    assert p.records["suffix"].alpha.alpha() < p.records["ngram"].alpha.alpha()  # its prior
    p.begin("the cat sat")
    for _ in range(20):  # the suffix lookup's steps: every token right
        p.next_plan(("ngram", "suffix"))
        p.observe(StepEvent(4, 4, 0.0002, 0.0102, "suffix", committed=5))
    suffix, ngram = p.records["suffix"], p.records["ngram"]
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
    assert set(d["arms"]["suffix"]) == set(d["arms"]["ngram"]) == {"hot", "cold", "long", "cost"}
    q = Planner(PlannerSettings(), clock=lambda: 0.0, arms=TWO_LOOKUPS)
    q.load_state(d)
    assert q.state() == d and q.records["suffix"].steps() == p.records["suffix"].steps() > 0
    # A state saved before the suffix lookup existed loads whole; the new lookup keeps its prior.
    old = load_states(SAVED)["Planner"]
    r = Planner(PlannerSettings(), clock=lambda: 0.0, arms=TWO_LOOKUPS)
    r.load_state(old)
    assert r.learnt() == 314 and r.records["suffix"].steps() == 0
    assert r.records["suffix"].alpha.alpha() == 0.3
    now = r.state()
    fresh = Planner(PlannerSettings(), clock=lambda: 0.0, arms=TWO_LOOKUPS).state()
    assert now["arms"].pop("suffix") == fresh["arms"]["suffix"]  # type: ignore[attr-defined]
    assert as_version_1(now) == old


def test_a_lookups_and_a_chain_drafters_estimates_are_saved_and_plan_as_before() -> None:
    """What the planner learnt of a lookup (a predicted output) and of a chain drafter (the
    layer-skip self-draft) is saved under "arms", by name, and loads back: a chain drafter timed
    in an earlier process is scored at once, where a fresh planner first probes it."""
    p = Planner(PlannerSettings(), AutoGammaSeed(FLAT, 0.7), clock=lambda: 0.0)
    p.begin("the cat sat")
    for _ in range(6):
        p.observe(StepEvent(3, 3, 0.003, 0.0102, "layerskip", committed=4))
        p.observe(StepEvent(4, 1, 0.0002, 0.0102, "prediction", committed=2))
    d = json.loads(json.dumps(p.state()))
    # (The banded lookup's and the tree's are always saved; an arm that learnt nothing is not.)
    assert set(d["arms"]) == {"ngram", "tree", "layerskip", "prediction"}
    q = Planner(PlannerSettings(), clock=lambda: 0.0)
    q.load_state(d)
    assert q.state() == d
    skip, was = q.records["layerskip"], p.records["layerskip"]
    assert isinstance(skip, ChainRecord) and isinstance(was, ChainRecord)
    assert skip.model.alpha() == was.model.alpha() > 0.8 and skip.t(0.01) == was.t(0.01) == 0.001
    assert q.records["prediction"].learnt() == 6
    fresh = Planner(PlannerSettings(), AutoGammaSeed(FLAT, 0.7), clock=lambda: 0.0)
    fresh.begin("the dog ran")
    q.begin("the dog ran")
    assert "probe" in fresh.next_plan(("layerskip",)).reason
    plan = q.next_plan(("layerskip",))
    assert plan.drafter == "layerskip" and plan.reason == f"layerskip {plan.size}"
