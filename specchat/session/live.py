"""Turns the engine's event stream into what the screen shows, in batches. No Textual here.

The generation worker feeds every event to an :class:`EventBatcher` and, at most every
``interval`` seconds, takes a :class:`Batch` (new text segments + a :class:`LiveStats`
snapshot) to post to the UI thread. The UI therefore redraws ~10× a second however fast the
decoder runs, and the decoder never waits for the UI.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from specchat.engine.decode.events import GenerationStats, NoticeEvent, StepEvent, TokenEvent
from specchat.engine.decode.stats import acceptance, decode_rate
from specchat.store.fates import FateFold, FateTrace, Segment, merge_segments
from specchat.store.stats import ReplyStats

WINDOW_S = 1.0  # rolling window for tokens/s and the sparkline's α


@dataclass(frozen=True)
class LiveStats:
    tokens: int = 0  # generated so far in this reply
    # Decode tokens/s (engine.decode.stats.decode_rate: the first token, which waits for the
    # prompt, left out): over the last WINDOW_S while a reply streams, the whole reply's after.
    tps: float | None = None
    alpha: float | None = None  # acceptance rate over the reply so far
    alpha_window: float | None = None  # over the last WINDOW_S (what the sparkline plots)
    tau: float | None = None  # tokens committed per verification step
    # 1 + accepted / steps, vLLM's mean acceptance length (engine.decode.stats), shown beside τ
    acceptance_length: float | None = None
    gamma: int | None = None  # draft length of the latest step
    draft_share: float | None = None  # draft time / (draft + verify) time
    ctx_used: int | None = None
    ctx_size: int | None = None
    final: bool = False  # from GenerationStats: whole-reply figures
    gamma_mode: str | None = None  # set for a saved reply: the mode it was generated with
    mode: str | None = None  # what chose the latest step's γ ("fixed", "auto · code", ...)
    gammas: tuple[int, ...] = ()  # γ of each step since the last snapshot (the γ strip)
    drafted_per_step: float | None = None  # a whole reply's draft tokens per step (final only)

    @classmethod
    def from_stats(cls, s: GenerationStats, ctx_used: int | None, ctx_size: int | None,
                   gamma: int | None = None, mode: str | None = None,
                   gammas: tuple[int, ...] = ()) -> LiveStats:
        spent = s.draft_s + s.verify_s
        tau = s.tau if s.steps else None
        return cls(tokens=s.generated_tokens, tps=s.decode_tps or None, alpha=s.alpha,
                   alpha_window=s.alpha, tau=tau, acceptance_length=s.acceptance_length,
                   gamma=gamma,
                   draft_share=s.draft_s / spent if spent > 0 else None, ctx_used=ctx_used,
                   ctx_size=ctx_size, final=True, mode=mode, gammas=gammas,
                   drafted_per_step=_drafted_per_step(s))


@dataclass
class Batch:
    segments: list[Segment] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    stats: LiveStats = field(default_factory=LiveStats)
    final: GenerationStats | None = None


class EventBatcher(FateFold):
    """The event fold of a reply being shown: its fate segments (the session keeps the
    trace), its notices and its figures, taken in batches."""

    def __init__(self, interval: float = 0.08, ctx_used: Callable[[], int] | None = None,
                 ctx_size: int | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        # keep False: the trace orders the segments; the session keeps them. The fold's tally
        # is the decoder's own, fed the same steps (one count, one α and τ for the bar and the
        # saved reply), and its ``generated`` the reply's length as the engine had it.
        super().__init__(keep=False)
        self.interval = interval
        self._ctx_used = ctx_used
        self._ctx_size = ctx_size
        self._clock = clock
        self._last_flush = clock()
        self._pending = Batch()
        self._dirty = False
        self._times: deque[float] = deque()  # token timestamps within the window
        self._steps: deque[tuple[float, int, bool]] = deque()  # (t, accepted, rejected)
        self._last_t = 0.0
        self.gamma: int | None = None
        self.mode: str | None = None
        self._gammas: list[int] = []  # since the last posted stats (see gammas_posted)

    @property
    def dirty(self) -> bool:
        """Events arrived since the last take."""
        return self._dirty

    def add(self, ev: object) -> None:
        self._dirty = True
        super().add(ev)

    def on_token(self, ev: TokenEvent) -> None:
        super().on_token(ev)
        self._last_t = ev.t
        self._times.append(ev.t)

    def on_step(self, ev: StepEvent) -> None:
        self.gamma = ev.gamma
        # What chose the step, and the plan's few words when it has them ("tree 12 · depth 4").
        # (The planner's label already ends with its plan's reason: not said twice.)
        with_reason = ev.reason and not ev.mode.endswith(ev.reason)
        self.mode = " · ".join(x for x in (ev.mode, ev.reason if with_reason else "") if x) \
            or None
        self._gammas.append(ev.gamma)
        rejected = ev.accepted < ev.depth  # a tree drafts more tokens than it can keep
        self._steps.append((self._last_t, ev.accepted, rejected))

    def on_notice(self, ev: NoticeEvent) -> None:
        self._pending.notices.append(ev.message)

    def on_stats(self, ev: GenerationStats) -> None:
        super().on_stats(ev)
        self._pending.final = ev

    def end_round(self) -> None:
        """One reply of a tool turn ended (its calls were made): its last rejected drafts are
        shown, and the next reply's token positions start again from a fresh trace."""
        self.shown += self.trace.finish()
        self.trace = FateTrace(keep=False)
        self._dirty = True

    def due(self) -> bool:
        return self._clock() - self._last_flush >= self.interval

    def take(self) -> Batch:
        """What to show now: segments and notices since the last take, and fresh stats."""
        self._last_flush = self._clock()
        self._dirty = False
        batch, self._pending = self._pending, Batch()
        batch.segments = merge_segments(self.take_shown())
        ctx_used = self._ctx_used() if self._ctx_used else None
        if batch.final is not None:
            batch.stats = LiveStats.from_stats(batch.final, ctx_used, self._ctx_size, self.gamma,
                                               self.mode, tuple(self._gammas))
        else:
            batch.stats = self.snapshot(ctx_used)
        return batch

    def gammas_posted(self) -> None:
        """The stats with the γ of the steps so far reached the screen: start a new list."""
        self._gammas = []

    def snapshot(self, ctx_used: int | None = None) -> LiveStats:
        horizon = self._last_t - WINDOW_S
        while self._times and self._times[0] < horizon:
            self._times.popleft()
        while self._steps and self._steps[0][0] < horizon:
            self._steps.popleft()
        # Decode tok/s over the window: the tokens after its first, from its first to its last.
        tps = decode_rate(len(self._times), self._times[-1] - self._times[0]) \
            if self._times else 0.0
        t = self.tally
        spent = t.draft_s + t.verify_s
        win_acc = sum(a for _, a, _ in self._steps)
        win_rej = sum(int(r) for _, _, r in self._steps)
        return LiveStats(
            tokens=self.tokens, tps=tps or None, alpha=t.alpha,
            alpha_window=acceptance(win_acc, win_rej),
            tau=t.tau(self.generated), acceptance_length=t.acceptance_length,
            gamma=self.gamma,
            draft_share=t.draft_s / spent if spent > 0 else None,
            ctx_used=ctx_used, ctx_size=self._ctx_size, mode=self.mode,
            gammas=tuple(self._gammas))


def _drafted_per_step(s: GenerationStats) -> float | None:
    """Draft tokens per step over a reply; None where its record cannot say (a record that
    kept acceptances but not the drafted count)."""
    if not s.steps or (not s.drafted and (s.accepted or s.rejections)):
        return None
    return s.drafted / s.steps


def live_from_record(r: ReplyStats) -> LiveStats:
    """The stats bar for a saved reply (the figures stored with the message)."""
    g = r.generation
    live = LiveStats.from_stats(g, g.prompt_tokens + g.generated_tokens, r.ctx_size or None,
                                r.gamma)
    return replace(live, gamma_mode=r.gamma_mode if g.steps else None)


class Pace:
    """How often the worker may post text, set by what drawing it costs the UI thread.

    The UI thread reports its own CPU time between chunks (``observe``); the interval
    stretches until drawing takes at most ``budget`` of a core, never below ``fastest``
    (~10 updates a second) nor above ``slowest``. A fast machine streams at 10 Hz; a small,
    busy one draws less often rather than taking CPU from the decoder. Written by the UI
    thread and read by the worker: a float assignment, atomic in CPython.
    """

    def __init__(self, fastest: float = 0.1, slowest: float = 0.5, budget: float = 0.05) -> None:
        self.fastest = fastest
        self.slowest = slowest
        self.budget = budget
        self.interval = fastest

    def observe(self, ui_cpu_s: float, wall_s: float) -> None:
        if wall_s <= 0:
            return
        share = ui_cpu_s / wall_s
        wanted = self.interval * share / self.budget
        smoothed = 0.7 * self.interval + 0.3 * wanted  # no jumps on one slow frame
        self.interval = min(self.slowest, max(self.fastest, smoothed))
