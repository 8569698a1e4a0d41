"""The race screen: one prompt, the same target plain (left) and speculative (right).

The two runs are recorded one after the other in a thread worker (never together: they would
compete for the same CPU/GPU), then replayed side by side in real time by a timer on the UI
thread, each token appearing when it appeared in its own run. The worker only posts typed
messages; every widget is touched from the UI thread.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Static

from specchat.engine.decode.decoding import Decoder
from specchat.engine.llama import llama_thread
from specchat.errors import SpecchatError
from specchat.race.prompts import DEFAULT_KIND, builtin_prompts, prompt_from
from specchat.race.replay import LEFT, RIGHT, Due, ReplayCursor, schedule
from specchat.race.result import RaceResult, gamma_trace_text, recorded_with
from specchat.race.runner import RaceCancelled, RaceSetup, run_race
from specchat.report.race_report import write_race_report
from specchat.runtime.opening import Runtime
from specchat.textsafe import safe_text
from specchat.ui.chat_settings import DRAFTER_CHOICES, ChatSettings
from specchat.ui.keys import RACE_KEYS, bindings
from specchat.ui.messages import RacePairOpened, RaceProgress, RaceRecorded, WorkerFailed
from specchat.ui.screens.race_pickers import DrafterPicker, PairPicker, PromptPicker
from specchat.ui.services import AppServices
from specchat.ui.widgets.race_column import RaceColumn

HEADER = "synchronized replay of two sequential runs"
TICK_S = 1 / 20
RACE_MAX_TOKENS = 128


def default_setup(services: AppServices) -> RaceSetup:
    """Greedy (so the outputs must match), the configured seed and system prompt."""
    config = services.config
    settings = config.sampling.with_(temperature=0.0, seed=config.sampling.seed or 1,
                                     max_tokens=min(config.sampling.max_tokens, RACE_MAX_TOKENS))
    p = prompt_from(DEFAULT_KIND)
    return RaceSetup(p.text, settings, config.system_prompt or None, p.category)


SETTINGS_CHOICE = "settings"  # the race drafts as the chat's settings say
PLANNER_CHOICE = "planner"  # the planner picks per step among every drafter it can score


def drafter_choices(runtime: Runtime, settings: ChatSettings) -> list[tuple[str, str]]:
    """What the race can draft with here: (key, label), the key being a drafter setting
    (``ngram,model``) or one of the two above; choices that cannot run on this pair (no draft
    model, no layer-skip file) are left out."""
    current = DRAFTER_CHOICES.get(settings.drafter, settings.drafter.replace(",", ", then "))
    out = [(SETTINGS_CHOICE, f"as in the chat's settings: {current}, γ {settings.gamma_label}")]
    scored = tuple(n for n in ("ngram", "model") if n in runtime.usable_drafters(("ngram", "model")))
    out.append((PLANNER_CHOICE, "the planner's choice each step: " + " or ".join(
        DRAFTER_CHOICES[n] for n in scored) + ", a token tree or none (γ plan)"))
    for value, label in DRAFTER_CHOICES.items():
        names = tuple(value.split(","))
        if runtime.usable_drafters(names) == names:
            out.append((value, label))
    return out


def race_settings(settings: ChatSettings, choice: str, runtime: Runtime) -> ChatSettings:
    """The chat's settings with the race's drafter choice (the chat's own stay as they are);
    a race attaches no files, so its decoder has no prediction drafter."""
    settings = settings.with_(predicted_outputs=False)
    if choice == SETTINGS_CHOICE:
        return settings
    if choice == PLANNER_CHOICE:
        names = runtime.usable_drafters(("ngram", "model"))
        return settings.with_(drafter=",".join(names), gamma_mode="plan")
    return settings.with_(drafter=choice)


class RaceScreen(Screen[None]):
    BINDINGS = bindings(RACE_KEYS)

    def __init__(self, services: AppServices, runtime: Runtime,
                 setup: RaceSetup | None = None, owns_runtime: bool = False,
                 result: RaceResult | None = None) -> None:
        super().__init__()
        self.services = services
        self.runtime = runtime
        self.owns_runtime = owns_runtime  # a pair opened here, closed when leaving
        self.setup = setup or default_setup(services)
        self.result: RaceResult | None = result
        self.state = "idle"  # idle | recording | replaying | done | failed
        self.show_rejected = False
        self.job = 0
        self.cancel = threading.Event()
        self.idle = threading.Event()  # no worker running
        self.idle.set()
        self._cursor: ReplayCursor | None = None
        self._timer: Timer | None = None
        self._start = 0.0
        self.drafter = SETTINGS_CHOICE  # what drafts (d): a key of drafter_choices

    # --- layout -----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(self._header(), id="race-header")
        yield Static(self._prompt_line(), id="race-prompt")
        with Horizontal(id="race-columns"):
            yield RaceColumn("plain — the target alone", id="race-plain")
            yield RaceColumn(self._spec_title(), self.show_rejected, id="race-spec")
        yield Static("", id="race-summary")
        yield Footer()

    def _header(self) -> Text:
        out = Text()
        out.append(f"Race · {safe_text(self.runtime.selection.label)}", "bold")
        out.append(f" · {HEADER}: plain first, then speculative, each with the whole machine; "
                   "same prompt, seed and sampler; warm-up not timed", "dim")
        return out

    def _prompt_line(self) -> Text:
        s = self.setup
        kind = f"[{s.category}] " if s.category else ""
        first = s.prompt.strip().splitlines()[0] if s.prompt.strip() else ""
        mode = "greedy" if s.settings.greedy else f"T={s.settings.temperature:g}"
        return Text(f"Prompt {safe_text(kind + first[:150])}  ({mode}, seed {s.settings.seed}, "
                    f"≤{s.settings.max_tokens} tokens)")

    def _spec_title(self) -> str:
        shown = " · rejected drafts shown" if self.show_rejected else ""
        return f"speculative — {self._drafter_words()}{shown}"

    def _drafter_words(self) -> str:
        """``drafts by demo-draft``, ``n-gram lookup only``, ``the planner's choice``."""
        if self.drafter == PLANNER_CHOICE:
            return "the planner's choice each step"
        settings = self.services.settings()
        value = settings.drafter if self.drafter == SETTINGS_CHOICE else self.drafter
        draft = self.runtime.selection.draft
        if value == "model,ngram":  # the lookup runs beside the draft only under the planner
            if settings.gamma_mode != "plan":
                value = "model"
            elif draft:
                return f"drafts by {draft.id} or n-gram lookup"
        if value == "model":
            return f"drafts by {draft.id}" if draft else "n-gram lookup"
        return DRAFTER_CHOICES.get(value, value.replace(",", ", then "))

    @property
    def plain_col(self) -> RaceColumn:
        return self.query_one("#race-plain", RaceColumn)

    @property
    def spec_col(self) -> RaceColumn:
        return self.query_one("#race-spec", RaceColumn)

    def on_mount(self) -> None:
        if self.result is not None:  # a finished race to show (e.g. reopened)
            self.show_finished(self.result)
        else:
            self.start()

    # --- recording (worker thread) ----------------------------------------------------------

    def start(self) -> None:
        if not self.idle.is_set():
            self.notify("Still recording: wait for it to finish.", severity="warning")
            return
        self._stop_timer()
        self.job += 1
        self.cancel = threading.Event()
        self.idle.clear()
        self.state = "recording"
        self.result = None
        for col in (self.plain_col, self.spec_col):
            col.reset()
        self._summary(Text("Recording… (warm-up first; the runs take turns on the hardware)"))
        try:
            settings = race_settings(self.services.settings(), self.drafter, self.runtime)
            spec = self.services.make_decoder(self.runtime, settings)
        except SpecchatError as e:
            self._failed(str(e))
            return
        self.record(self.job, self.runtime, self.setup, spec, self.cancel)

    @work(thread=True, exit_on_error=False, group="race")
    def record(self, job: int, runtime: Runtime, setup: RaceSetup, spec: Decoder,
               cancel: threading.Event) -> None:
        try:
            result = recorded_with(llama_thread.run(
                run_race, runtime, setup, spec,
                progress=lambda m: self.post_message(RaceProgress(job, m)), cancel=cancel), spec)
            self.post_message(RaceRecorded(job, result))
        except RaceCancelled:
            pass
        except Exception as e:  # shown, never a traceback
            self.post_message(WorkerFailed(job, e))
        finally:
            self.idle.set()

    def on_race_progress(self, msg: RaceProgress) -> None:
        if msg.job == self.job and self.state == "recording":
            self._summary(Text(f"Recording… {msg.text}"))

    def on_worker_failed(self, msg: WorkerFailed) -> None:
        if msg.job == self.job:
            self._failed(msg.text)

    def _failed(self, message: str) -> None:
        self.idle.set()
        self.state = "failed"
        self._summary(Text(f"The race could not run: {message}", "bold red"))

    # --- the replay (UI thread, timer-driven) -----------------------------------------------

    def on_race_recorded(self, msg: RaceRecorded) -> None:
        if msg.job != self.job:
            return
        self.result = msg.result
        self.state = "replaying"
        self._summary(Text(f"Replaying… ({HEADER}; space skips to the end)"))
        self._cursor = ReplayCursor(schedule(msg.result.plain.events, msg.result.spec.events))
        self._start = time.monotonic()
        self._timer = self.set_interval(TICK_S, self._tick)

    def _tick(self) -> None:
        if self._cursor is None:
            return
        now = time.monotonic() - self._start
        self._show(now, self._cursor.advance(now))
        if self._cursor.done:
            self._finish()

    def _show(self, now: float, dues: list[Due]) -> None:
        for side, col in ((LEFT, self.plain_col), (RIGHT, self.spec_col)):
            for d in dues:
                if d.side == side:
                    col.add(d.t, [d.event])
            col.tick(now)

    def _finish(self) -> None:
        self._stop_timer()
        self._cursor = None
        self.state = "done"
        if self.result is not None:
            self._summary(summary_text(self.result), bug=self.result.is_bug)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None

    def show_finished(self, result: RaceResult) -> None:
        """Draw a finished race at once, without replaying it."""
        self.result = result
        for col in (self.plain_col, self.spec_col):
            col.reset()
        self._cursor = ReplayCursor(schedule(result.plain.events, result.spec.events))
        self._show(self._cursor.end_t, self._cursor.finish())
        self._finish()

    def _summary(self, text: Text, bug: bool = False) -> None:
        widget = self.query_one("#race-summary", Static)
        widget.set_class(bug, "bug")
        widget.update(text)

    # --- keys -------------------------------------------------------------------------------

    def action_run_again(self) -> None:
        self.start()

    def action_skip(self) -> None:
        if self._cursor is not None:
            self._show(self._cursor.end_t, self._cursor.finish())
            self._finish()

    def action_toggle_rejected(self) -> None:
        self.show_rejected = not self.show_rejected
        self.spec_col.set_show_rejected(self.show_rejected)
        self.spec_col.set_title(self._spec_title())

    def action_pick_prompt(self) -> None:
        def chosen(p: object) -> None:
            if p is None:
                return
            self.setup = replace(self.setup, prompt=p.text,  # type: ignore[attr-defined]
                                 category=p.category or None)  # type: ignore[attr-defined]
            self.query_one("#race-prompt", Static).update(self._prompt_line())
            self.start()

        self.app.push_screen(PromptPicker(builtin_prompts()), chosen)

    def action_pick_drafter(self) -> None:
        choices = drafter_choices(self.runtime, self.services.settings())

        def chosen(key: str | None) -> None:
            if key is None or key == self.drafter:
                return
            self.drafter = key
            self.spec_col.set_title(self._spec_title())
            self.cancel.set()  # a recording in flight is for the old drafter
            self._stop_timer()
            self._start_when_idle()

        self.app.push_screen(DrafterPicker(choices, self.drafter), chosen)

    def _start_when_idle(self) -> None:
        if self.idle.is_set():
            self.start()
        else:  # the cancelled recording lets go of the models within a step
            self.set_timer(0.05, self._start_when_idle)

    def action_swap_pair(self) -> None:
        pairs = self.services.race_pairs()
        if not pairs:
            self.notify("No other pair has its models on disk (specchat models pull PAIR).",
                        severity="warning")
            return

        def chosen(pair: str | None) -> None:
            if pair is None or pair == self.runtime.selection.label:
                return
            if not self.idle.is_set():
                self.cancel.set()
            self._stop_timer()
            self.state = "recording"
            self._summary(Text(f"Loading the {pair} pair…"))
            self.open_pair(pair)

        self.app.push_screen(PairPicker(pairs, self.runtime.selection.label), chosen)

    @work(thread=True, exclusive=True, exit_on_error=False, group="race-pair")
    def open_pair(self, pair: str) -> None:
        self.idle.wait()  # a cancelled recording lets go of the old models first
        try:
            runtime = self.services.open_race_pair(pair)
        except Exception as e:
            self.post_message(WorkerFailed(self.job, e))
            return
        if not self.post_message(RacePairOpened(runtime)):
            runtime.close()

    def on_race_pair_opened(self, msg: RacePairOpened) -> None:
        if self.owns_runtime:
            self.runtime.close()
        self.runtime, self.owns_runtime = msg.runtime, True
        self.query_one("#race-header", Static).update(self._header())
        self.spec_col.set_title(self._spec_title())
        self.start()

    def action_export(self) -> None:
        if self.result is None or self.state != "done":
            self.notify("Nothing to export yet: wait for the race to finish.",
                        severity="warning")
            return
        folder = self.services.export_dir / time.strftime("race-%Y%m%d-%H%M%S")
        try:
            written = write_race_report(self.result, folder)
        except OSError as e:
            self.notify(f"Not exported: {e.strerror or e}", severity="error", markup=False)
            return
        self.notify(f"Report written to {written.markdown}", title="Exported", timeout=8,
                    markup=False)

    def action_back(self) -> None:
        self.close_race()
        self.app.pop_screen()

    def close_race(self, wait_s: float = 30.0) -> None:
        """Stop a recording in flight and free models opened here (leaving, or quitting)."""
        self.cancel.set()
        self._stop_timer()
        self.idle.wait(wait_s)
        if self.owns_runtime:
            self.runtime.close()
            self.owns_runtime = False


def summary_text(result: RaceResult) -> Text:
    out = Text()
    dec = result.decode_speedup
    out.append(f"decode {dec:.2f}×" if dec else "decode –", "bold")
    sp = result.speedup
    alpha = "–" if result.alpha is None else f"{result.alpha:.2f}"
    tau = "–" if result.tau is None else f"{result.tau:.2f}"
    ttft = [result.spread(side, "ttft_s").median for side in (0, 1)]
    n = len(result.runs[0])
    runs = f" · median of {n} runs each" if n > 1 else ""
    out.append(f" (speculative over plain, once started) · overall {sp:.2f}× · TTFT "
               f"{ttft[0]:.2f} s plain, {ttft[1]:.2f} s speculative{runs}\n" if sp else "\n")
    out.append(f"α {alpha}  ·  τ {tau}  ·  γ {gamma_trace_text(result.gammas)}\n")
    if result.setup_line():
        out.append(result.setup_line() + "\n", "dim")
    if result.why:
        out.append("why: ", "bold")
        out.append(result.why + "\n")
    if result.noise:
        out.append(result.noise + "\n", "yellow")
    if result.tip:
        out.append("tip: ", "bold")
        out.append(result.tip + "\n")
    style = "bold red" if result.is_bug else ("bold green" if result.identical else "")
    out.append(result.verdict(), style)
    if result.is_bug:
        out.append("  (please report it: specchat race --report DIR writes what to attach)")
    return out

