"""The default against plain decoding, cold: `specchat ask` in a fresh process and a fresh home.

Per Spec-Bench category (one prompt each by default) and on two prompts that copy with changes
(a list with a word added, a function with a variable renamed), each round runs `specchat ask
--plain` and `specchat ask` with the defaults, the order alternating, each in a new process and
a new, empty specchat home (nothing calibrated, nothing learnt: what a new user gets on the
first try). Greedy. It prints decode tokens per second, the ratio of each round's default run
to the plain run of the same round, the median ratio per prompt, whether the outputs were the
same tokens, and how fast the default's own plain steps ran against the plain run (this
machine's processes differ by up to ±15 % in speed: where nothing was drafted, that is all of
the ratio). ``--trace DIR`` keeps each default run's steps. ``--control`` runs plain a second
time in each round, in a process of its own: its ratio to the first plain run is how far this
machine's noise alone moves a ratio in the same rounds.

The models are the pair's files in an existing home (``--models``, default the qwen-coder
files of the test cache): nothing is fetched.

    python scripts/default_vs_plain.py --rounds 2 --max-tokens 128
    python scripts/default_vs_plain.py --max-tokens 48 --only copy,code-edit   # short replies
    python scripts/default_vs_plain.py --rounds 4 --control   # with plain against plain
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's specchat, not another one installed

from specchat.bench.prompts import load_prompts  # noqa: E402

FUNCTION = '''def moving_average(values, window):
    """Average of each run of `window` values."""
    if window <= 0:
        raise ValueError("window must be positive")
    result = []
    total = 0.0
    for index, value in enumerate(values):
        total += value
        if index >= window:
            total -= values[index - window]
        if index >= window - 1:
            result.append(total / window)
    return result
'''

EXTRA = {
    "copy": ("Copy this list back exactly, but put the word DONE after the third item: "
             "1. Buy flour and two dozen eggs from the market. 2. Call the plumber about the "
             "leaking kitchen tap. 3. Send the quarterly report to the finance team. 4. Book "
             "train tickets for the conference in Lyon. 5. Water the plants on the balcony "
             "before Friday. 6. Renew the library books that are due next week."),
    "code-edit": ("Rename the variable `total` to `running_sum` in this function. Reply with "
                  "the whole function only, in a code block.\n\n```python\n" + FUNCTION + "```"),
}


def ask(prompt: str, model: Path, draft: Path, max_tokens: int, threads: int, plain: bool,
        rt: bool) -> dict[str, object]:
    home = tempfile.mkdtemp(prefix="specchat-dvp-")
    try:
        cmd = [sys.executable, "-m", "specchat", "ask", prompt, "--model", str(model),
               "--draft", str(draft), "--temperature", "0", "--max-tokens", str(max_tokens),
               "--threads", str(threads), "--ctx-size", "4096", "--json"]
        if plain:
            cmd.append("--plain")
        if rt:  # real-time priority: other work on the box does not stall llama.cpp's threads
            cmd = ["chrt", "-f", "10", *cmd]
        env = {**os.environ, "SPECCHAT_HOME": home, "PYTHONPATH": str(REPO)}
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        if out.returncode != 0:
            raise SystemExit(f"specchat ask failed: {out.stderr.strip()[-400:]}")
        return read_ask_json(out.stdout)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def read_ask_json(stdout: str) -> dict[str, object]:
    """``specchat ask --json``'s stats line, with its tokens' ids (``tokens``), its step lines
    (``steps_trace``) and the results of its tool calls (``tool_results``) added."""
    found: dict[str, list[object]] = {"token": [], "step": [], "tool_result": []}
    stats: dict[str, object] = {}
    for line in stdout.splitlines():
        if not line.startswith("{"):
            continue
        ev = json.loads(line)
        if ev.get("type") == "stats":
            stats = ev
        elif ev.get("type") in found:
            found[ev["type"]].append(int(ev["id"]) if ev["type"] == "token" else ev)
    stats.update(tokens=found["token"], steps_trace=found["step"],
                 tool_results=found["tool_result"])
    return stats


# Plain steps a default run needs for its speed to stand for the process's: a copy's few are
# its first, which run at a process's start-up speed, not its own.
MIN_PLAIN_STEPS = 16


def write_trace(path: Path, stats: dict[str, object], plain_tps: float) -> None:
    """One line a step: position, drafter, drafted/kept, the step's verify time, the reason."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"plain in the same round: {1000 / plain_tps:.1f} ms a token" if plain_tps else ""]
    for ev in stats["steps_trace"]:  # type: ignore[attr-defined]
        lines.append(f"{ev['position']:>5} {ev['drafter']:<8} drafted {ev['gamma']:>2} "
                     f"kept {ev['accepted']:>2} {1000 * float(ev['verify_s']):7.1f} ms  "
                     f"{ev['reason']}")
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    home = Path.home() / ".cache" / "specchat-qwen" / "home" / "data" / "models"
    ap.add_argument("--models", type=Path, default=home)
    ap.add_argument("--target", default="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    ap.add_argument("--draft", default="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated categories (and copy, code-edit)")
    ap.add_argument("--no-rt", action="store_true", help="do not ask for real-time priority")
    ap.add_argument("--trace", type=Path, default=None,
                    help="a folder: each default run's steps, one line each (what the planner "
                         "chose, what it kept, the step's time), as PROMPT-ROUND.txt")
    ap.add_argument("--control", action="store_true",
                    help="also run plain a second time each round: plain against plain, the "
                         "noise floor of a ratio on this machine")
    a = ap.parse_args()
    model, draft = a.models / a.target, a.models / a.draft
    prompts = [(p.category, p.text) for p in load_prompts(None, (), 1)] + list(EXTRA.items())
    if a.only:
        keep = {c.strip() for c in a.only.split(",")}
        prompts = [p for p in prompts if p[0] in keep]
    rt = not a.no_rt and shutil.which("chrt") is not None and os.geteuid() == 0
    print(f"{a.target} + {a.draft}: cold `specchat ask`, greedy, {a.max_tokens} tokens, "
          f"{a.threads} threads, {a.rounds} rounds{' (real-time priority)' if rt else ''}")
    print(f"{'prompt':<15} {'tokens':>6} {'plain tok/s':>11} {'default tok/s':>13} "
          f"{'ratio':>6}  same  rounds  drafted/accepted  plain steps  corrected"
          + ("  control (rounds)" if a.control else ""))
    all_ratios, all_controls = [], []
    for name, text in prompts:
        ratios, same, plain_tps, dflt_tps, n = [], True, [], [], 0
        step_ratios = []  # the default's own plain steps against the plain run, per token
        corrected = []  # each round's ratio with that process's own speed taken out
        controls = []  # plain again against plain, each round
        drafted = accepted = 0
        for r in range(a.rounds):
            # Each run takes each place in turn: a slow spell at one place in a round weighs
            # on every side across the rounds.
            runs = ["plain", "default"] + (["again"] if a.control else [])
            k = r % len(runs)
            order = runs[k:] + runs[:k]
            got = {p: ask(text, model, draft, a.max_tokens, a.threads, p != "default", rt)
                   for p in order}
            pl, df = got["plain"], got["default"]
            n = int(pl["generated_tokens"])  # type: ignore[call-overload]

            def tps(s: dict[str, object]) -> float:
                dec = float(s["decode_s"])  # type: ignore[arg-type]
                return (int(s["generated_tokens"]) - 1) / dec if dec > 0 else 0.0  # type: ignore[call-overload]

            plain_tps.append(tps(pl))
            dflt_tps.append(tps(df))
            ratios.append(dflt_tps[-1] / plain_tps[-1] if plain_tps[-1] else 0.0)
            same = same and pl["tokens"] == df["tokens"]
            if a.control and plain_tps[-1]:
                controls.append(tps(got["again"]) / plain_tps[-1])
            own = [float(e["verify_s"]) for e in df["steps_trace"]  # type: ignore[attr-defined]
                   if e["drafter"] == "none" and int(e["position"]) > 0]
            if len(own) >= MIN_PLAIN_STEPS and plain_tps[-1]:
                step_ratios.append(statistics.mean(own) * plain_tps[-1])
                corrected.append(ratios[-1] * step_ratios[-1])
            if a.trace is not None:
                write_trace(a.trace / f"{name}-{r + 1}.txt", df, tps(pl))
            drafted += int(df.get("drafted", 0))  # type: ignore[call-overload]
            accepted += int(df.get("accepted", 0))  # type: ignore[call-overload]
        ratio = statistics.median(ratios)
        all_ratios.append(ratio)
        steps = (f"{statistics.median(step_ratios):.2f}×  {statistics.median(corrected):.2f}×"
                 if step_ratios else "-")
        control = ""
        if controls:
            all_controls.append(statistics.median(controls))
            control = (f"  {all_controls[-1]:.2f}× "
                       f"({' '.join(f'{x:.2f}' for x in controls)})")
        print(f"{name:<15} {n:>6} {statistics.median(plain_tps):>11.1f} "
              f"{statistics.median(dflt_tps):>13.1f} {ratio:>5.2f}×  {'yes' if same else 'NO':>4}  "
              f"{' '.join(f'{x:.2f}' for x in ratios)}  {drafted}/{accepted}  {steps}{control}",
              flush=True)
    print(f"median over prompts: {statistics.median(all_ratios):.2f}× plain; "
          f"lowest {min(all_ratios):.2f}×")
    if all_controls:
        print(f"control, plain against plain: median over prompts "
              f"{statistics.median(all_controls):.2f}×, from {min(all_controls):.2f}× to "
              f"{max(all_controls):.2f}× (a default ratio inside that range is within this "
              "machine's noise)")
    print("plain steps: the default's own plain steps (their forward pass alone) against the "
          "plain run's time per token, median of rounds: above 1, that process simply ran "
          "slower (where nothing was drafted, all of its ratio is this); corrected: each "
          "round's ratio times that, the default against its own plain steps")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
