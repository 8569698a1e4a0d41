"""Open what the user asked for — a pair or a single model — as loaded models and contexts.

This is the one place that turns catalog entries into a running engine, for the CLI, the app
and the benchmarks alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specchat.engine.decoding import Decoder
from specchat.engine.model import ContextSettings, LlamaContext, LlamaModel, ModelSettings
from specchat.engine.plain import PlainDecoder
from specchat.models.catalog import Catalog, ModelEntry, PairEntry
from specchat.models.progress import ProgressFn, no_progress
from specchat.models.resolver import ModelResolver, model_from_ref


@dataclass(frozen=True)
class RuntimeOptions:
    context: ContextSettings = field(default_factory=ContextSettings)
    target: ModelSettings = field(default_factory=ModelSettings)
    draft: ModelSettings = field(default_factory=ModelSettings)


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


class Runtime:
    def __init__(self, selection: Selection, target: LlamaModel, target_ctx: LlamaContext,
                 draft: LlamaModel | None = None, draft_ctx: LlamaContext | None = None) -> None:
        self.selection = selection
        self.target = target
        self.target_ctx = target_ctx
        self.draft = draft
        self.draft_ctx = draft_ctx

    @classmethod
    def open(cls, selection: Selection, resolver: ModelResolver,
             options: RuntimeOptions = RuntimeOptions(), report: ProgressFn = no_progress,
             fetch: bool = True, with_draft: bool = True) -> Runtime:
        target_path = resolver.ensure(selection.target, report, fetch)
        draft_path = None
        if selection.draft is not None and with_draft:
            draft_path = resolver.ensure(selection.draft, report, fetch)
        target = LlamaModel(target_path, options.target)
        target_ctx = LlamaContext(target, options.context)
        draft = draft_ctx = None
        if draft_path is not None:
            draft = LlamaModel(draft_path, options.draft)
            draft_ctx = LlamaContext(draft, options.context)
        return cls(selection, target, target_ctx, draft, draft_ctx)

    def decoder(self, plain: bool = False) -> Decoder:
        return PlainDecoder(self.target_ctx)

    def close(self) -> None:
        for obj in (self.draft_ctx, self.draft, self.target_ctx, self.target):
            if obj is not None:
                obj.close()
