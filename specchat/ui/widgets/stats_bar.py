"""The live stats bar: rolling decode tokens/s, α, τ with the acceptance length, draft vs
verify time and context fill on one line; γ on the next, what chooses it and what it is, each
labelled; then backend and models, with sparklines of α and decode tokens/s over the
conversation and a strip of γ over the recent steps (where auto-γ shows it lengthening on code
and shortening on prose).

It is fed :class:`LiveStats` snapshots (at most ~10 a second, coalesced in the message queue)
and draws nothing on its own: what it shows is in reactives (the figures, whether a reply runs,
the ctx figure with attached files, the γ setting, whether the decoder drafts), each redrawn by
its watcher.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive
from textual.widgets import Label, Static

from specchat.runtime.opening import Runtime
from specchat.session.live import LiveStats, live_from_record
from specchat.store import ReplyStats
from specchat.textsafe import safe_text

HISTORY = 240  # points kept per sparkline
SPARK_WIDTH = 16  # three sparklines and the models' names share one line
GAMMA_STEPS = 2 * SPARK_WIDTH  # steps the γ strip spans (two a character)
BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int, lo: float, hi: float | None) -> str:
    """``values`` averaged into at most ``width`` bars, on a fixed scale from ``lo`` to ``hi``
    (``hi=None``: the largest value), so a steady α of 0.9 looks high rather than flat."""
    if not values:
        return " " * width
    n = len(values)
    buckets = [values[i * n // width : (i + 1) * n // width] for i in range(width)] \
        if n > width else [[v] for v in values]
    top = max(values) if hi is None else hi
    span = top - lo or 1.0
    bars = []
    for b in buckets:
        if not b:
            continue
        v = sum(b) / len(b)
        level = round((min(max(v, lo), top) - lo) / span * (len(BARS) - 1))
        bars.append(BARS[level])
    return "".join(bars).ljust(width)


# The acceptance length's label and how the draft/verify time split is shown ("draft": the
# draft's share alone, "": not at all): the first form whose line fits the bar's width is
# drawn (an 80-column terminal gets one of the shorter ones).
FORMS = (("acceptance length", "draft/verify"), ("acc.len", "draft/verify"),
         ("acc.len", "draft"), ("acc.len", ""))


def stats_line(s: LiveStats, busy: bool, pending: int | None = None,
               width: int | None = 78) -> Text:
    """The figures: decode tokens/s (the first token, which waits for the prompt, left out),
    α, τ and beside it the acceptance length (1 + accepted / steps, as vLLM reports it), the
    draft/verify split and the context's fill, in the first of :data:`FORMS` that fits
    ``width`` columns (None: the first); ``pending``: the prompt's tokens with the files
    attached to the message being written, shown as the fill while no reply runs."""
    line = Text()
    for label, split in FORMS:
        line = _figures(s, busy, pending, label, split)
        if width is None or line.cell_len <= width:
            break
    return line


def _figures(s: LiveStats, busy: bool, pending: int | None, acc_label: str,
             split: str) -> Text:
    def fmt(v: float | None, spec: str) -> str:
        return "—" if v is None else format(v, spec)

    dim = "dim"
    out = Text()
    out.append(f"{fmt(s.tps, '5.1f')}", "bold")
    out.append(" tok/s decode" + (" (live)" if busy else ""), dim)
    out.append("  α ", dim)
    out.append(fmt(s.alpha, ".2f"), "bold")
    out.append("  τ ", dim)
    out.append(fmt(s.tau, ".2f"), "bold")
    out.append(f"  {acc_label} ", dim)
    out.append(fmt(s.acceptance_length, ".2f"), "bold")
    if split:
        out.append(f"  {split} ", dim)
        if s.draft_share is None:
            out.append("—", "bold")
        elif split == "draft":
            out.append(f"{s.draft_share:.0%}", "bold")
        else:
            out.append(f"{s.draft_share:.0%}/{1 - s.draft_share:.0%}", "bold")
    out.append("  ctx ", dim)
    used = "—" if s.ctx_used is None else str(s.ctx_used)
    size = "—" if s.ctx_size is None else str(s.ctx_size)
    if pending is not None and not busy:
        out.append(f"{pending}/{size}", "bold")
        out.append(" with files", dim)
        return out
    out.append(f"{used}/{size}", "bold")
    return out


def mode_words(label: str, setting: str) -> str:
    """What chooses γ, in words that cannot be read as a count: ``fixed`` with the setting
    ``fixed 4`` → ``fixed at 4``, ``pair`` → ``the pair's 3``, ``plan · chain 3`` → ``planner ·
    chain 3``, ``auto · code`` as it is. ``label`` is the step's (or a saved reply's), ``setting``
    the chat's (:attr:`ChatSettings.gamma_label`), whose number a fixed label lacks."""
    head, _, rest = label.partition(" · ")
    head, _, n = head.partition(" ")  # the setting itself ("fixed 4") carries its number
    kind, _, setting_n = setting.partition(" ")
    n = n or (setting_n if kind == head else "")
    words = {"fixed": f"fixed at {n}" if n else "fixed", "pair": f"the pair's {n}".rstrip(),
             "plan": "planner"}.get(head, head)
    return " · ".join(x for x in (words, rest) if x)


def gamma_line(s: LiveStats, gamma_mode: str, speculative: bool, busy: bool) -> Text:
    """γ: what chooses it (the mode) and what it is (this step's, or per step over a finished
    reply), each labelled, so a fixed γ 4 ending on a 0-token step reads "fixed at 4 · last
    step 0", and a reply that drafted nothing says it was plain throughout."""
    out = Text()
    out.append("γ ", "dim")
    if s.gamma_mode is None and not speculative:  # plain decoding, or a saved plain reply
        out.append("off", "bold")
        out.append(" · plain decoding, no draft", "dim")
        return out
    # A saved reply's label is its own; the chat's setting (and its number) may have changed.
    setting = "" if s.mode is None and s.gamma_mode is not None else gamma_mode
    out.append(mode_words(s.mode or s.gamma_mode or gamma_mode, setting), "bold")
    if s.final and s.drafted_per_step is not None:
        if s.drafted_per_step == 0:
            out.append(" · 0 drafted per step: plain throughout", "dim")
        else:
            per = s.drafted_per_step
            out.append(f" · {per:.1f} drafted per step" if per >= 1 else
                       f" · {per:.2f} drafted per step", "dim")
            if s.gamma is not None:
                out.append(f" (last step {s.gamma})", "dim")
    elif s.gamma is not None:
        out.append(f" · {'this' if busy else 'last'} step ", "dim")
        out.append(str(s.gamma), "bold")
    return out


def short_name(name: str) -> str:
    """``SmolLM2 135M Instruct F32 (derived)`` → ``SmolLM2 135M Instruct F32``"""
    return re.sub(r"\s*\([^)]*\)\s*$", "", name)


def pair_names(target: str, draft: str) -> str:
    """``SmolLM2 135M Instruct F32 ← Q3_K_S``: the draft without the words it shares."""
    t, d = short_name(target).split(), short_name(draft).split()
    n = 0
    while n < min(len(t), len(d)) - 1 and t[n] == d[n]:
        n += 1
    return f"{' '.join(t)} ← {' '.join(d[n:])}"


def models_label(runtime: Runtime) -> str:
    """The loaded models as the bar names them: ``pair: target ← draft``, or the target."""
    sel = runtime.selection
    if sel.draft is not None and runtime.draft is not None:
        return f"{sel.label}: {pair_names(sel.target.name, sel.draft.name)}"
    return short_name(sel.target.name)


class StatsBar(Vertical):
    DEFAULT_CSS = """
    StatsBar { height: auto; padding: 0 1; background: $panel; }
    StatsBar #stats-line { height: 1; }
    StatsBar #stats-gamma { height: auto; max-height: 2; }
    StatsBar #stats-sparks { height: 1; }
    StatsBar .spark-label { color: $text-muted; margin: 0 1 0 0; }
    StatsBar .spark { width: 17; color: $success; }
    StatsBar #stats-models { width: 1fr; color: $text-muted; text-align: right; }
    """

    stats: reactive[LiveStats] = reactive(LiveStats, init=False)  # the figures shown
    busy = reactive(False, init=False)  # a reply is being written: its figures are live
    pending: reactive[int | None] = reactive(None, init=False)  # the ctx with the files
    gamma_mode = reactive("", init=False)  # the chat's γ setting (ChatSettings.gamma_label)
    speculative = reactive(False, init=False)  # the decoder drafts (else "γ off")

    def __init__(self, backend: str, models: str, ctx_size: int | None, speculative: bool,
                 gamma_mode: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.backend = backend
        self.models = models
        self.ctx_size = ctx_size
        self.set_reactive(StatsBar.speculative, speculative)
        self.set_reactive(StatsBar.gamma_mode, gamma_mode)
        self.set_reactive(StatsBar.stats, LiveStats(ctx_size=ctx_size))
        self.alpha_history: list[float] = []
        self.tps_history: list[float] = []
        self.gamma_history: list[int] = []
        self._gamma_wraps = False  # the γ line took two lines when last drawn

    def compose(self) -> ComposeResult:
        yield Static(self._line(), id="stats-line")
        yield Static(self._gamma_line(), id="stats-gamma")
        with Horizontal(id="stats-sparks"):
            yield Label("α", classes="spark-label")
            yield Static(sparkline([], SPARK_WIDTH, 0, 1), id="alpha-spark", classes="spark")
            yield Label("tok/s decode", classes="spark-label")
            yield Static(sparkline([], SPARK_WIDTH, 0, None), id="tps-spark", classes="spark")
            yield Label("γ", classes="spark-label")
            yield Static(sparkline([], SPARK_WIDTH, 0, None), id="gamma-spark", classes="spark")
            yield Label(safe_text(f"{self.backend} · {self.models}"), id="stats-models",
                        markup=False)

    def _line(self) -> Text:
        width = self.outer_size.width - 2  # the padding: 1 each side (0: not laid out yet)
        return stats_line(self.stats, self.busy, self.pending, width if width > 0 else None)

    def _gamma_line(self) -> Text:
        return gamma_line(self.stats, self.gamma_mode, self.speculative, self.busy)

    # Every figure redraws the two lines (a Static's update, drawn at the next frame).
    def watch_stats(self) -> None:
        self._redraw()

    def watch_busy(self) -> None:
        self._redraw()

    def watch_pending(self) -> None:
        self._redraw()

    def watch_gamma_mode(self) -> None:
        self._redraw()

    def watch_speculative(self) -> None:
        self._redraw()

    def _redraw(self, relayout: bool = False) -> None:
        if not self.is_mounted:
            return  # composed from the reactives' values
        self.query_one("#stats-line", Static).update(self._line(), layout=False)
        # The γ line wraps when the planner's reason is long: laid out again (a cost, ~10
        # redraws a second) only when it goes from one line to two or back.
        gamma = self._gamma_line()
        wraps = len(gamma.plain) > self.size.width - 2
        relayout = relayout or wraps != self._gamma_wraps
        self._gamma_wraps = wraps
        self.query_one("#stats-gamma", Static).update(gamma, layout=relayout)

    def on_resize(self) -> None:
        self._redraw(relayout=True)

    def show(self, stats: LiveStats, busy: bool, record: bool = True) -> None:
        """Show a snapshot; ``record`` adds its α and tokens/s to the sparklines (one point per
        live update, and one for the whole reply when it ends) and its steps' γ to the strip."""
        if stats.ctx_size is None:
            stats = LiveStats(**{**stats.__dict__, "ctx_size": self.ctx_size})
        self.stats, self.busy = stats, busy
        if record:
            if stats.alpha_window is not None:
                self.alpha_history.append(stats.alpha_window)
            if stats.tps is not None:
                self.tps_history.append(stats.tps)
            self.gamma_history += stats.gammas  # the steps since the last snapshot
            self._draw_sparks()

    def show_replies(self, records: Sequence[ReplyStats]) -> None:
        """A branch's replies (oldest first): their sparklines, and the last one's figures."""
        self.stats, self.busy = LiveStats(ctx_size=self.ctx_size), False
        gens = [r.generation for r in records]
        self.set_history([g.alpha for g in gens if g.alpha is not None],
                         [g.decode_tps for g in gens if g.decode_tps])
        if records:
            self.show(live_from_record(records[-1]), busy=False, record=False)

    def set_history(self, alpha: Sequence[float], tps: Sequence[float],
                    gammas: Sequence[int] = ()) -> None:
        self.alpha_history, self.tps_history = list(alpha), list(tps)
        self.gamma_history = list(gammas)
        self._draw_sparks()

    def _draw_sparks(self) -> None:
        del self.alpha_history[:-HISTORY]
        del self.tps_history[:-HISTORY]
        del self.gamma_history[:-GAMMA_STEPS]
        self.query_one("#alpha-spark", Static).update(
            sparkline(self.alpha_history, SPARK_WIDTH, 0.0, 1.0), layout=False)
        self.query_one("#tps-spark", Static).update(
            sparkline(self.tps_history, SPARK_WIDTH, 0.0, None), layout=False)
        gammas = [float(g) for g in self.gamma_history]
        self.query_one("#gamma-spark", Static).update(
            sparkline(gammas, SPARK_WIDTH, 0.0, max(gammas, default=1.0) or 1.0), layout=False)
