"""The pairing wizard: a modal that returns the saved pair, or None when cancelled.

Target → draft → fetch → check → calibrate → save. Every model, Hub and llama.cpp call runs in
a thread worker (:mod:`jobs`) and reports back with typed messages; nothing touches a widget
from a thread. Escape cancels at any step: a download stops between chunks and keeps its
``.partial`` file for a later resume (never a file that looks complete), a quantization finishes
and is deleted, a calibration stops at the next token, and nothing is written to the catalog.
"""

from __future__ import annotations

import threading
from typing import ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, ContentSwitcher, Static

import specchat.ui.wizard.jobs as jobs  # the module, not via the package (which imports this one)
from specchat.config import load_config
from specchat.engine.policy.gamma import GAMMA_DEFAULT
from specchat.errors import SpecchatError
from specchat.models.calibration import CalibrationOptions, CalibrationResult
from specchat.models.catalog import Catalog, ModelEntry, PairEntry, load_catalog
from specchat.models.compat import ModelFacts
from specchat.models.local_files import LocalModel
from specchat.models.pairing import save_pair, suggest_pair_name
from specchat.models.resolver import ModelResolver
from specchat.models.vocab_compat import Level
from specchat.paths import AppPaths
from specchat.ui.messages import WorkerFailed
from specchat.ui.widgets.transfers import TransferList
from specchat.ui.wizard.draft_step import DraftStep
from specchat.ui.wizard.messages import (
    CalibrationDone,
    CandidateChecked,
    DraftsReady,
    FilesReady,
    LocalScanned,
    RepoListed,
    WelcomeRead,
    WizardProgress,
)
from specchat.ui.wizard.steps import CalibrateStep, CheckStep, FetchStep, SaveStep
from specchat.ui.wizard.target_step import TargetStep
from specchat.ui.wizard.welcome import DEMO, STARTER, WelcomeStep, demo_words

STEPS = {"step-target": "1 · Target", "step-draft": "2 · Draft", "step-fetch": "3 · Files",
         "step-check": "4 · Check", "step-calibrate": "5 · Calibrate", "step-save": "6 · Save"}
BACK = {"step-draft": "step-target", "step-check": "step-draft", "step-calibrate": "step-check",
        "step-save": "step-check", "step-fetch": "step-draft"}


class WizardScreen(ModalScreen[PairEntry | None]):
    DEFAULT_CSS = """
    WizardScreen { align: center middle; }
    #wizard-box { width: 96%; height: 94%; border: thick $primary; padding: 0 1;
                  background: $surface; }
    #wizard-title { text-style: bold; color: $primary; height: 1; }
    #wizard-status { height: auto; min-height: 1; color: $text-muted; }
    #wizard-status.-error { color: $error; }
    WizardScreen .hint { margin: 0 0 1 0; color: $text-muted; }
    WizardScreen .step-buttons { height: auto; margin-top: 1; }
    #wizard-nav { height: auto; }
    #wizard-steps { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, paths: AppPaths, catalog: Catalog | None = None,
                 calibration: CalibrationOptions | None = None, intro: str | None = None,
                 welcome: bool = False) -> None:
        super().__init__()
        self.intro = intro  # a line above the steps
        # The first run starts on a welcome (qwen-coder or demo, by this machine) when the
        # catalog has both; "Pair other models…" goes on to the steps below.
        self.catalog = catalog or load_catalog(paths.user_catalog)
        self.welcome = welcome and {STARTER, DEMO} <= set(self.catalog.pairs)
        self.back = {**BACK, "step-target": "step-welcome"} if self.welcome else BACK
        self.paths = paths
        self.resolver = ModelResolver(self.catalog, paths)
        if self.intro and "{demo}" in self.intro:  # what is true of the files now
            self.intro = self.intro.replace("{demo}", demo_words(self.resolver, self.catalog))
        self.calibration_options = calibration or CalibrationOptions(
            max_tokens=48, gamma_max=6, n_threads=_configured_threads(paths))
        self.cancel_event = threading.Event()
        self.local: list[LocalModel] = []
        self.target: ModelEntry | None = None
        self.target_facts: ModelFacts | None = None
        self.draft: ModelEntry | None = None
        self.self_quant: str | None = None
        self.files: FilesReady | None = None
        self.calibration: CalibrationResult | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="wizard-box"):
            yield Static(id="wizard-title")
            if self.intro and not self.welcome:
                yield Static(self.intro, id="wizard-intro", classes="hint", markup=False)
            first = "step-welcome" if self.welcome else "step-target"
            with ContentSwitcher(initial=first, id="wizard-steps"):
                if self.welcome:
                    yield WelcomeStep()
                yield TargetStep(self.catalog)
                yield DraftStep()
                yield FetchStep()
                yield CheckStep()
                yield CalibrateStep()
                yield SaveStep()
            yield Static(id="wizard-status")
            with Horizontal(id="wizard-nav"):
                yield Button("Back", id="back")
                yield Button("Cancel", variant="error", id="cancel")

    def on_mount(self) -> None:
        if self.welcome:
            self.go("step-welcome")
            self.run_job(jobs.read_welcome, self.resolver)
            return
        self.go("step-target")
        self.status("looking for model files on this computer…")
        self.run_job(jobs.scan_local, self.paths)

    # -- navigation and status ------------------------------------------------------------

    @property
    def step(self) -> str:
        return self.query_one(ContentSwitcher).current or "step-target"

    def go(self, step: str) -> None:
        self.query_one(ContentSwitcher).current = step
        title = "Welcome" if step == "step-welcome" else "Pair a draft with a target   " + (
            "  ".join(f"[reverse] {label} [/]" if key == step else label
                      for key, label in STEPS.items()))
        self.query_one("#wizard-title", Static).update(title)
        self.query_one("#back", Button).disabled = step not in self.back

    def status(self, text: str, error: bool = False) -> None:
        s = self.query_one("#wizard-status", Static)
        s.update(text)
        s.set_class(error, "-error")

    def run_job(self, fn: object, *args: object) -> None:
        """Run ``fn(screen_post, cancel, *args)`` in a thread; a new job cancels the last."""
        self.cancel_event.set()
        self.cancel_event = threading.Event()
        self._job(fn, self.cancel_event, args)

    @work(thread=True, exclusive=True, exit_on_error=False, group="wizard")
    def _job(self, fn: object, cancel: threading.Event, args: tuple[object, ...]) -> None:
        try:
            fn(self.post_message, cancel, *args)  # type: ignore[operator]
        except Exception as e:  # said in the status line, never a traceback
            self.post_message(WorkerFailed(0, e, cancelled=cancel.is_set()))

    def action_cancel(self) -> None:
        self.cancel_event.set()
        self.dismiss(None)

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.action_cancel()

    @on(Button.Pressed, "#back")
    def _back(self) -> None:
        self.cancel_event.set()
        target = self.back.get(self.step)
        if target:
            self.status("")
            self.go(target)

    # -- messages from the jobs -----------------------------------------------------------

    def on_wizard_progress(self, m: WizardProgress) -> None:
        lists = {"step-fetch": "#fetch-transfers", "step-calibrate": "#calibrate-transfers"}
        if self.step in lists:
            self.query_one(lists[self.step], TransferList).show(m.progress)
        elif not m.progress.finished:
            p = m.progress
            amount = f" {p.done:.0f}/{p.total:.0f}" if p.total and p.unit != "B" else ""
            self.status(f"{p.task}{amount}…")

    def on_worker_failed(self, m: WorkerFailed) -> None:
        if not m.cancelled:
            self.status(m.text, error=True)
            if self.step == "step-fetch":
                self.query_one(FetchStep).failed()

    def on_welcome_read(self, m: WelcomeRead) -> None:
        self.query_one(WelcomeStep).show(m.machine, m.starter, m.demo)

    @on(WelcomeStep.Chosen)
    def _welcome_chosen(self, event: WelcomeStep.Chosen) -> None:
        if event.choice == STARTER:
            self.dismiss(self.catalog.pair(STARTER))  # the app fetches it, with progress
        elif event.choice == DEMO:
            self.action_cancel()  # what Esc does: the built-in default, the demo
        else:
            self.go("step-target")
            self.status("looking for model files on this computer…")
            self.run_job(jobs.scan_local, self.paths)

    def on_local_scanned(self, m: LocalScanned) -> None:
        self.local = m.models
        on_disk = {}
        for e in self.catalog.models.values():
            st = self.resolver.state(e)
            if st.present and st.path is not None:
                on_disk[e.id] = st.path
        self.query_one(TargetStep).populate(m.models, on_disk)
        self.status(f"{len(m.models)} model files found on this computer")

    def on_repo_listed(self, m: RepoListed) -> None:
        step = self.query_one(TargetStep) if m.role == "target" else self.query_one(DraftStep)
        step.show_repo(m.listing)
        self.status(f"{m.listing.repo}: {len(m.listing.files)} GGUF files")

    def on_drafts_ready(self, m: DraftsReady) -> None:
        self.target, self.target_facts = m.target, m.facts
        self.query_one(DraftStep).populate(m.facts, m.candidates, m.self_drafts)
        n = sum(c.level in (Level.OK, Level.WARN) for c in m.candidates)
        self.status(f"{n} compatible drafts found")
        self.go("step-draft")

    def on_candidate_checked(self, m: CandidateChecked) -> None:
        c = m.candidate
        self.query_one(DraftStep).update_candidate(c)
        if c.level is None or c.level is Level.BAD or c.too_large:
            self.status(f"{c.entry.id}: {c.reason}", error=True)
        elif m.proceed:
            self.draft, self.self_quant = c.entry, None
            self.start_fetch()

    def on_files_ready(self, m: FilesReady) -> None:
        self.files = m
        self.draft = m.draft_entry
        self.query_one(CheckStep).show(m.report)
        self.status("")
        self.go("step-check")

    def on_calibration_done(self, m: CalibrationDone) -> None:
        self.calibration = m.result
        self.query_one(CalibrateStep).show(m.result)
        self.status("calibration stored with the pair's files")

    # -- the user's choices ----------------------------------------------------------------

    @on(TargetStep.RepoRequested)
    @on(DraftStep.RepoRequested)
    def _repo(self, event: TargetStep.RepoRequested | DraftStep.RepoRequested) -> None:
        role = "target" if isinstance(event, TargetStep.RepoRequested) else "draft"
        self.status(f"looking up {event.text} on the Hub…")
        self.run_job(jobs.list_repo, role, event.text)

    @on(TargetStep.Picked)
    def _target_picked(self, event: TargetStep.Picked) -> None:
        step = self.query_one(TargetStep)
        if event.choice == "back":
            self.on_local_scanned(LocalScanned(self.local))
            return
        entry = jobs.target_entry(self.catalog, self.resolver, event.choice, self.local,
                                  step.listing)
        self.status(f"reading {entry.id} and checking drafts for it…")
        self.run_job(jobs.prepare_drafts, self.resolver, entry, self.local)

    @on(DraftStep.Picked)
    def _draft_picked(self, event: DraftStep.Picked) -> None:
        step = self.query_one(DraftStep)
        kind, _, value = event.choice.partition(":")
        assert self.target_facts is not None
        if kind == "back":
            step.back_to_list()
        elif kind == "self":
            self.draft, self.self_quant = None, value
            self.start_fetch()
        elif kind == "cand":
            c = step.candidates[int(value)]
            self.status(f"checking {c.entry.id}…")
            self.run_job(jobs.check_draft, self.resolver, self.target_facts, c.entry)
        elif kind == "path":
            entry = jobs.target_entry(self.catalog, self.resolver, event.choice, self.local, None)
            self.status(f"checking {entry.id}…")
            self.run_job(jobs.check_draft, self.resolver, self.target_facts, entry)
        elif kind == "hub" and step.listing is not None:
            entry = jobs.hub_file_entry(self.catalog, step.listing, value)
            self.status(f"checking {entry.id} from its header on the Hub…")
            self.run_job(jobs.check_draft, self.resolver, self.target_facts, entry)

    @on(FetchStep.Retry)
    def _retry_fetch(self) -> None:
        self.start_fetch()

    def start_fetch(self) -> None:
        assert self.target is not None
        self.query_one(FetchStep).started()
        self.query_one("#fetch-transfers", TransferList).clear()
        self.go("step-fetch")
        self.status("")
        self.run_job(jobs.fetch_pair, self.resolver, self.target, self.draft, self.self_quant)

    @on(CheckStep.Decided)
    def _decided(self, event: CheckStep.Decided) -> None:
        if not event.calibrate:
            self.calibration = None
            self.to_save()
            return
        assert self.files is not None
        self.query_one("#calibrate-transfers", TransferList).clear()
        self.go("step-calibrate")
        self.run_job(jobs.calibrate_pair, self.paths, self.files.target, self.files.draft,
                     self.calibration_options)

    @on(CalibrateStep.Continue)
    def _continue(self) -> None:
        self.to_save()

    def to_save(self) -> None:
        assert self.target is not None and self.draft is not None
        r = self.calibration
        gamma = r.gamma if r is not None else GAMMA_DEFAULT
        why = (f"Calibrated: γ={r.gamma} — {r.verdict}." if r else
               f"Not calibrated: γ={GAMMA_DEFAULT} is a common starting point (the default "
               "planner measures costs as it goes); the app calibrates the pair in the "
               "background once it opens it (unless auto_calibrate is off), or `specchat "
               "models calibrate` measures it later.")
        self.query_one(SaveStep).prepare(
            f"{self.target.id} ← {self.draft.id}\n{why}",
            suggest_pair_name(self.catalog, self.target, self.draft), gamma)
        self.go("step-save")

    @on(SaveStep.Save)
    def _save(self, event: SaveStep.Save) -> None:
        assert self.target is not None and self.draft is not None
        try:
            pair, merged = save_pair(self.paths, self.catalog, event.name, self.target,
                                     self.draft, event.gamma, make_default=event.make_default)
        except SpecchatError as e:
            self.status(str(e), error=True)
            return
        self.catalog = merged
        self.dismiss(pair)



def _configured_threads(paths: AppPaths) -> int:
    """The user's thread setting, so calibration times what chatting will use (0: default)."""
    try:
        return load_config(paths.config_file).n_threads
    except SpecchatError:
        return 0  # a broken config is reported by the app; calibration uses the default
