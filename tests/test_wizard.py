"""The pairing wizard end to end, driven with Textual's Pilot against the local Hub stand-in and
tiny real models: choose a Hub repo, pick target and draft files, download, check, calibrate,
save; and cancel half-way without leaving anything behind."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Input, OptionList, Static

from specchat.config import load_config
from specchat.devtools.local_hub import LocalHub
from specchat.devtools.tiny_models import TinySpec, write_tiny_model
from specchat.models.calibration import CalibrationOptions, CalibrationPrompt
from specchat.models.catalog import HfSource, load_catalog
from specchat.models.hf_cache import partial_files
from specchat.paths import AppPaths
from specchat.ui.wizard.app import WizardApp
from specchat.ui.wizard.screen import WizardScreen

SMALL = TinySpec(n_embd=32, n_head=2, n_head_kv=2, n_layer=1, n_ff=64, seed=7)
QUICK = CalibrationOptions(max_tokens=16, gamma_max=3, n_ctx=512, repeats=1, n_threads=1, prompts=(
    CalibrationPrompt("chat", "hello there"), CalibrationPrompt("story", "the cat sat on")))


@pytest.fixture(scope="module")
def small_draft(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("wiz") / "small.gguf", SMALL)


async def until(pilot: Pilot, cond: Callable[[], bool], what: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            screen = pilot.app.screen
            status = str(screen.query_one("#wizard-status", Static).render()) \
                if isinstance(screen, WizardScreen) else "?"
            raise AssertionError(f"timed out waiting for {what} (status: {status})")
        await pilot.pause(0.05)


def wizard(pilot: Pilot) -> WizardScreen:
    screen = pilot.app.screen
    assert isinstance(screen, WizardScreen)
    return screen


async def choose(pilot: Pilot, list_id: str, option_id: str) -> None:
    ol = wizard(pilot).query_one(list_id, OptionList)
    await until(pilot, lambda: any(o.id == option_id for o in ol.options), f"option {option_id}")
    ol.focus()
    ol.highlighted = ol.get_option_index(option_id)
    await pilot.press("enter")


async def type_into(pilot: Pilot, input_id: str, text: str) -> None:
    box = wizard(pilot).query_one(input_id, Input)
    box.focus()
    box.value = text
    await pilot.press("enter")


def serve(hub: LocalHub, target: Path, draft: Path) -> None:
    hub.add("org/Tiny-Chat-GGUF", {"tiny-chat-1B-F32.gguf": target})
    hub.add("org/Tiny-Draft-GGUF", {"tiny-draft-100M-F32.gguf": draft,
                                    "mmproj-tiny-F16.gguf": b"not a chat model"})


def test_wizard_pairs_two_hub_models(hub: LocalHub, home: AppPaths, tiny_target: Path,
                                     small_draft: Path) -> None:
    asyncio.run(pair_two_hub_models(hub, home, tiny_target, small_draft))  # no async plugin


async def pair_two_hub_models(hub: LocalHub, home: AppPaths, tiny_target: Path,
                              small_draft: Path) -> None:
    serve(hub, tiny_target, small_draft)
    app = WizardApp(home, QUICK)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: "model files found" in str(
            wizard(pilot).query_one("#wizard-status", Static).render()), "the local scan")
        await type_into(pilot, "#target-input", "org/Tiny-Chat-GGUF")
        await choose(pilot, "#target-list", "hub:tiny-chat-1B-F32.gguf")
        await until(pilot, lambda: wizard(pilot).step == "step-draft", "the draft step")
        await type_into(pilot, "#draft-input", "org/Tiny-Draft-GGUF")
        ol = wizard(pilot).query_one("#draft-list", OptionList)
        await until(pilot, lambda: any(o.id == "hub:mmproj-tiny-F16.gguf" for o in ol.options),
                    "the draft repo's files")
        assert ol.get_option("hub:mmproj-tiny-F16.gguf").disabled  # projectors are not drafts
        await choose(pilot, "#draft-list", "hub:tiny-draft-100M-F32.gguf")
        await until(pilot, lambda: wizard(pilot).step == "step-check", "download and check")
        report = str(wizard(pilot).query_one("#check-report", Static).render())
        assert "Verdict: compatible" in report and "same vocabulary" in report
        await pilot.click("#calibrate")
        await until(pilot, lambda: not wizard(pilot).query_one("#continue").disabled,
                    "calibration")
        assert "recommended γ" in str(wizard(pilot).query_one("#calibrate-summary",
                                                                Static).render())
        await pilot.click("#continue")
        await until(pilot, lambda: wizard(pilot).step == "step-save", "the save step")
        name = wizard(pilot).query_one("#save-name", Input)
        assert name.value == "tiny-chat-1b+100m"  # the model and sizes, not the file names
        name.value = "tiny-hub"
        await pilot.click("#save")
        await until(pilot, lambda: app.return_value is not None, "the saved pair", timeout=10)
    pair = app.return_value
    assert pair is not None and pair.id == "tiny-hub" and 1 <= (pair.gamma or 0) <= 3
    cat = load_catalog(home.user_catalog)
    saved = cat.pair("tiny-hub")
    target, draft = cat.model(saved.target).source, cat.model(saved.draft).source
    assert isinstance(target, HfSource) and target.repo == "org/Tiny-Chat-GGUF"
    assert isinstance(draft, HfSource) and draft.files == ("tiny-draft-100M-F32.gguf",)
    assert load_config(home.config_file).default_pair == "tiny-hub"
    assert list((home.data_dir / "calibration").glob("*.json"))


def test_cancel_leaves_nothing_behind(hub: LocalHub, home: AppPaths, tiny_target: Path,
                                      small_draft: Path) -> None:
    asyncio.run(cancel_half_way(hub, home, tiny_target, small_draft))


async def cancel_half_way(hub: LocalHub, home: AppPaths, tiny_target: Path,
                          small_draft: Path) -> None:
    serve(hub, tiny_target, small_draft)
    app = WizardApp(home, QUICK)
    async with app.run_test(size=(120, 40)) as pilot:
        await type_into(pilot, "#target-input", "org/Tiny-Chat-GGUF")
        await choose(pilot, "#target-list", "hub:tiny-chat-1B-F32.gguf")
        await until(pilot, lambda: wizard(pilot).step == "step-draft", "the draft step")
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, WizardScreen), "the wizard to close")
    assert app.return_value is None
    assert not home.user_catalog.exists() and not home.config_file.exists()
    assert partial_files(HfSource("org/Tiny-Chat-GGUF", ("tiny-chat-1B-F32.gguf",))) == []


def test_wizard_makes_a_self_draft_for_a_local_target(
        tmp_path: Path, home: AppPaths, tiny_target: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "tiny-F32.gguf").write_bytes(tiny_target.read_bytes())
    monkeypatch.setenv("SPECCHAT_MODEL_DIRS", str(folder))
    monkeypatch.setenv("HOME", str(tmp_path / "nohome"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    asyncio.run(self_draft_flow(home))


async def self_draft_flow(home: AppPaths) -> None:
    app = WizardApp(home, QUICK)
    async with app.run_test(size=(120, 40)) as pilot:
        ol = wizard(pilot).query_one("#target-list", OptionList)
        await until(pilot, lambda: any(o.id == "local:0" for o in ol.options), "the local file")
        await choose(pilot, "#target-list", "local:0")
        await until(pilot, lambda: wizard(pilot).step == "step-draft", "the draft step")
        drafts = wizard(pilot).query_one("#draft-list", OptionList)
        assert not drafts.get_option("self:Q4_0").disabled  # F32 target: a 4-bit copy pays
        await choose(pilot, "#draft-list", "self:Q4_0")
        await until(pilot, lambda: wizard(pilot).step == "step-check", "quantize and check")
        assert "Verdict: compatible" in str(wizard(pilot).query_one("#check-report",
                                                                       Static).render())
        await pilot.click("#skip")
        await until(pilot, lambda: wizard(pilot).step == "step-save", "the save step")
        await pilot.click("#save")
        await until(pilot, lambda: app.return_value is not None, "the saved pair", timeout=10)
    pair = app.return_value
    assert pair is not None and pair.gamma == 4
    cat = load_catalog(home.user_catalog)
    draft = cat.model(pair.draft)
    assert (home.models_dir / draft.source.filename).exists()
    assert cat.model(pair.target).source.path.name == "tiny-F32.gguf"


BIG = TinySpec(n_embd=128, n_head=4, n_head_kv=4, n_layer=3, n_ff=256, seed=5)


def test_draft_step_takes_a_local_path_and_never_offers_a_larger_draft(
        tmp_path: Path, home: AppPaths, tiny_target: Path, small_draft: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf").write_bytes(tiny_target.read_bytes())
    write_tiny_model(folder / "qwen2.5-coder-7b-instruct-q4_k_m.gguf", BIG)  # same vocabulary
    elsewhere = tmp_path / "elsewhere"  # not scanned: reachable only by typing its path
    elsewhere.mkdir()
    draft = elsewhere / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    draft.write_bytes(small_draft.read_bytes())
    monkeypatch.setenv("SPECCHAT_MODEL_DIRS", str(folder))
    monkeypatch.setenv("HOME", str(tmp_path / "nohome"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no models from this machine's cache
    asyncio.run(local_path_draft_flow(home, draft))


async def local_path_draft_flow(home: AppPaths, draft: Path) -> None:
    app = WizardApp(home, QUICK)
    async with app.run_test(size=(120, 40)) as pilot:
        ol = wizard(pilot).query_one("#target-list", OptionList)
        await until(pilot, lambda: len([o for o in ol.options if o.id and
                                         o.id.startswith("local:")]) == 2, "the local files")
        target = next(o.id for o in ol.options if o.id and o.id.startswith("local:")
                      and "1.5b" in str(o.prompt))
        await choose(pilot, "#target-list", target)
        await until(pilot, lambda: wizard(pilot).step == "step-draft", "the draft step")
        step = wizard(pilot).query_one("#step-draft")
        big = next(i for i, c in enumerate(step.candidates) if "7b" in c.entry.id)
        assert step.candidates[big].too_large
        drafts = wizard(pilot).query_one("#draft-list", OptionList)
        assert drafts.get_option(f"cand:{big}").disabled
        # nothing suitable: nothing highlighted, and the focus is in the box, not the list
        assert drafts.highlighted is None
        assert app.focused is wizard(pilot).query_one("#draft-input", Input)
        await pilot.press("enter")  # a bare Enter in the empty box picks nothing
        await pilot.pause(0.2)
        assert wizard(pilot).step == "step-draft"
        await type_into(pilot, "#draft-input", str(draft))
        await until(pilot, lambda: wizard(pilot).step == "step-check", "check the typed file")
        assert "Verdict: compatible" in str(wizard(pilot).query_one("#check-report",
                                                                       Static).render())
        await pilot.click("#skip")
        await until(pilot, lambda: wizard(pilot).step == "step-save", "the save step")
        assert wizard(pilot).query_one("#save-name", Input).value == "qwen2.5-coder-1.5b+0.5b"
        await pilot.click("#save")
        await until(pilot, lambda: app.return_value is not None, "the saved pair", timeout=10)
    pair = app.return_value
    assert pair is not None and pair.id == "qwen2.5-coder-1.5b+0.5b"
    assert load_catalog(home.user_catalog).model(pair.draft).source.path == draft.resolve()


def test_draft_checks_answer_quickly_when_the_hub_cannot_be_reached(
        tmp_path: Path, home: AppPaths, tiny_target: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf").write_bytes(tiny_target.read_bytes())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there: every Hub request is refused
    monkeypatch.setenv("SPECCHAT_MODEL_DIRS", str(folder))
    monkeypatch.setenv("HOME", str(tmp_path / "nohome"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    asyncio.run(unreachable_hub_flow(home))


async def unreachable_hub_flow(home: AppPaths) -> None:
    app = WizardApp(home, QUICK)
    async with app.run_test(size=(120, 40)) as pilot:
        ol = wizard(pilot).query_one("#target-list", OptionList)
        await until(pilot, lambda: any(o.id == "local:0" for o in ol.options), "the local file")
        await choose(pilot, "#target-list", "local:0")
        # a hang guard, not a timing: before, each of the family's Hub drafts waited ~25 s
        await until(pilot, lambda: wizard(pilot).step == "step-draft", "the draft step", 30)
        reasons = [c.reason for c in wizard(pilot).query_one("#step-draft").candidates]
        assert sum(r.startswith("could not check: cannot reach the Hub") for r in reasons) == 1
        assert "not checked: the Hub cannot be reached" in reasons
