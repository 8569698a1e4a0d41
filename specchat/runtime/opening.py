"""Open a selection: fetch the models if needed, check they fit, load them as a :class:`Runtime`.

:meth:`Runtime.open` is the one place that turns catalog entries into loaded models and
contexts: it fetches the files, checks the pair's vocabularies and the main GPU, connects the
RPC servers, plans the load against the free memory (refusing one that does not fit), then
loads the target, and the draft model with the target's context window. A :class:`Runtime`
is what :mod:`.loaded`, :mod:`.policies` and :mod:`.decoders` make of those models.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from specchat.engine.llama import rpc
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.memory_plan import MemoryReadings, RemoteMemory, check, plan_load
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ModelSettings
from specchat.loading import (
    LoadProgress,
    RuntimeOptions,
    Selection,
    check_main_gpu,
    check_pair,
    load_requests,
)
from specchat.models.mtp import detect_path
from specchat.models.progress import ProgressFn, no_progress
from specchat.models.resolver import ModelResolver
from specchat.models.vocab_compat import Finding
from specchat.runtime.decoders import Decoders


class Runtime(Decoders):
    """A selection opened: its loaded models and contexts, the γ policies and the decoders
    they serve (:class:`~specchat.runtime.decoders.Decoders`), closed with :meth:`close`."""

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
        warnings: list[Finding] = []
        if draft_path is not None:
            warnings = check_pair(target_path, draft_path)
        check_main_gpu(options)
        reqs = load_requests(selection, target_path, draft_path, options)
        remote = None
        if options.target.rpc:  # the servers first: the memory check counts theirs
            servers = options.target.rpc
            rpc.connect(servers)
            free, total = rpc.remote_memory(servers) or (None, None)
            remote = RemoteMemory(servers, free, total)
        if options.memory_check:
            plan = plan_load(reqs, readings or MemoryReadings.now(remote))
            check(plan)
        else:  # no readings: "auto" means every layer, as llama.cpp would do
            plan = plan_load(reqs, MemoryReadings.unknown(remote))
        opened: list[LlamaModel | LlamaContext] = []
        loading = LoadProgress(plan, report)
        try:
            target = LlamaModel(target_path, _with_mtp(target_path, plan.plans[0].model_settings),
                                loading.model(0))
            opened.append(target)
            target_ctx = LlamaContext(target, options.context)
            opened.append(target_ctx)
            draft = draft_ctx = None
            if draft_path is not None:
                draft = LlamaModel(draft_path, plan.plan("draft").model_settings,
                                   loading.model(1))
                opened.append(draft)
                # Same window as the target's (n_ctx 0 means each model's own training length).
                draft_ctx = LlamaContext(draft, replace(options.draft_ctx, n_ctx=target_ctx.n_ctx))
        except BaseException:
            for obj in reversed(opened):  # free GPU memory now, not at garbage collection
                obj.close()
            raise
        loading.finished()
        runtime = cls(selection, target, target_ctx, draft, draft_ctx, plan)
        runtime.pair_warnings = warnings
        runtime.paths = resolver.paths
        runtime.resolver = resolver
        return runtime


def _with_mtp(path: Path, settings: ModelSettings) -> ModelSettings:
    """The target's settings from its header: its MTP layers loaded when llama.cpp can run them
    (for ``--drafter mtp``), one block more in memory, which the load's memory estimate does not
    count."""
    heads = detect_path(path)
    return replace(settings, load_mtp=True) if heads is not None and heads.runnable else settings
