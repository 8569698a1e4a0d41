"""Building the real app on tiny real models for Pilot and snapshot tests.

``SpeculativeStandIn`` scripts the speculative event stream so every fate appears in a fixed
pattern (see its docstring); everything else is the real engine.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import io
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console

from specchat.config import UserConfig
from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.decoding import Decoder
from specchat.engine.decode.events import (
    Event,
    GenerationStats,
    RejectedEvent,
    StepEvent,
    TokenEvent,
    TokenOrigin,
)
from specchat.engine.decode.messages import Message
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings
from specchat.loading import Selection
from specchat.models.catalog import ModelEntry, PairEntry, PathSource
from specchat.models.progress import ProgressFn
from specchat.runtime.opening import Runtime
from specchat.store import ChatStore
from specchat.ui.chat_settings import ChatSettings
from specchat.ui.screens.chat import ChatScreen
from specchat.ui.services import AppServices

GREEDY = SamplerSettings(temperature=0, max_tokens=24)


def tiny_runtime(target: Path, draft: Path | None = None, n_ctx: int = 512) -> Runtime:
    t = ModelEntry("tiny-target", "Tiny Target F32", PathSource(target))
    d = ModelEntry("tiny-draft", "Tiny Target Q2", PathSource(draft)) if draft else None
    pair = PairEntry("tiny", "tiny-target", "tiny-draft", gamma=4) if draft else None
    settings = ContextSettings(n_ctx=n_ctx, n_threads=1)
    tm = LlamaModel(target)
    dm = LlamaModel(draft) if draft else None
    return Runtime(Selection(t, d, pair), tm, LlamaContext(tm, settings), dm,
                   LlamaContext(dm, settings) if dm else None)


class SpeculativeStandIn:
    """Plain decoding on a real tiny model, its tokens relabelled into a speculative pattern.

    Scripted fates make the rendering tests cover every fate deterministically (the real
    speculative decoder has its own Pilot test in test_ui_app.py). It emits the same event
    types in the same order a speculative step does: ``accepted`` ACCEPTED tokens, then
    either a CORRECTED token followed by the
    rejected draft tokens it replaced (RejectedEvent, positions from the correction on) or,
    after a fully accepted draft, a BONUS token; then a StepEvent. The reply text is the
    plain decoder's own, so it is real model output; only the fates are scripted.
    """

    name = "speculative"

    def __init__(self, target: LlamaContext, gamma: int = 4,
                 accepted_per_step: Sequence[int] = (4, 2, 0, 3, 4, 1)) -> None:
        self.target = target
        self.gamma = gamma
        self.plan = accepted_per_step
        self.inner = PlainDecoder(target)

    def run(self, prompt: Sequence[int], settings: SamplerSettings,
            cancel: threading.Event) -> Iterator[Event]:
        model = self.target.model
        step = in_step = accepted = rejections = 0
        for ev in self.inner.run(prompt, settings, cancel):
            if isinstance(ev, GenerationStats):
                yield replace(ev, steps=step, drafted=step * self.gamma, accepted=accepted,
                              rejections=rejections, draft_s=ev.decode_s * 0.3,
                              verify_s=ev.decode_s * 0.7, target_forwards=max(step, 1))
                return
            if not isinstance(ev, TokenEvent):
                yield ev
                continue
            want = self.plan[step % len(self.plan)]
            if in_step < want:
                in_step += 1
                yield replace(ev, origin=TokenOrigin.ACCEPTED)
                continue
            if want == self.gamma:
                yield replace(ev, origin=TokenOrigin.BONUS)
            else:
                yield replace(ev, origin=TokenOrigin.CORRECTED)
                for k in range(self.gamma - want):
                    tid = (ev.token_id + 7 + k) % model.n_vocab
                    text = model.piece(tid).decode("utf-8", errors="replace")
                    yield RejectedEvent(tid, text, ev.position + k, 0.05, 0.6)
                rejections += 1
            accepted += want
            yield StepEvent(self.gamma, want, 0.001, 0.002)
            step += 1
            in_step = 0


class GatedDecoder:
    """Wraps a decoder and pauses after ``after`` tokens until ``gate`` opens or the request
    is cancelled: a reply that is reliably still running when the test presses Esc."""

    def __init__(self, inner: Decoder, after: int = 5) -> None:
        self.inner = inner
        self.name = inner.name
        self.target = inner.target
        self.after = after
        self.gate = threading.Event()
        self.paused = threading.Event()

    def run(self, prompt: Sequence[int], settings: SamplerSettings,
            cancel: threading.Event) -> Iterator[Event]:
        n = 0
        for ev in self.inner.run(prompt, settings, cancel):
            yield ev
            if isinstance(ev, TokenEvent):
                n += 1
                if n == self.after and not self.gate.is_set():
                    self.paused.set()
                    while not (self.gate.is_set() or cancel.is_set()):
                        time.sleep(0.005)


def make_services(tmp_path: Path, runtime: Runtime | Callable[[ProgressFn], Runtime],
                  config: UserConfig | None = None,
                  make_decoder: Callable[[Runtime, ChatSettings], Decoder] | None = None,
                  **kwargs: Any) -> AppServices:
    config = config or UserConfig(sampling=GREEDY)
    opener = runtime if callable(runtime) else (lambda _report: runtime)
    extra: dict[str, Any] = {"make_decoder": make_decoder} if make_decoder else {}
    kwargs.setdefault("config_path", tmp_path / "config.yaml")
    return AppServices(store=ChatStore.open(tmp_path / "chats.sqlite3"), config=config,
                       open_runtime=opener, label="tiny", pair_gamma=4, backend="CPU",
                       export_dir=tmp_path, **extra, **kwargs)


def reference_reply(runtime: Runtime, messages: list[Message],
                    settings: SamplerSettings = GREEDY) -> str:
    """What a fresh plain engine says to ``messages`` (its own context, same model)."""
    ctx = LlamaContext(runtime.target, ContextSettings(n_ctx=runtime.target_ctx.n_ctx,
                                                       n_threads=1))
    try:
        events = ChatEngine(PlainDecoder(ctx)).reply(messages, settings)
        return "".join(e.text for e in events if isinstance(e, TokenEvent))
    finally:
        ctx.close()


def app_state(app: Any) -> str:
    """What the app was showing, for a timeout's message: a flaky wait says where it stuck."""
    notes = [n.message for n in list(getattr(app, "_notifications", []))][-5:]
    return (f"screen {type(app.screen).__name__}, focus {type(app.focused).__name__}, "
            f"workers {len(app.workers)}, notices {notes}")


async def wait_for(pilot: Any, check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for the app ({app_state(pilot.app)})")
        await pilot.pause(0.02)


async def screen_with(pilot: Any, screen: type, selector: Any) -> Any:
    """``pilot.app.screen`` once it is a ``screen`` and has mounted what ``selector`` names: a
    pushed screen is current before its children are composed, and a busy machine can catch it
    in between."""
    app = pilot.app
    await wait_for(pilot, lambda: isinstance(app.screen, screen)
                   and bool(app.screen.query(selector)))
    return app.screen


async def ready(pilot: Any) -> Any:
    """The chat screen once it has filled its chat list and focused the input: a key pressed
    before that can land on an empty list, or on a widget that is about to lose the focus."""
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ChatScreen)
                   and pilot.app.screen.filled, timeout=60.0)
    return pilot.app.screen


def app_test(fn: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run an async Pilot test with plain pytest (no async plugin needed)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))  # type: ignore[arg-type]
        # The app leaves reference cycles (asyncio tasks, a LlamaContext whose abort callback
        # refers to it) whose finalizers otherwise run at an arbitrary later allocation. On
        # CPython 3.11.7 one landing inside pytest's end-of-session import of the hypothesis
        # plugin made ast.parse fail ("AST constructor recursion depth mismatch", ~1 run in
        # 3 of two app tests together); collecting here, between tests, never did (0 in 8).
        gc.collect()

    return run


def screen_text(app: Any) -> str:
    """The app's screen as plain text, one line per terminal row (what a text snapshot keeps:
    what is written where, without colours)."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True,
                      color_system=None, legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(
        full=True, screen_stack=app._background_screens))
    return "\n".join(line.rstrip() for line in console.export_text().split("\n")[:height])
