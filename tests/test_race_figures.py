"""The race's figures beyond one speed-up: medians and spreads over repeated runs, the machine's
load, TTFT and decode speed apart, the "why" line from measured costs, and a greedy divergence
told as a near-tie within the measured batch rounding or as a bug."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from race_helpers import fixed_result, plain_timeline, spec_timeline

from specchat.engine.decode.events import StepEvent
from specchat.engine.decode.stats import expected_tokens
from specchat.engine.llama.machine_load import LoadWatch, MachineLoad, cpu_times
from specchat.race.noise import Spread, noise_note
from specchat.race.result import Divergence
from specchat.race.why import (
    Costs,
    alpha_needed,
    costs_from_race,
    explain,
    lookup_limit,
)

# The field notes' Qwen2.5-Coder 1.5B / 0.5B curve on 2 CPU cores (ms per target pass of n tokens).
QWEN_CPU = Costs(0.043, {1: 0.043, 2: 0.055, 3: 0.067, 4: 0.095, 5: 0.104, 6: 0.119, 8: 0.188},
                 0.043 * 0.59, "calibration")


def test_decode_speed_leaves_the_prompt_out() -> None:
    t = plain_timeline(per_token=0.1, ttft=0.5)  # 10 tokens: first at 0.5 s, last at 1.4 s
    assert t.ttft_s == pytest.approx(0.5)
    assert t.decode_s == pytest.approx(0.9)
    assert t.decode_tok_s == pytest.approx(9 / 0.9)
    assert t.tok_s < t.decode_tok_s  # the whole-run figure pays for the prompt


def test_medians_and_spreads_over_repeated_runs() -> None:
    base = fixed_result()
    plains = (plain_timeline(per_token=0.1), plain_timeline(per_token=0.2),
              plain_timeline(per_token=0.1))
    specs = (spec_timeline(step_s=0.15), spec_timeline(step_s=0.15), spec_timeline(step_s=0.6))
    r = replace(base, plain_runs=plains, spec_runs=specs)
    plain_speeds = sorted(p.tok_s for p in plains)
    assert r.spread(0, "tok_s").median == pytest.approx(plain_speeds[1])
    # The speed-up pairs each speculative run with the plain run of its round.
    rounds = sorted(s.tok_s / p.tok_s for p, s in zip(plains, specs, strict=True))
    assert r.speedup == pytest.approx(rounds[1])
    assert r.decode_speedup == pytest.approx(sorted(
        s.decode_tok_s / p.decode_tok_s for p, s in zip(plains, specs, strict=True))[1])
    assert r.spread(1, "tok_s").wide  # one slow speculative run: said, not hidden
    assert "runs of the same side differ by up to" in (r.noise or "")
    lines = r.summary_lines()
    assert "[3 runs: median (min–max)]" in lines[0] and lines[2].startswith("decode speedup ")


def test_a_busy_round_weighs_on_both_sides_of_the_speedup() -> None:
    # The machine was busy from round 2's plain run to round 3's (every run in it took twice
    # as long). Paired by round, the speed-up is round 1's (and round 2's); the sides' medians
    # apart set a slow plain run against a quiet speculative one and double it.
    plains = (plain_timeline(per_token=0.2), plain_timeline(per_token=0.4),
              plain_timeline(per_token=0.4))
    specs = (spec_timeline(step_s=0.2), spec_timeline(step_s=0.4), spec_timeline(step_s=0.2))
    r = replace(fixed_result(), plain_runs=plains, spec_runs=specs)
    apart = r.spread(1, "decode_tok_s").median / r.spread(0, "decode_tok_s").median
    assert r.decode_speedup == pytest.approx(specs[0].decode_tok_s / plains[0].decode_tok_s)
    assert apart > 1.5 * r.decode_speedup
    # Sides of different lengths (an older recording) fall back to the medians' ratio.
    odd = replace(r, spec_runs=specs[:2])
    assert odd.decode_speedup == pytest.approx(
        odd.spread(1, "decode_tok_s").median / odd.spread(0, "decode_tok_s").median)


def test_spread_text() -> None:
    assert Spread.of([2.0]).text() == "2.0"
    assert Spread.of([3.0, 1.0, 2.0]).text() == "2.0 (1.0–3.0)"
    with pytest.raises(ValueError):
        Spread.of([])


def test_load_and_steal_from_proc_stat(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 0 0 0 50 0 0\ncpu0 1 2 3\n")
    assert cpu_times(stat) is not None
    watch = LoadWatch(stat)
    stat.write_text("cpu  200 0 100 1500 0 0 0 200 0 0\n")  # 150 of 1000 new ticks stolen
    load = watch.done()
    assert load.steal == pytest.approx(150 / 1000)
    assert load.busy and "15% of CPU time stolen" in load.describe()
    note = noise_note(load, [Spread.of([1.0, 1.01])])
    assert note is not None and note.startswith("the machine was busy (")
    assert note.endswith("rerun when the machine is idle to trust the ratio")
    quiet = MachineLoad(cores=8, load_before=0.3, steal=0.0)
    assert not quiet.busy and noise_note(quiet, [Spread.of([1.0, 1.02])]) is None
    assert cpu_times(tmp_path / "missing") is None
    (tmp_path / "odd").write_text("intr 1 2 3\n")
    assert cpu_times(tmp_path / "odd") is None


def test_only_other_programs_cpu_time_makes_the_machine_busy(tmp_path: Path) -> None:
    """The race's own work (this process, all its threads) is not competition, however high
    the load average it left behind; other programs' CPU time over the timing is."""
    hz = os.sysconf("SC_CLK_TCK")
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 850 0 0 0 0 0 0\n")
    own = iter([10.0, 10.0 + 600 / hz])  # this process: 600 of the 1000 new ticks
    watch = LoadWatch(stat, own=lambda: next(own))
    stat.write_text("cpu  600 0 150 1250 0 0 0 0 0 0\n")  # 600 busy ticks, all of them ours
    mine = watch.done()
    assert mine.others == pytest.approx(0.0) and not mine.busy
    assert not MachineLoad(2, 3.4, 0.0, mine.others).busy  # a load average of our own making

    stat.write_text("cpu  100 0 50 850 0 0 0 0 0 0\n")
    own = iter([10.0, 10.0 + 400 / hz])
    watch = LoadWatch(stat, own=lambda: next(own))
    stat.write_text("cpu  600 0 150 1250 0 0 0 0 0 0\n")  # 200 of the 600 were someone else's
    theirs = watch.done()
    assert theirs.others == pytest.approx(0.2) and theirs.busy
    assert "other programs used 20% of" in theirs.describe()
    assert "load" not in theirs.describe()  # ours is in it: not a figure about the others


def test_why_line_from_the_measured_cpu_curve() -> None:
    line = explain(QWEN_CPU)
    assert line.startswith("on this CPU a 5-token check costs 2.4× one token and the draft "
                           "costs 59% of the target: ")
    assert "prompt lookup can, on text that repeats the conversation" in line
    assert line.endswith("[calibration]")
    n, x = max(((n, n * QWEN_CPU.t1 / t) for n, t in QWEN_CPU.verify.items()),
               key=lambda f: f[1])
    assert lookup_limit(QWEN_CPU) == (n, x) and n > 1 and x > 1
    assert f"its limit here, every guess right, is {x:.2f}× plain (a {n}-token check)" in line
    need = alpha_needed(QWEN_CPU, QWEN_CPU.draft)
    assert need is not None and 0.8 < need < 0.95  # only γ 1 breaks even, at high acceptance


def test_why_line_when_nothing_can_pay() -> None:
    flat_out = Costs(0.01, {1: 0.01, 2: 0.02, 3: 0.03, 5: 0.05}, 0.008, "this race")
    line = explain(flat_out)
    assert "the draft model cannot pay, even when every draft is accepted" in line
    assert "nor can prompt lookup: checking a token costs as much as making it" in line
    assert "its limit" not in line and lookup_limit(flat_out) is None
    gpu = Costs(0.02, {1: 0.02, 5: 0.021}, 0.002, "calibration")
    assert explain(gpu, "GPU").startswith("on this GPU a 5-token check costs 1.1× one token")
    assert "pays when over" in explain(gpu, "GPU")
    cheap = Costs(0.02, {1: 0.02, 2: 0.018, 5: 0.03}, 0.002, "this race")
    assert "the draft model pays even when few drafts are accepted" in explain(cheap)
    assert "over 0%" not in explain(cheap)


def test_costs_from_the_race_steps() -> None:
    steps = [StepEvent(4, 3, 0.02, 0.05, "draft"), StepEvent(4, 4, 0.02, 0.07, "draft"),
             StepEvent(4, 1, 0.02, 0.06, "draft"), StepEvent(2, 2, 0.0, 0.04, "ngram")]
    c = costs_from_race(0.03, steps)
    assert c is not None and c.verify == {5: 0.06, 3: 0.04, 1: 0.03}
    assert c.draft == pytest.approx(0.005) and c.source == "this race"
    assert costs_from_race(0.03, []) is None
    assert expected_tokens(1.0, 4) == 5 and expected_tokens(0.0, 4) == 1


def test_greedy_divergence_at_a_near_tie_is_not_a_bug() -> None:
    base = fixed_result(spec_ids=[0, 1, 2, 3, 99, 5, 6, 7, 8, 9])  # parts at token 4
    assert base.is_bug and "a bug" in base.verdict()  # not examined: a bug, as before
    tie = replace(base, divergence=Divergence(4, " the", " word", 0.071, 0.09, "calibration"))
    assert not tie.is_bug
    assert tie.verdict() == ("parted at a near-tie at token 4: ' the' vs ' word', margin 0.071 "
                             "logits, within this build's batch rounding (measured: up to 0.090) "
                             "— not a bug")
    far = replace(base, divergence=Divergence(4, " the", " word", 2.5, 0.09, "calibration"))
    assert far.is_bug and far.verdict().startswith("outputs differ at token 4 — a bug: ")
    unknown = replace(base, divergence=Divergence(4, " the", " word", 0.01, None))
    assert unknown.is_bug  # no measured bound: never excused


def test_the_planner_line_sets_realised_against_the_planners_forecast() -> None:
    base = fixed_result()
    assert base.planner_text() == ""  # no planner chose the steps: nothing to judge
    specs = tuple(replace(spec_timeline(step_s=s), predicted_tok_s=f)
                  for s, f in ((0.15, 10.0), (0.15, 20.0), (0.6, 10.0)))
    r = replace(base, spec_runs=specs)
    ratios = sorted(t.decode_tok_s / f for t, f in zip(specs, (10.0, 20.0, 10.0), strict=True))
    ratio, forecast = r.realised_vs_predicted or (0.0, 0.0)
    assert ratio == pytest.approx(ratios[1]) and forecast in (10.0, 20.0)
    assert any(line.startswith(f"planner: realised/predicted {ratio:.2f}")
               for line in r.summary_lines())


def test_a_busy_calibration_is_told_in_the_race_and_in_its_own_summary() -> None:
    from specchat.models.calibration import CalibrationResult, format_result

    busy = MachineLoad(cores=2, load_before=3.4, steal=0.0)
    note = noise_note(None, [Spread.of([1.0, 1.01])], calibration=busy)
    assert note is not None and "calibrated on a busy machine (load 3.4 on 2 cores" in note
    quiet = MachineLoad(cores=2, load_before=0.2, steal=0.0)
    assert noise_note(None, [Spread.of([1.0, 1.01])], calibration=quiet) is None

    def record(**load: object) -> CalibrationResult:
        return CalibrationResult(
            target="t.gguf", draft="d.gguf", alpha=0.7, positions=64, per_prompt=(),
            draft_s=0.02, verify_s=(0.04, 0.06), speedups=((1, 0.9),), gamma=0, speedup=0.9,
            verdict="plain", **load)  # type: ignore[arg-type]

    text = format_result(record(load=3.4, steal=0.0, cores=2))
    assert "measured while the machine was busy (load 3.4 on 2 cores" in text
    assert "busy" not in format_result(record(load=0.2, steal=0.0, cores=2))
    old = record()  # a record from before loads were kept: nothing is claimed either way
    assert old.machine_load is None and not old.busy
    again = CalibrationResult.from_json(record(load=3.4, steal=0.01, cores=2).to_json())
    assert again.busy and again.cores == 2  # an older record: judged by its load average
    ours = CalibrationResult.from_json(
        record(load=3.4, steal=0.0, cores=2, others=0.02).to_json())
    assert not ours.busy and "busy" not in format_result(ours)  # the load was our own
    theirs = record(load=0.1, steal=0.0, cores=2, others=0.4)
    assert theirs.busy and "other programs used 40% of 2 cores" in format_result(theirs)


def test_an_uncalibrated_pairs_planner_race_says_what_calibration_would_give_it() -> None:
    base = fixed_result()
    specs = tuple(replace(spec_timeline(step_s=0.15), predicted_tok_s=10.0) for _ in range(3))
    planned = replace(base, spec_runs=specs, pair="qwen-coder")
    assert planned.tip is None  # not known whether the pair is calibrated: nothing claimed
    assert replace(planned, calibrated=True).tip is None
    bare = replace(planned, calibrated=False)
    assert bare.tip is not None and "`specchat models calibrate qwen-coder`" in bare.tip
    assert f"tip: {bare.tip}" in bare.summary_lines()
    adhoc = replace(bare, pair="big.gguf + small.gguf")
    assert "`specchat models calibrate TARGET DRAFT`" in (adhoc.tip or "")
    # No planner chose the steps (a fixed γ): its knowledge is not the question.
    assert replace(base, calibrated=False).tip is None
