"""The bench's planner table: the predicted ideal from measured curves, and the rows it joins."""

from __future__ import annotations

import pytest

from specchat.bench.planner_table import ideal_rate, planner_rows
from specchat.engine.policy.costs import CostCurve

CURVE = CostCurve(0.002, tuple(0.010 + 0.001 * n for n in range(1, 33)))


def _row(mode: str, gamma: int | str | None, tok_s: float, acc: list[float | None]) -> dict:
    return {"temperature": 0.0, "category": "coding", "mode": mode, "gamma": gamma,
            "tok_s": tok_s, "tau": 1.5, "alpha": 0.7, "drafted": 10,
            "acceptance_by_position": acc}


def test_ideal_is_plain_when_nothing_pays_and_the_best_chain_by_hand_otherwise() -> None:
    plain_tps = 1 / 0.022  # the machine runs twice as slow as when the curve (T(1) 11 ms) was timed
    rate, g = ideal_rate(plain_tps, CURVE, [0.0, 0.0])
    assert (rate, g) == (pytest.approx(plain_tps), 0)
    rate, g = ideal_rate(plain_tps, CURVE, [0.9, 0.9, 0.9])
    by_hand = {k: sum(0.9 ** i for i in range(k + 1)) / (2 * (k * 0.002 + CURVE.verify_s[k]))
               for k in (1, 2, 3)}
    assert g == max(by_hand, key=lambda k: by_hand[k]) and rate == pytest.approx(by_hand[g])


def test_rows_join_plain_the_best_fixed_chain_and_the_planner() -> None:
    rows = [_row("plain", None, 80.0, []), _row("draft", 1, 90.0, [0.8]),
            _row("draft", 3, 95.0, [0.8, 0.7, None]), _row("draft", "plan", 92.0, [0.8])]
    (r,) = planner_rows(rows, CURVE)
    assert (r["chain_gamma"], r["chain_tok_s"], r["plan_tok_s"]) == (3, 95.0, 92.0)
    assert r["plan_vs_plain"] == pytest.approx(92 / 80)
    ideal, _ = ideal_rate(80.0, CURVE, [0.8, 0.7, 0.7])  # an unreached position takes the last
    assert r["ideal_tok_s"] == pytest.approx(ideal)
    assert planner_rows(rows[:3], CURVE) == []  # no planner run: no row
