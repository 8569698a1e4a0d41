"""Making a pair, for the CLI and the wizard alike: which drafts fit a target (and why the others
do not), what a self-draft would weigh, and saving the pair — with any model it needs — to the
user catalog, optionally as the default."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path

from specchat.config import load_config, save_config
from specchat.engine.decode.step_policy import GAMMA_CAP
from specchat.errors import Cancelled, CatalogError, FetchError, ModelFileError
from specchat.models.catalog import Catalog, DerivedSource, HfSource, ModelEntry, PairEntry
from specchat.models.compat import (
    WONT_PAY_RATIO,
    CompatReport,
    ModelFacts,
    check_pair,
    facts_for_entry,
    facts_for_path,
)
from specchat.models.entries import pair_slug, path_entry
from specchat.models.families import guess_family
from specchat.models.hub import HubUnreachable, quant_of
from specchat.models.local_files import LocalModel
from specchat.models.progress import Progress, ProgressFn, format_bytes, no_progress
from specchat.models.quantize import SELF_DRAFT_QUANTS, estimated_size
from specchat.models.resolver import ModelResolver
from specchat.models.vocab_compat import Level
from specchat.paths import AppPaths

PAIR_ID = re.compile(r"^[a-z0-9][a-z0-9._+-]{0,63}$")


@dataclass(frozen=True)
class DraftCandidate:
    entry: ModelEntry
    level: Level | None  # None: not checked (yet)
    reason: str  # one plain sentence: why it fits, or why not
    on_disk: bool
    report: CompatReport | None = None

    @property
    def too_large(self) -> bool:
        """Not smaller than the target: drafting with it can only be slower."""
        ratio = self.report.size_ratio if self.report else None
        return ratio is not None and ratio >= 1

    @property
    def suitable(self) -> bool:
        """Checked, fits, and small enough to pay: the only kind a bare Enter may pick."""
        if self.level not in (Level.OK, Level.WARN):
            return False
        ratio = self.report.size_ratio if self.report else None
        return ratio is None or ratio < WONT_PAY_RATIO

    @property
    def rank(self) -> tuple[int, int, float]:
        order = {Level.OK: 0, Level.WARN: 1, None: 2, Level.BAD: 3}[self.level]
        ratio = self.report.size_ratio if self.report and self.report.size_ratio else 1.0
        return (order, 0 if self.on_disk else 1, ratio)


def _summary(report: CompatReport) -> str:
    if report.problems:
        worst = max(report.problems, key=lambda f: (f.level is Level.BAD, f.what == "size"))
        return worst.message
    ratio = report.size_ratio
    return "compatible: same vocabulary" + (f", {ratio:.2f}× the target's size" if ratio else "")


def draft_candidates(resolver: ModelResolver, target: ModelEntry, target_facts: ModelFacts,
                     local: list[LocalModel], check_remote: bool = True,
                     report: ProgressFn = no_progress, cancel: threading.Event | None = None
                     ) -> list[DraftCandidate]:
    """Every draft the user could pick, the compatible ones first, each with its reason.

    Files on disk are checked from their headers; catalog models of the target's family that
    are not downloaded are checked from their headers on the Hub (a few MB each). Other catalog
    models are listed unchecked: picking one checks it.
    """
    cat = resolver.catalog
    family = target.family or guess_family([target.id, target.name, target_facts.name], cat)
    target_path = resolver.state(target).path
    by_path: dict[Path, ModelEntry] = {}
    for m in cat.models.values():
        st = resolver.state(m)
        if st.present and st.path is not None:
            by_path[st.path.resolve()] = m
    todo: list[tuple[ModelEntry, Path | None]] = []
    for lm in local:
        real = lm.path.resolve()
        if target_path is not None and real == target_path.resolve():
            continue
        entry = by_path.get(real) or path_entry(cat, lm.path)
        todo.append((entry, lm.path))
    listed = {e.id for e, _ in todo} | {target.id}
    later: list[DraftCandidate] = []
    for m in cat.models.values():
        if m.id in listed:
            continue
        if m.family and m.family == family and (check_remote or not isinstance(m.source, HfSource)):
            todo.append((m, None))
        else:
            why = f"another family ({m.family})" if m.family else "not checked"
            later.append(DraftCandidate(m, None, f"{why}: pick it to check", False))
    out: list[DraftCandidate] = []
    hub_down = False  # after one "cannot reach the Hub", the rest would only wait to fail too
    for i, (entry, path) in enumerate(todo):
        if cancel is not None and cancel.is_set():
            raise Cancelled("cancelled")
        report(Progress("checking drafts", i, len(todo), unit="models"))
        if hub_down and path is None and _needs_hub(resolver, entry):
            out.append(DraftCandidate(entry, None, "not checked: the Hub cannot be reached",
                                      False))
            continue
        try:
            out.append(_check(resolver, target_facts, entry, path))
        except HubUnreachable as e:
            hub_down = True
            out.append(DraftCandidate(entry, None, f"could not check: {e}", False))
    report(Progress("checking drafts", len(todo), len(todo), unit="models", finished=True))
    return sorted(out + later, key=lambda c: c.rank)


def _needs_hub(resolver: ModelResolver, entry: ModelEntry) -> bool:
    if resolver.state(entry).present:
        return False
    src = entry.source
    if isinstance(src, DerivedSource):
        base = resolver.catalog.models.get(src.base)
        return base is not None and _needs_hub(resolver, base)
    return isinstance(src, HfSource)


def check_candidate(resolver: ModelResolver, target_facts: ModelFacts, entry: ModelEntry,
                    path: Path | None = None) -> DraftCandidate:
    try:
        return _check(resolver, target_facts, entry, path)
    except HubUnreachable as e:
        return DraftCandidate(entry, None, f"could not check: {e}", path is not None)


def _check(resolver: ModelResolver, target_facts: ModelFacts, entry: ModelEntry,
           path: Path | None) -> DraftCandidate:
    """Like :func:`check_candidate`, but a Hub that cannot be reached is raised."""
    try:
        facts = facts_for_path(path, entry.id) if path else facts_for_entry(resolver, entry)
    except HubUnreachable:
        raise
    except (FetchError, ModelFileError, CatalogError) as e:
        return DraftCandidate(entry, None, f"could not check: {e}", path is not None)
    r = check_pair(target_facts, facts, resolver.catalog)
    on_disk = path is not None or resolver.state(entry).present
    return DraftCandidate(entry, r.verdict, _summary(r), on_disk, r)


@dataclass(frozen=True)
class SelfDraftOption:
    quant: str
    size: int  # estimated bytes
    ratio: float  # to the target's weight bytes
    pays: bool
    reason: str


def self_draft_options(target: ModelFacts) -> list[SelfDraftOption]:
    """What quantizing the target itself would give, per quant type, and whether it can pay."""
    out = []
    for q in SELF_DRAFT_QUANTS:
        size = estimated_size(target.n_params, q)
        ratio = size / target.weight_bytes if target.weight_bytes else 1.0
        pays = ratio < WONT_PAY_RATIO
        why = (f"≈{format_bytes(size)}, {ratio:.2f}× the target" if pays else
               f"≈{format_bytes(size)}, {ratio:.2f}× the target: too close to its size to pay "
               "(quantize an F16/Q8_0 target instead)")
        out.append(SelfDraftOption(q, size, ratio, pays, why))
    return out


def suggest_pair_name(catalog: Catalog, target: ModelEntry, draft: ModelEntry) -> str:
    """``<target's model and size>+<draft's size>``, e.g. ``qwen2.5-coder-1.5b+0.5b``: what
    a person would call the pair, not the file names (quant, "-instruct", a clash counter)."""
    tail = draft.params or "draft"
    base = pair_slug(f"{model_name(target)}+{tail}")
    return _unique_pair(catalog, base)


def model_name(entry: ModelEntry) -> str:
    """The entry's id up to its size (``qwen2.5-coder-1.5b-instruct-q4_k_m-2`` →
    ``qwen2.5-coder-1.5b``), or without its quantization when the id names no size."""
    size = entry.params.lower()
    m = re.search(rf"(?:^|[-_.]){re.escape(size)}(?=[-_.]|$)", entry.id) if size else None
    if m:
        return entry.id[: m.end()]
    quant = quant_of(entry.id).lower()
    cut = entry.id.rfind(quant) if quant else -1
    if cut <= 0:
        return entry.id
    return entry.id[:cut].rstrip("-_.") or entry.id


def _unique_pair(catalog: Catalog, base: str) -> str:
    n, name = 2, base
    while name in catalog.pairs:
        name, n = f"{base}-{n}", n + 1
    return name


def self_draft_pair_name(catalog: Catalog, target: ModelEntry, quant: str) -> str:
    return _unique_pair(catalog, pair_slug(f"{target.id}+self-{quant}"))


def save_pair(paths: AppPaths, catalog: Catalog, name: str, target: ModelEntry,
              draft: ModelEntry, gamma: int | None = None, notes: str = "",
              make_default: bool = False) -> tuple[PairEntry, Catalog]:
    """Write the pair (and target/draft entries the catalog lacks) to the user catalog."""
    from specchat.models.user_catalog import update_user_catalog

    if not PAIR_ID.match(name):
        raise CatalogError(f"'{name}' is not a usable pair name: use lowercase letters, digits "
                           "and . _ - + (up to 64)")
    if gamma is not None and not 0 <= gamma <= GAMMA_CAP:
        raise CatalogError(f"γ must be between 0 and {GAMMA_CAP}")
    new = [m for m in (target, draft) if catalog.models.get(m.id) != m]
    pair = PairEntry(name, target.id, draft.id, gamma, notes)
    merged = update_user_catalog(paths.user_catalog, models=new, pairs=[pair])
    if make_default:
        cfg = load_config(paths.config_file)
        save_config(paths.config_file, cfg.with_(default_pair=name), ("default_pair",))
    return merged.pairs[name], merged
