"""The one draft-model helper of an environment, shared by the drafters that use the draft model
("model", "tree"): the same-vocabulary ``DraftModel``, or a ``CrossVocabDraft`` drafting through
the shared tokens when the vocabularies differ (see :mod:`._cross_vocab`)."""

from __future__ import annotations

from specchat.engine.decode.registry import DrafterEnv, Need
from specchat.engine.drafters._cross_vocab import CrossVocabDraft, cross_map
from specchat.engine.drafters._draft_model import DraftModel
from specchat.engine.llama.context import LlamaContext

DRAFT_MODEL: Need[DraftModel] = Need("draft_model")


def shared_draft(env: DrafterEnv) -> DraftModel | None:
    """The one DraftModel of an environment (drafters on the same draft share its cache)."""
    if env.draft is None:
        return None
    dm = env.get(DRAFT_MODEL)
    if dm is None:
        dm = draft_for(env.target, env.draft, env.stepwise_draft)
        env.provide(DRAFT_MODEL, dm)
    return dm


def draft_for(target: LlamaContext, draft: LlamaContext, stepwise: bool) -> DraftModel:
    """A draft of the same vocabulary, else one drafting through the shared tokens (TLI)."""
    vmap = cross_map(target.model, draft.model)
    if vmap is not None:
        return CrossVocabDraft(target, draft, vmap)
    return DraftModel(target, draft, stepwise)
