"""Progress on long work: one renderer (models/progress.py's TextProgress) for fetch, load,
calibrate, train-heads, prove, bench and race: a bar with an ETA on a terminal, a line per few
percent elsewhere. The renderer runs on a clock of the test's own (no timing assertion); the
commands run for real on the tiny models, not on a terminal (capsys)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from specchat.cli.main import main
from specchat.models.progress import HEARTBEAT_S, Progress, Steps, TextProgress
from specchat.paths import AppPaths
from tests.test_spec_cli import write_prompts

BAR = re.compile(r"^(?P<task>[\w ]+?)  \[[#-]{20}\] +(?P<pct>\d+)%  (?P<done>[\d.]+)/(?P<total>\d+) ")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_a_line_per_five_percent_however_fast(tmp_path: Path) -> None:
    out, clock = io.StringIO(), Clock()
    render = TextProgress(out, clock=clock)
    with Steps("prove", 1000, render, "samples") as steps:
        for _ in range(1000):
            clock.now += 0.0625  # (exact in binary: the figures below are exact too)
            steps.add(1, "plain")
    lines = out.getvalue().splitlines()
    assert len(lines) == 22, lines  # 0%, 5%, …, 100%, and done
    assert lines[0].startswith("prove  [--------------------]   0%  0/1000 samples")
    assert "ETA" not in lines[0]  # nothing done yet: no rate to tell it from
    assert lines[10] == ("prove  [##########----------]  50%  500/1000 samples  16.0 "
                         "samples/s  ETA 0:31  (plain)")
    assert lines[-1] == "prove: done (1000 samples in 1:02)"


def test_off_a_terminal_a_slow_step_still_shows_a_line_a_minute() -> None:
    out, clock = io.StringIO(), Clock()
    render = TextProgress(out, clock=clock)
    steps = Steps("bench", 2, render, "runs")
    for _ in range(3):  # records that do not reach the next 5%, minutes apart
        clock.now += HEARTBEAT_S
        render(Progress("bench", 0.01, 2, unit="runs"))
    steps.at(1)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 + 3 + 1, lines
    assert lines[-1].startswith("bench  [##########----------]  50%  1/2 runs  ") and \
        lines[-1].endswith("s each  ETA 3:00")


def test_on_a_terminal_one_bar_redrawn_and_lines_said_above_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "72")
    term, clock = Terminal(), Clock()
    render = TextProgress(term, clock=clock)
    steps = Steps("race", 4, render, "runs")
    clock.now += 10
    steps.add(1)
    render.say("[recording plain run 1/2 (1/4)…]")
    clock.now += 10
    steps.add(1, "a detail long enough to be cut at the terminal's width")
    steps.fail()
    text = term.getvalue()
    frames = text.split("\r\x1b[2K")[1:]
    assert frames[0] == "race  [--------------------]   0%  0/4 runs"
    assert frames[1] == "race  [#####---------------]  25%  1/4 runs  10.0 s each  ETA 0:30"
    # The said line, then the bar again under it.
    assert frames[2] == "[recording plain run 1/2 (1/4)…]\n" + frames[1]
    assert frames[3] == ("race  [##########----------]  50%  2/4 runs  10.0 s each  ETA 0:20"
                         "  (a detail long")[:71]
    assert frames[4] == "race: failed\n"
    render.say("after it")
    assert term.getvalue().endswith("race: failed\nafter it\n")  # no bar to redraw


def test_a_task_left_by_an_exception_ends_its_bar_as_failed() -> None:
    term = Terminal()
    with pytest.raises(KeyboardInterrupt), Steps("prove", 10, TextProgress(term), "samples") as s:
        s.add()
        raise KeyboardInterrupt
    assert term.getvalue().endswith("\r\x1b[2Kprove: failed\n")  # the error starts a line


def progress_lines(err: str, task: str) -> list[re.Match[str]]:
    found = [m for line in err.splitlines() if (m := BAR.match(line)) and m["task"] == task]
    assert found, err
    return found


def test_prove_shows_its_progress_off_a_terminal(tiny_target: Path, tiny_draft: Path,
                                                 home: AppPaths,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["prove", "--model", str(tiny_target), "--draft", str(tiny_draft), "--samples",
               "40", "--tokens", "2", "--seed", "1", "--threads", "1"])
    err = capsys.readouterr().err
    assert rc in (0, 3), err  # a pass, or too few rejections at 40: not what this checks
    lines = progress_lines(err, "prove")
    assert [int(m["pct"]) for m in lines] == list(range(0, 101, 5))  # 80 samples: every 5%
    assert {m["total"] for m in lines} == {"80"} and all("ETA" in m.string for m in lines[1:])
    assert "(plain)" in lines[5].string and "(speculative)" in lines[-1].string
    assert "prove: done (80 samples in " in err


def test_bench_and_race_show_their_progress_off_a_terminal(
        tiny_target: Path, tiny_draft: Path, home: AppPaths, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["bench", "--model", str(tiny_target), "--draft", str(tiny_draft), "--prompts",
               str(write_prompts(tmp_path / "q.jsonl")), "--gamma", "2", "--temperature", "0",
               "--max-tokens", "4", "--threads", "1", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 0, err
    lines = progress_lines(err, "bench")  # 2 prompts × 2 modes: a line at each run
    assert [m["done"] for m in lines] == ["0", "1", "2", "3", "4"]
    assert "[4/4] " in err and "bench: done (4 runs in " in err
    rc = main(["race", "the cat sat", "--model", str(tiny_target), "--draft", str(tiny_draft),
               "--gamma", "2", "--max-tokens", "16", "--runs", "1", "--threads", "1",
               "--no-replay"])
    err = capsys.readouterr().err
    assert rc == 0, err
    # Two warm-ups of 8 tokens (half a run each) and two runs of 16: three runs in all.
    lines = progress_lines(err, "race")
    assert [m["done"] for m in lines] == ["0", "0.5", "1", "2", "3"]
    assert {m["total"] for m in lines} == {"3"}
    assert "[recording speculative run 1/1 (2/2)…]" in err and "race: done (3 runs in " in err
