"""What to run and how to load it: the user's choice of a pair or a model as catalog entries
(:class:`Selection`), the load options, the checks before anything is loaded (a draft that can
draft for the target, the main GPU), and the load's progress. :mod:`specchat.runtime.opening`
opens it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from specchat.engine.llama.hardware import gpu_devices
from specchat.engine.llama.llama_lib import supports_gpu_offload
from specchat.engine.llama.memory_plan import LoadPlan, LoadRequest, PairPlan
from specchat.engine.llama.model_settings import ContextSettings, ModelSettings
from specchat.errors import IncompatiblePairError, SpecchatError
from specchat.formats.gguf_checks import validate
from specchat.models.catalog import Catalog, ModelEntry, PairEntry
from specchat.models.progress import Progress, ProgressFn
from specchat.models.resolver import model_from_ref
from specchat.models.vocab_compat import Finding, Level


@dataclass(frozen=True)
class RuntimeOptions:
    context: ContextSettings = field(default_factory=ContextSettings)
    target: ModelSettings = field(default_factory=ModelSettings)
    draft: ModelSettings = field(default_factory=ModelSettings)
    draft_context: ContextSettings | None = None  # None: the same as the target's
    memory_check: bool = True  # refuse (with a suggestion) what would not fit in free memory

    @property
    def draft_ctx(self) -> ContextSettings:
        return self.draft_context or self.context


@dataclass(frozen=True)
class Selection:
    """What to run: a pair (target + draft) or one model."""

    target: ModelEntry
    draft: ModelEntry | None = None
    pair: PairEntry | None = None

    @property
    def label(self) -> str:
        if self.pair:
            return self.pair.id
        return self.target.id if self.draft is None else f"{self.target.id} + {self.draft.id}"


def check_pair(target: Path, draft: Path) -> list[Finding]:
    """Refuse a draft that cannot draft for the target; return the warnings, if any (a draft
    of another vocabulary drafts through the shared tokens, see engine.drafters._cross_vocab)."""
    from specchat.models.compat import facts_for_path, vocab_findings

    findings = [f for f in vocab_findings(facts_for_path(target), facts_for_path(draft))
                if f.level is not Level.OK]
    bad = [f for f in findings if f.level is Level.BAD]
    if bad:
        raise IncompatiblePairError(f"{draft.name} cannot draft for {target.name}: "
                                    f"{bad[0].message}")
    return findings


def select(catalog: Catalog, pair: str | None = None, model: str | None = None,
           default_pair: str | None = None, draft: str | None = None) -> Selection:
    """A pair from the catalog, one model, or an ad-hoc pair (``model`` + ``draft``)."""
    if draft and not model:
        from specchat.errors import CatalogError

        raise CatalogError("--draft needs --model (the target it drafts for)")
    if model:
        target = model_from_ref(catalog, model)
        return Selection(target, model_from_ref(catalog, draft) if draft else None)
    pair_id = pair or default_pair or catalog.default_pair
    if not pair_id:
        raise_no_default(catalog)
    p = catalog.pair(pair_id)  # type: ignore[arg-type]
    return Selection(catalog.model(p.target), catalog.model(p.draft), p)


def select_label(catalog: Catalog, label: str) -> Selection:
    """The selection whose :attr:`Selection.label` is ``label`` (a saved chat's pair, a pick in
    the chat's pair switcher): a pair id, a model, or an ad-hoc ``target + draft``."""
    if label in catalog.pairs:
        return select(catalog, label)
    target, sep, draft = label.partition(" + ")
    return select(catalog, model=target, draft=draft if sep else None)


def raise_no_default(catalog: Catalog) -> None:
    from specchat.errors import CatalogError

    raise CatalogError("no pair configured: pass --pair NAME or --model ID "
                       f"(pairs: {', '.join(catalog.pairs) or 'none'})")


def load_requests(selection: Selection, target_path: Path, draft_path: Path | None,
                  options: RuntimeOptions) -> list[LoadRequest]:
    """What to load, with each model's header, for the memory plan."""
    role = "target" if draft_path is not None else "model"
    reqs = [LoadRequest(role, selection.target.id, validate(target_path), options.target,
                        options.context)]
    if draft_path is not None and selection.draft is not None:
        reqs.append(LoadRequest("draft", selection.draft.id, validate(draft_path), options.draft,
                                options.draft_ctx))
    return reqs


def check_main_gpu(options: RuntimeOptions) -> None:
    wanted = [m.main_gpu for m in (options.target, options.draft) if m.main_gpu is not None]
    if not wanted or not supports_gpu_offload():
        return
    gpus = gpu_devices()
    if gpus and max(wanted) >= len(gpus):
        seen = ", ".join(f"{i}: {d.description or d.name}" for i, d in enumerate(gpus))
        raise SpecchatError(f"main GPU {max(wanted)} does not exist (this build sees {seen})")


LOAD_TASK = "Loading the models into memory"


class LoadProgress:
    """Reports a load as one task over all its models' weights (llama.cpp says how far each
    model is), with the memory plan's estimate as its note; a report per percent at most."""

    def __init__(self, plan: PairPlan, report: ProgressFn) -> None:
        self.plan = plan
        self.report = report
        self.total = float(sum(p.weights for p in plan.plans)) or 1.0
        self.note = plan.summary()
        self._shown = -1
        self._send(0.0, plan.plans[0])

    def _send(self, done: float, p: LoadPlan, finished: bool = False) -> None:
        percent = int(100 * done / self.total)
        if percent == self._shown and not finished:
            return
        self._shown = percent
        self.report(Progress(LOAD_TASK, done, self.total, "B", finished,
                             detail=f"{p.request.role} {p.request.name}", note=self.note))

    def model(self, index: int) -> Callable[[float], None]:
        """The progress callback for the ``index``-th model of the plan."""
        before = float(sum(p.weights for p in self.plan.plans[:index]))
        p = self.plan.plans[index]
        return lambda share: self._send(before + share * p.weights, p)

    def finished(self) -> None:
        self._send(self.total, self.plan.plans[-1], finished=True)
