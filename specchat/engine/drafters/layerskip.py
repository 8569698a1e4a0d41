"""The target's own blocks, some skipped, as its draft ("layerskip", Draft & Verify: Zhang et
al. 2024).

The draft is a GGUF holding a subset of the target's blocks (written by
``specchat models self-draft TARGET --layers …``, see :mod:`specchat.models.layer_cut`): same
vocabulary, same embeddings and head, fewer blocks, so each draft token costs about
kept/total of a target token plus the head. It drafts a chain like the draft model does
(:mod:`._draft_model`); the target verifies, so the output is exact whatever it proposes.

Whoever loads models provides a loader for the cut model's context for ``LOADER``
(a zero-argument callable; the runtime's comes from
:mod:`specchat.models.drafter_sources.layerskip`); it is called on the first step that asks, so
naming the drafter costs nothing until it drafts. Without one, ``build`` says how to make a cut.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specchat.engine.decode import arms
from specchat.engine.decode.drafting import DrafterBase, DraftRequest, Proposal
from specchat.engine.decode.registry import DrafterEnv, Need
from specchat.engine.decode.verify import Verdict
from specchat.engine.drafters._draft_model import DraftModel
from specchat.engine.llama.context import LlamaContext
from specchat.errors import SpecchatError

NAME = "layerskip"
ARM = arms.chain()  # a chain priced by its own steps (the layer-skip cut), after a probe
LOADER: Need[Callable[[], LlamaContext]] = Need(NAME)  # the cut model's context, on first use


class LayerSkipDrafter(DrafterBase):
    name = NAME

    def __init__(self, target: LlamaContext, load: Callable[[], LlamaContext]) -> None:
        self.target = target
        self._load = load
        self._dm: DraftModel | None = None

    @property
    def dm(self) -> DraftModel:
        if self._dm is None:
            self._dm = DraftModel(self.target, self._load())
        return self._dm

    @property
    def ctx(self) -> LlamaContext | None:
        """The cut model's context once loaded (None before its first step)."""
        return self._dm.ctx if self._dm is not None else None

    def lag(self, seq: Sequence[int]) -> int:
        """Tokens of ``seq`` the cut model's cache lacks: what its first step reads first."""
        ctx = self.ctx
        return len(seq) - (ctx.common_prefix(seq) if ctx is not None else 0)

    def reset(self, prompt: Sequence[int]) -> None:
        if self._dm is not None:
            self._dm.reset(prompt)

    def propose(self, req: DraftRequest) -> Proposal:
        dm = self.dm
        dm.ctx.cancel = self.target.cancel  # the decoder sets the run's event on the target
        return dm.chain(req, req.plan.depth, self.name)

    def commit(self, seq: Sequence[int], proposal: Proposal, verdict: Verdict) -> None:
        if proposal.drafter == self.name and self._dm is not None:
            self._dm.commit(proposal, verdict)

    def settle(self, seq: Sequence[int]) -> None:
        if self._dm is not None:
            self._dm.settle(seq)


def build(env: DrafterEnv) -> LayerSkipDrafter:
    load = env.get(LOADER)
    if load is None:
        t = env.target_label()
        raise SpecchatError(f"{t} has no layer-skip draft yet: make one with "
                            f"`specchat models self-draft {t} --layers auto`")
    return LayerSkipDrafter(env.target, load)
