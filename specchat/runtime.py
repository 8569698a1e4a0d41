"""Open what the user asked for — a pair or a single model — as loaded models and contexts.

This is the one place that turns catalog entries into a running engine, for the CLI, the app
and the benchmarks alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from specchat.engine.decoding import Decoder
from specchat.engine.hardware import backend_label, gpu_devices
from specchat.engine.llama_lib import supports_gpu_offload
from specchat.engine.memory_plan import LoadRequest, MemoryReadings, PairPlan, check, plan_load
from specchat.engine.model import ContextSettings, LlamaContext, LlamaModel, ModelSettings
from specchat.engine.placement import Placement
from specchat.engine.plain import PlainDecoder
from specchat.errors import SpecchatError
from specchat.models.catalog import Catalog, ModelEntry, PairEntry
from specchat.models.gguf_file import validate
from specchat.models.progress import ProgressFn, no_progress
from specchat.models.resolver import ModelResolver, model_from_ref


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
        return self.target.id


def select(catalog: Catalog, pair: str | None = None, model: str | None = None,
           default_pair: str | None = None) -> Selection:
    if model:
        return Selection(model_from_ref(catalog, model))
    pair_id = pair or default_pair or catalog.default_pair
    if not pair_id:
        raise_no_default(catalog)
    p = catalog.pair(pair_id)  # type: ignore[arg-type]
    return Selection(catalog.model(p.target), catalog.model(p.draft), p)


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


class Runtime:
    def __init__(self, selection: Selection, target: LlamaModel, target_ctx: LlamaContext,
                 draft: LlamaModel | None = None, draft_ctx: LlamaContext | None = None,
                 plan: PairPlan | None = None) -> None:
        self.selection = selection
        self.target = target
        self.target_ctx = target_ctx
        self.draft = draft
        self.draft_ctx = draft_ctx
        self.plan = plan  # the memory estimate the models were loaded with
        self._placement: Placement | None = None

    @classmethod
    def open(cls, selection: Selection, resolver: ModelResolver,
             options: RuntimeOptions = RuntimeOptions(), report: ProgressFn = no_progress,
             fetch: bool = True, with_draft: bool = True,
             readings: MemoryReadings | None = None) -> Runtime:
        """Fetch (if needed) and load the models, after checking they fit in free memory.

        ``readings`` replaces the live memory readings (tests inject impossible ones).
        """
        target_path = resolver.ensure(selection.target, report, fetch)
        draft_path = None
        if selection.draft is not None and with_draft:
            draft_path = resolver.ensure(selection.draft, report, fetch)
        check_main_gpu(options)
        reqs = load_requests(selection, target_path, draft_path, options)
        if options.memory_check:
            plan = plan_load(reqs, readings)
            check(plan)
        else:  # no readings: "auto" means every layer, as llama.cpp would do
            plan = plan_load(reqs, MemoryReadings.unknown())
        opened: list[LlamaModel | LlamaContext] = []
        try:
            target = LlamaModel(target_path, plan.plans[0].model_settings)
            opened.append(target)
            target_ctx = LlamaContext(target, options.context)
            opened.append(target_ctx)
            draft = draft_ctx = None
            if draft_path is not None:
                draft = LlamaModel(draft_path, plan.plan("draft").model_settings)
                opened.append(draft)
                draft_ctx = LlamaContext(draft, options.draft_ctx)
        except BaseException:
            for obj in reversed(opened):  # free GPU memory now, not at garbage collection
                obj.close()
            raise
        return cls(selection, target, target_ctx, draft, draft_ctx, plan)

    @property
    def placement(self) -> Placement:
        """Where the models run (backend, layers on the GPU), for a status line."""
        if self._placement is None:
            loaded = [("target" if self.draft else "model", self.target, self.target_ctx)]
            if self.draft is not None and self.draft_ctx is not None:
                loaded.append(("draft", self.draft, self.draft_ctx))
            self._placement = Placement.of(backend_label(), loaded)
        return self._placement

    def decoder(self, plain: bool = False) -> Decoder:
        return PlainDecoder(self.target_ctx)

    def close(self) -> None:
        for obj in (self.draft_ctx, self.draft, self.target_ctx, self.target):
            if obj is not None:
                obj.close()
