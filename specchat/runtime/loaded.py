"""What a runtime holds: the loaded models and contexts, where they run, and closing them.

:class:`LoadedModels` is the state every part of :class:`~specchat.runtime.opening.Runtime`
works on — the target, the draft model when a pair is loaded, their contexts, the memory plan
they were loaded with, the cuts of the target drafters asked for — and what is said about it:
where the models run (:attr:`~LoadedModels.placement`), the notices about how they were
loaded. :meth:`~LoadedModels.close` frees every model and context it holds.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from specchat.engine.decode.registry import Need
from specchat.engine.llama import amx
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.hardware import backend_label
from specchat.engine.llama.memory_plan import PairPlan
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.placement import Placement
from specchat.engine.policy.controller import Controller
from specchat.loading import Selection
from specchat.models.drafter_sources import Found
from specchat.models.resolver import ModelResolver
from specchat.models.vocab_compat import Finding
from specchat.paths import AppPaths


class LoadedModels:
    """A runtime's models and contexts, and what it keeps beside them; the policies and the
    decoders it hands out build on this (:mod:`.policies`, :mod:`.decoders`)."""

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
        self.pair_warnings: list[Finding] = []  # vocabulary differences that still allow drafting
        self.paths: AppPaths | None = None  # where the pair's calibration may be stored
        # The learning controllers handed out (one per decoder: a chat session, a race), whose
        # state is saved for the next process; see save_controllers.
        self._controllers: list[Controller] = []
        self.resolver: ModelResolver | None = None  # where the drafters' weights are looked for
        # What the drafters found in the stores (models.drafter_sources), kept for the
        # runtime's life, and the cuts of the target they loaded (a layer-skip draft,
        # Kangaroo's shallow model), cleared and closed with the runtime's own contexts.
        self._found = Found()
        self._cuts: list[tuple[LlamaModel, LlamaContext]] = []
        # What drafters keep across the decoders handed out (DrafterEnv.kept: the n-gram
        # drafter's memory of earlier requests), for the runtime's life.
        self._kept: dict[Need[object], object] = {}

    def notices(self) -> list[str]:
        """What the user should know about how the models were loaded (layers left on the CPU,
        llama.cpp kernels left out because they crash on this machine)."""
        out = self.plan.notices() if self.plan else []
        if (note := amx.note()) is not None:
            out.append(note)
        return out

    @property
    def placement(self) -> Placement:
        """Where the models run (backend, layers on the GPU), for a status line."""
        if self._placement is None:
            loaded = [("target" if self.draft else "model", self.target, self.target_ctx)]
            if self.draft is not None and self.draft_ctx is not None:
                loaded.append(("draft", self.draft, self.draft_ctx))
            self._placement = Placement.of(backend_label(), loaded)
        return self._placement

    def _open_cut(self, path: Path) -> LlamaContext:
        """A cut of the target (a layer-skip draft, Kangaroo's shallow model) loaded like the
        target, with a context of the target's size; kept until :meth:`close`."""
        t = self.target_ctx
        model = LlamaModel(path, self.target.settings)
        try:
            ctx = LlamaContext(model, replace(t.settings, n_ctx=t.n_ctx))
        except BaseException:
            model.close()
            raise
        self._cuts.append((model, ctx))
        return ctx

    def clear_caches(self) -> None:
        """Empty both KV caches (a timed run must not profit from an earlier one's prompt)."""
        self.target_ctx.clear()
        if self.draft_ctx is not None:
            self.draft_ctx.clear()
        for _, ctx in self._cuts:
            ctx.clear()

    def close(self) -> None:
        """Free the cuts, then the draft's and the target's contexts and models."""
        self._found.clear()  # its loaders would hand out the cuts closed here
        for model, ctx in self._cuts:
            ctx.close()
            model.close()
        self._cuts = []
        for obj in (self.draft_ctx, self.draft, self.target_ctx, self.target):
            if obj is not None:
                obj.close()

