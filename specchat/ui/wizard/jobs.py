"""What the wizard's thread workers do: each takes ``post`` (the screen's thread-safe
``post_message``) and a cancel event, calls the engine/models layer, and posts one result
message. :class:`SpecchatError` escapes to the screen's worker wrapper, which shows it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from textual.message import Message

from specchat.engine.llama import llama_thread
from specchat.errors import FetchError, SpecchatError
from specchat.models.calibration import CalibrationOptions, calibrate
from specchat.models.calibration_store import (
    calibrating,
    load_calibration,
    save_calibration,
    stored_at,
)
from specchat.models.catalog import Catalog, HfSource, ModelEntry
from specchat.models.compat import ModelFacts, check_files, facts_for_entry, facts_for_path
from specchat.models.entries import hub_entry, path_entry
from specchat.models.hub import HubRef, RepoListing, list_gguf, parse_hub_ref
from specchat.models.local_files import LocalModel, find_local_models
from specchat.models.pairing import check_candidate, draft_candidates, self_draft_options
from specchat.models.progress import Progress, ProgressFn
from specchat.models.resolver import ModelResolver
from specchat.models.self_draft import make_self_draft
from specchat.paths import AppPaths
from specchat.ui.wizard.messages import (
    CalibrationDone,
    CandidateChecked,
    DraftsReady,
    FilesReady,
    LocalScanned,
    RepoListed,
    WelcomeRead,
    WizardProgress,
    throttled,
)

Post = Callable[[Message], object]


def _progress(post: Post) -> ProgressFn:
    def send(p: Progress) -> None:
        post(WizardProgress(p))

    return throttled(send)


def scan_local(post: Post, cancel: threading.Event, paths: AppPaths) -> None:
    post(LocalScanned(find_local_models(paths)))


def read_welcome(post: Post, cancel: threading.Event, resolver: ModelResolver) -> None:
    from specchat.ui.wizard.welcome import DEMO, STARTER, pair_size, read_machine

    cat = resolver.catalog
    post(WelcomeRead(read_machine(resolver), pair_size(resolver, cat, STARTER),
                     pair_size(resolver, cat, DEMO)))


def list_repo(post: Post, cancel: threading.Event, role: str, text: str) -> None:
    ref = parse_hub_ref(text)
    if ref is None:
        raise SpecchatError(f"'{text}' is neither a file on this computer nor a Hub repo id "
                            "(org/name)")
    post(RepoListed(role, list_gguf(ref.repo, ref.revision)))


def hub_file_entry(catalog: Catalog, listing: RepoListing, name: str) -> ModelEntry:
    f = listing.find(name)
    ref = HubRef(listing.repo, name, listing.revision)
    return hub_entry(catalog, ref, f, gated=bool(listing.gated))


def target_entry(catalog: Catalog, resolver: ModelResolver, choice: str,
                 local: list[LocalModel], listing: RepoListing | None) -> ModelEntry:
    """The entry behind a target- or draft-list choice (the catalog's own when it knows the
    file)."""
    kind, _, value = choice.partition(":")
    if kind == "cat":
        return catalog.model(value)
    if kind == "hub" and listing is not None:
        return hub_file_entry(catalog, listing, value)
    path = local[int(value)].path if kind == "local" else Path(value).expanduser()
    real = path.resolve()
    for m in catalog.models.values():
        st = resolver.state(m)
        if st.present and st.path is not None and st.path.resolve() == real:
            return m
    return path_entry(catalog, path)


def prepare_drafts(post: Post, cancel: threading.Event, resolver: ModelResolver,
                   target: ModelEntry, local: list[LocalModel]) -> None:
    report = _progress(post)
    try:
        facts = facts_for_entry(resolver, target)
    except FetchError:
        if isinstance(target.source, HfSource):
            raise  # the Hub said why (gated, offline, missing): the screen shows it
        # a PyPI or derived model has no header to read until it is made: make it now
        facts = facts_for_path(resolver.ensure(target, report, cancel=cancel), target.id)
    candidates = draft_candidates(resolver, target, facts, local, report=report, cancel=cancel)
    post(DraftsReady(target, facts, candidates, self_draft_options(facts)))


def check_draft(post: Post, cancel: threading.Event, resolver: ModelResolver,
                target_facts: ModelFacts, entry: ModelEntry) -> None:
    post(CandidateChecked(check_candidate(resolver, target_facts, entry), proceed=True))


def fetch_pair(post: Post, cancel: threading.Event, resolver: ModelResolver, target: ModelEntry,
               draft: ModelEntry | None, self_quant: str | None) -> None:
    report = _progress(post)
    t = resolver.ensure(target, report, cancel=cancel)
    if self_quant is not None:
        draft = make_self_draft(resolver, target, self_quant, report, cancel)
    assert draft is not None
    d = resolver.ensure(draft, report, cancel=cancel)
    post(FilesReady(t, d, draft, check_files(t, d, resolver.catalog)))


def calibrate_pair(post: Post, cancel: threading.Event, paths: AppPaths, target: Path,
                   draft: Path, options: CalibrationOptions) -> None:
    report = _progress(post)
    before = stored_at(paths, target, draft)
    with calibrating(paths, target, draft, report, cancel.is_set) as waited:
        theirs = load_calibration(paths, target, draft) if waited and stored_at(
            paths, target, draft) != before else None
        if theirs is not None:  # another specchat measured it while this one waited
            post(CalibrationDone(theirs))
            return
        result = llama_thread.run(calibrate, target, draft, options, report, cancel)
        save_calibration(paths, result)
    post(CalibrationDone(result))
