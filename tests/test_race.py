"""The race engine: recording, the identical-output check, the replay scheduler, the CLI."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from race_helpers import ChangeOneToken, fixed_result, plain_timeline, spec_timeline
from ui_helpers import tiny_runtime

from specchat.cli.main import main
from specchat.engine.decode.events import GenerationStats, TokenEvent, TokenOrigin
from specchat.engine.decode.sampling import SamplerSettings
from specchat.errors import SpecchatError
from specchat.paths import AppPaths
from specchat.race.prompts import KINDS, builtin_prompts, prompt_from
from specchat.race.replay import LEFT, RIGHT, ReplayCursor, play, schedule
from specchat.race.result import first_difference, gamma_runs, gamma_trace_text
from specchat.race.runner import RaceSetup, run_race
from specchat.race.text_chart import bar, cumulative_chart
from specchat.race.timeline import RaceTimeline, TimedEvent

GREEDY = SamplerSettings(temperature=0, seed=1, max_tokens=20)


# ------------------------------------------------------------------------- pure figures


def test_first_difference() -> None:
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2  # one stopped early
    assert first_difference([], []) is None


def test_gamma_trace() -> None:
    assert gamma_runs([4, 4, 4, 2, 4]) == [(4, 3), (2, 1), (4, 1)]
    assert gamma_trace_text([4, 4, 6]) == "4×2 → 6×1"
    assert gamma_trace_text([]) == "–"
    assert gamma_trace_text([1, 2, 1, 2], limit=2) == "1×1 → 2×1 → … (+2 changes)"


def test_timeline_figures() -> None:
    run = plain_timeline(per_token=0.1, ttft=0.2)
    assert run.ttft_s == pytest.approx(0.2)
    assert run.elapsed_s == pytest.approx(1.2)
    assert run.tok_s == pytest.approx(10 / 1.2)
    assert run.tokens_by(0.19) == 0 and run.tokens_by(0.2) == 1 and run.tokens_by(5) == 10
    with pytest.raises(ValueError, match="ends with"):
        RaceTimeline("x", run.events[:-1])
    with pytest.raises(ValueError, match="backwards"):
        RaceTimeline("x", (run.events[1], run.events[0], run.events[-1]))


def test_result_verdicts() -> None:
    same = fixed_result()
    assert same.identical and same.verdict() == "outputs identical ✓" and not same.is_bug
    assert same.speedup == pytest.approx(same.spec.tok_s / same.plain.tok_s)
    assert same.gammas == [4, 4, 4]
    bad = fixed_result(spec_ids=[0, 1, 2, 99, 4, 5, 6, 7, 8, 9])
    assert bad.difference == 3 and bad.is_bug
    assert bad.verdict().startswith("outputs differ at token 3 — a bug")


# -------------------------------------------------------------------------- the replay


def test_schedule_merges_two_timelines_in_time_order() -> None:
    plain, spec = plain_timeline(per_token=0.1, ttft=0.2), spec_timeline(step_s=0.15, ttft=0.25)
    dues = schedule(plain.events, spec.events)
    assert len(dues) == len(plain.events) + len(spec.events)
    assert [d.t for d in dues] == sorted(d.t for d in dues)
    # each side keeps its own order and its own times
    assert [d.event for d in dues if d.side == LEFT] == [e.event for e in plain.events]
    assert [d.t for d in dues if d.side == RIGHT] == [e.t for e in spec.events]
    # the first things due: plain's first token at 0.2 s, then spec's first burst at 0.25 s
    first = [(round(d.t, 3), d.side) for d in dues[:3]]
    assert first == [(0.2, LEFT), (0.25, RIGHT), (0.25, RIGHT)]
    assert isinstance(dues[-1].event, GenerationStats) and dues[-1].side == LEFT  # plain ends last


def test_schedule_speed_scales_times_and_ties_put_left_first() -> None:
    stats = GenerationStats()
    left = (TimedEvent(1.0, TokenEvent(1, "a", TokenOrigin.PLAIN, 0, 1.0)),
            TimedEvent(2.0, stats))
    right = (TimedEvent(1.0, stats),)
    dues = schedule(left, right, speed=2.0)
    assert [(d.t, d.side) for d in dues] == [(0.5, LEFT), (0.5, RIGHT), (1.0, LEFT)]
    with pytest.raises(ValueError):
        schedule(left, right, speed=0)


times = st.lists(st.floats(0, 100, allow_nan=False), max_size=30).map(sorted)


@settings(max_examples=60, deadline=None)
@given(times, times, st.floats(0.1, 10))
def test_schedule_properties(a: list[float], b: list[float], speed: float) -> None:
    left = [TimedEvent(t, GenerationStats(generated_tokens=i)) for i, t in enumerate(a)]
    right = [TimedEvent(t, GenerationStats(generated_tokens=i)) for i, t in enumerate(b)]
    dues = schedule(left, right, speed)
    assert [d.t for d in dues] == sorted(d.t for d in dues)
    for side, run in ((LEFT, left), (RIGHT, right)):
        mine = [d for d in dues if d.side == side]
        assert [d.event for d in mine] == [e.event for e in run]
        assert [d.t for d in mine] == pytest.approx([e.t / speed for e in run])
    # a cursor polled at any times hands out every event once, in order
    cursor, seen = ReplayCursor(dues), []
    for now in sorted({*(d.t for d in dues[::3]), 1e9}):
        got = cursor.advance(now)
        assert all(d.t <= now for d in got)
        assert cursor.done or cursor.next_t > now
        seen += got
    assert seen == dues and cursor.done


def test_play_sleeps_until_each_event_is_due() -> None:
    dues = schedule(plain_timeline(per_token=0.1, ttft=0.2).events,
                    spec_timeline(step_s=0.15, ttft=0.25).events)
    now = [0.0]
    shown: list[tuple[float, int]] = []

    def emit(t: float, got: list) -> None:
        assert all(d.t <= t + 1e-9 for d in got)
        shown.append((t, len(got)))

    play(dues, emit, tick=0.05, clock=lambda: now[0],
         sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert sum(n for _, n in shown) == len(dues)
    assert shown[0][0] == pytest.approx(0.2)  # nothing is shown before it is due
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(shown)]
    assert min(gaps) >= 0.05 - 1e-9  # never more often than the tick
    assert now[0] == pytest.approx(dues[-1].t, abs=0.051)  # ends when the last event is due


# --------------------------------------------------------------------- text and prompts


def test_text_chart() -> None:
    assert bar(0.5, 4) == "██  " and bar(0.5, 1) == "▌" and bar(2, 2) == "██"
    lines = cumulative_chart(plain_timeline(), spec_timeline(), rows=4, width=10)
    assert lines[0].startswith("cumulative tokens over time")
    assert len(lines) == 1 + 2 * 4
    assert lines[-2].rstrip().endswith("10") and lines[-1].rstrip().endswith("10")


def test_builtin_prompts() -> None:
    prompts = builtin_prompts()
    assert [p.kind for p in prompts] == [*KINDS, "copy", "reformat", "edit-code"]
    copy = prompt_from("copy")
    assert copy.category == "copy" and "canal" in copy.text and "river rises" in copy.text
    assert "def total_price(items" in prompt_from("edit-code").text
    assert prompt_from("summary").category == "summarization"
    assert prompt_from("code").category == "coding"
    assert prompt_from("rag").category == "rag"
    assert prompt_from("writing").category == "writing"  # any Spec-Bench category
    with pytest.raises(SpecchatError, match="no built-in prompt 'nope'"):
        prompt_from("nope")


# --------------------------------------------------------------------- on tiny models


def test_race_on_tiny_models_is_identical_when_greedy(tiny_target: Path,
                                                      tiny_draft: Path) -> None:
    runtime = tiny_runtime(tiny_target, tiny_draft)
    seen: list[str] = []
    try:
        result = run_race(runtime, RaceSetup("hello", GREEDY), runtime.decoder(gamma=3),
                          progress=seen.append)
        bad = run_race(runtime, RaceSetup("hello", GREEDY),
                       ChangeOneToken(runtime.decoder(gamma=3), position=2))
    finally:
        runtime.close()
    # each side three times, alternating in pairs that take turns to go first, after one
    # warm-up each
    assert seen == ["warm-up", "warm-up",
                    "recording plain run 1/3 (1/6)…", "recording speculative run 1/3 (2/6)…",
                    "recording speculative run 2/3 (4/6)…", "recording plain run 2/3 (3/6)…",
                    "recording plain run 3/3 (5/6)…", "recording speculative run 3/3 (6/6)…"]
    assert [len(r) for r in result.runs] == [3, 3]
    assert result.plain in result.plain_runs and result.spec in result.spec_runs
    assert len(result.plain.tokens) == 20 == len(result.spec.tokens)  # not the warm-up's 8
    assert result.load is not None and result.load.cores >= 1
    assert result.costs is not None and result.costs.source == "this race"
    assert result.why.startswith("on this CPU a ")
    assert result.identical and result.plain.text == result.spec.text
    assert result.spec.steps and result.alpha is not None and set(result.gammas) <= {0, 1, 2, 3}
    assert all(isinstance(e.event, TokenEvent) for e in result.plain.events[:-1])
    assert bad.difference == 2 and bad.is_bug
    d = bad.divergence  # examined: the changed token was far from the target's choice
    assert d is not None and d.position == 2 and d.bound_source == "measured on this prompt"
    assert d.bound is not None and abs(d.margin) > d.bound
    assert "a bug" in bad.verdict() and "beyond this build's batch rounding" in bad.verdict()


def test_a_stored_calibration_gives_the_why_line_and_the_rounding_bound(
        tiny_target: Path, tiny_draft: Path, home: AppPaths) -> None:
    from dataclasses import replace

    from specchat.models.calibration import CalibrationOptions, CalibrationPrompt, calibrate
    from specchat.models.calibration_store import save_calibration

    opts = CalibrationOptions(max_tokens=12, gamma_max=3, n_ctx=512, repeats=1, n_threads=1,
                              prompts=(CalibrationPrompt("a", "hello there"),))
    # a generous bound, so that the changed token below counts as a near-tie
    save_calibration(home, replace(calibrate(tiny_target, tiny_draft, opts), batch_rounding=100.0))
    runtime = tiny_runtime(tiny_target, tiny_draft)
    runtime.paths = home
    try:
        bad = run_race(runtime, RaceSetup("hello", GREEDY, runs=1),
                       ChangeOneToken(runtime.decoder(gamma=3), position=2))
    finally:
        runtime.close()
    assert bad.costs is not None and bad.costs.source == "this race"  # timed under its own load
    ngram_only = _costs_only_ngram(home, tiny_target, tiny_draft)
    assert ngram_only is not None and ngram_only.source == "this race; draft cost: calibration"
    d = bad.divergence
    assert d is not None and d.bound == 100.0 and d.bound_source == "calibration"
    assert not bad.is_bug and bad.verdict().startswith("parted at a near-tie at token 2: ")
    assert [len(r) for r in bad.runs] == [1, 1]


def _costs_only_ngram(home: AppPaths, tiny_target: Path, tiny_draft: Path) -> object:
    from specchat.engine.decode.events import StepEvent
    from specchat.models.calibration_store import load_calibration
    from specchat.race.runner import _costs

    cal = load_calibration(home, tiny_target, tiny_draft)
    plain = plain_timeline()
    steps = [StepEvent(3, 2, 0.0, 0.05, "ngram")]
    spec = spec_timeline()
    spec = RaceTimeline("speculative", tuple(e for e in spec.events
                                             if not isinstance(e.event, StepEvent))[:-1]
                        + tuple(TimedEvent(spec.events[-1].t, s) for s in steps)
                        + (spec.events[-1],))
    got = _costs(cal, [plain], [spec])
    assert got is not None and got.draft is not None
    assert _costs(None, [plain], [spec_timeline()]) is not None  # the race's own alone
    return got


def test_race_needs_a_drafter(tiny_target: Path) -> None:
    runtime = tiny_runtime(tiny_target)
    try:
        with pytest.raises(SpecchatError, match="a race needs a draft model"):
            run_race(runtime, RaceSetup("hi", GREEDY), runtime.decoder())
    finally:
        runtime.close()


def test_race_cli(tiny_target: Path, tiny_draft: Path, home: AppPaths, tmp_path: Path,
                  capsys: pytest.CaptureFixture[str]) -> None:
    home.config_dir.mkdir(parents=True)
    home.user_catalog.write_text(
        f"models:\n  - id: t\n    source: {{kind: path, path: {tiny_target}}}\n"
        f"  - id: d\n    source: {{kind: path, path: {tiny_draft}}}\n"
        "pairs:\n  - id: tinypair\n    target: t\n    draft: d\n    gamma: 3\n",
        encoding="utf-8")
    rc = main(["race", "hello there", "--pair", "tinypair", "--threads", "1", "--max-tokens", "12",
               "--gamma", "pair", "--report", str(tmp_path / "rep")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "── plain" in out and "── speculative" in out and "cumulative tokens over time" in out
    assert "outputs identical ✓" in out
    assert re.search(r"decode speedup [\d.]+×  ·  overall [\d.]+×  ·  TTFT speculative/plain "
                     r"[\d.]+×  ·  α [\d.]+\s+τ [\d.]+\s+γ .*3×", out)  # (lookups: other γ)
    assert re.search(r"^plain +12 tokens  TTFT [\d.]+ \([\d.]+–[\d.]+\) s  decode [\d.]+ "
                     r"\([\d.]+–[\d.]+\) tok/s  overall .*\[3 runs: median \(min–max\)\]$",
                     out, re.M)
    assert re.search(r"^why: on this CPU a \d+-token check costs [\d.]+× one token", out, re.M)
    assert (tmp_path / "rep" / "race.svg").is_file() and (tmp_path / "rep" / "report.md").is_file()


@pytest.mark.parametrize(("argv", "message"), [
    (["race", "hi", "--prompt-from", "code"], "give a prompt or --prompt-from, not both"),
    (["race", "  "], "the prompt is empty"),
    (["race", "--prompt-from", "nope"], "no built-in prompt 'nope'"),
    (["race", "hi", "--max-tokens", "0"], "--max-tokens must be a whole number in [1,"),
    (["race", "hi", "--temperature", "-1"], "--temperature must be a number ≥ 0"),
    (["race", "hi", "--runs", "0"], "--runs must be between 1 and 20 (got 0)"),
])
def test_race_cli_bad_input(argv: list[str], message: str, home: AppPaths,
                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"specchat: error: {message}") and err.count("\n") == 1


def test_race_cli_single_model_is_refused(tiny_target: Path, home: AppPaths,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["race", "hi", "--model", str(tiny_target), "--threads", "1"]) == 1
    assert "a race needs a draft model" in capsys.readouterr().err
