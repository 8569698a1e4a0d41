"""Open what the user asked for — a pair or a single model — as loaded models and contexts.

This is the one place that turns catalog entries into a running engine, for the CLI, the app
and the benchmarks alike.
"""

from __future__ import annotations

import contextlib
import difflib
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from specchat.engine.decode.decoding import Decoder
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.registry import DrafterEnv, build, usable
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.step_policy import FixedGamma, GammaPolicy
from specchat.engine.llama import amx, rpc
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.hardware import backend_label
from specchat.engine.llama.memory_plan import (
    MemoryReadings,
    PairPlan,
    RemoteMemory,
    check,
    plan_load,
)
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ModelSettings
from specchat.engine.llama.placement import Placement
from specchat.engine.llama.slots import SlotContext
from specchat.engine.policy.auto_gamma import AutoGamma, AutoGammaSeed, AutoGammaSettings
from specchat.engine.policy.controller import Controller
from specchat.engine.policy.gamma import GAMMA_DEFAULT, GammaSetting, parse_gamma
from specchat.engine.policy.planner import Planner
from specchat.engine.policy.planner_settings import PlannerSettings
from specchat.errors import BusyError, SpecchatError
from specchat.loading import (
    LoadProgress,
    RuntimeOptions,
    Selection,
    check_main_gpu,
    check_pair,
    load_requests,
)
from specchat.models.drafter_sources import Found, Target
from specchat.models.mtp import detect_path
from specchat.models.progress import ProgressFn, no_progress
from specchat.models.resolver import ModelResolver
from specchat.models.vocab_compat import Finding
from specchat.paths import AppPaths

# Calibration prompt categories → the auto controller's topics (engine.policy.topics.TOPICS).
# What drafts when nothing says (see drafter_names): prompt lookup where the conversation has a
# match (it reads nothing and costs a dictionary look-up, so it is free to try; the planner
# pauses it when it keeps being rejected), and the draft model where its measured costs pay,
# the planner choosing per step.
DEFAULT_PAIR_DRAFTERS = ("ngram", "model")
Learner = TypeVar("Learner", bound=Controller)  # a learning controller (plan, auto)
PREDICTION = "prediction"  # engine/drafters/prediction.py: drafts from a predicted output
# The drafters that run on a slot of a shared context (engine.llama.slots): none reads hidden
# states or keeps a context of its own beside the target's and the draft model's.
SLOT_DRAFTERS = ("model", "tree", "ngram", PREDICTION)


def prediction_counts(prediction: Sequence[int], reply: Sequence[int]) -> dict[str, int]:
    """OpenAI's ``completion_tokens_details`` for a predicted output: the prediction's tokens
    that appear in the reply (``accepted_prediction_tokens``) and the rest of it. The two
    token lists are aligned by their longest common runs (difflib's matching blocks), so the
    count is the output's, not the drafting's: identical replies to the same prediction count
    the same, however their drafts went."""
    matcher = difflib.SequenceMatcher(None, list(prediction), list(reply), autojunk=False)
    kept = sum(block.size for block in matcher.get_matching_blocks())
    return {"accepted_prediction_tokens": kept,
            "rejected_prediction_tokens": len(prediction) - kept}


CALIBRATION_TOPICS = {"coding": "code", "math": "math", "math_reasoning": "math",
                      "translation": "translation", "summarization": "summary"}


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

    @property
    def default_gamma(self) -> int:
        """The pair's calibrated γ (0: it recommends plain decoding), else the default."""
        pair = self.selection.pair
        return pair.gamma if pair is not None and pair.gamma is not None else GAMMA_DEFAULT

    def auto_seed(self) -> AutoGammaSeed | None:
        """What the pair's stored calibration tells a controller (its costs, its α, its α per
        kind of prompt as topic priors, the n-gram drafter's α); None when the pair was never
        calibrated here."""
        from specchat.models.calibration_store import load_calibration, load_target_curve

        if self.paths is None:
            return None
        if self.draft is None:
            # No pair, but the target's verify curve from any pair's calibration on this
            # machine: the planner then knows what a wide check costs (Lookahead's, Medusa's)
            # before paying for one.
            curve = load_target_curve(self.paths, self.target.path)
            return AutoGammaSeed(curve) if curve is not None else None
        cal = load_calibration(self.paths, self.target.path, self.draft.path)
        if cal is None:
            return None
        by_topic: dict[str, list[float]] = {}
        for p in cal.per_prompt:
            by_topic.setdefault(CALIBRATION_TOPICS.get(p.category, "chat"), []).append(p.alpha)
        priors = {t: sum(v) / len(v) for t, v in by_topic.items()}
        return AutoGammaSeed(cal.costs, cal.alpha, priors, cal.confidence, cal.ngram_alpha)

    def _state_file(self) -> Path | None:
        from specchat.models.controller_store import controller_file

        if self.paths is None or self.draft is None:
            return None
        try:
            return controller_file(self.paths, self.target.path, self.draft.path)
        except OSError:
            return None

    def _warm(self, controller: Learner) -> Learner:
        """Start ``controller`` from what this pair's controllers learnt in earlier processes
        (a state that does not load is ignored: the calibration's seed stands)."""
        from specchat.models.controller_store import UNREADABLE, load_states

        path = self._state_file()
        state = load_states(path).get(type(controller).__name__) if path else None
        if state is not None:
            with contextlib.suppress(*UNREADABLE):
                controller.load_state(state)
        self._controllers.append(controller)
        return controller

    def new_auto_gamma(self, settings: AutoGammaSettings | None = None,
                       clock: Callable[[], float] = time.perf_counter) -> AutoGamma:
        """A fresh auto-γ controller, seeded from the pair's calibration and its saved state."""
        return self._warm(AutoGamma(settings or AutoGammaSettings(), self.auto_seed(), clock))

    def new_planner(self, settings: PlannerSettings | None = None, ngram: bool = False,
                    clock: Callable[[], float] = time.perf_counter) -> Planner:
        """A fresh planner for one chat session or race, seeded like :meth:`new_auto_gamma`.
        ``ngram``: today's decoder drafts from n-grams too, so plan over both."""
        drafters = ("model", "ngram") if ngram and self.draft_ctx is not None else (
            ("ngram",) if ngram else ("model",))
        planner = Planner(settings or PlannerSettings(), self.auto_seed(), clock, drafters)
        self._warm(planner)
        return planner

    def reseed(self, seed: AutoGammaSeed) -> None:
        """A calibration of this pair ended while its controllers were in use (the app
        calibrates in the background): every learning controller handed out takes it in."""
        for c in self._controllers:
            c.reseed(seed)

    def save_controllers(self) -> None:
        """Keep, per kind, the state of the controller that learnt the most this process (a
        fresh process starts from it); a disk that refuses is not the user's problem now."""
        from specchat.models.controller_store import save_state

        path = self._state_file()
        if path is None:
            return
        best: dict[str, Controller] = {}
        for c in self._controllers:
            kind = type(c).__name__
            if c.learnt() and (kind not in best or c.learnt() > best[kind].learnt()):
                best[kind] = c
        for kind, c in best.items():
            with contextlib.suppress(OSError, BusyError):
                save_state(path, kind, c.state())

    def controller(self, decoder: Decoder) -> Controller | None:
        """The learning controller this runtime handed to ``decoder`` (None: plain decoding,
        a fixed γ, or a policy of the caller's own)."""
        policy = decoder.policy if isinstance(decoder, SpeculativeDecoder) else None
        return next((c for c in self._controllers if c is policy), None)

    def policy(self, gamma: GammaSetting | int | str | GammaPolicy | None = None,
               ngram: bool = False,
               clock: Callable[[], float] = time.perf_counter,
               fixed: tuple[int, str] | None = None) -> GammaPolicy:
        """A γ policy for one decoder. Learning ones (plan, auto) are new each call — one per
        chat session, one per race —, so what a race learns never moves a chat's controller.
        ``gamma`` None is the default setting (the planner). ``fixed``: the γ and label of a
        drafter that drafts alone with a step of its own, which auto-γ (it sizes chains only,
        not a drafter's own step) gives way to."""
        if gamma is not None and not isinstance(gamma, (GammaSetting, int, str)):
            return gamma
        try:
            setting = parse_gamma(GammaSetting() if gamma is None else gamma)
        except ValueError as e:
            raise SpecchatError(str(e)) from None
        if setting.kind == "plan":
            return self.new_planner(ngram=ngram, clock=clock)
        if setting.kind == "auto":
            return FixedGamma(*fixed) if fixed is not None else self.new_auto_gamma(clock=clock)
        if setting.kind == "pair":
            label = "pair" if self.selection.pair is not None else "default"
            return FixedGamma(self.default_gamma, label)
        return FixedGamma(setting.n, "fixed")

    def decoder(self, plain: bool = False,
                gamma: GammaSetting | int | str | GammaPolicy | None = None,
                ngram: bool | None = None, drafters: Sequence[str] | None = None,
                prediction: bool = False,
                slot: tuple[SlotContext, SlotContext | None] | None = None) -> Decoder:
        """Speculative when a draft is loaded or a drafter that needs none is asked for, else
        plain.

        ``gamma``: a :class:`GammaSetting` (or its text or number: "plan", "auto", "pair", N),
        a policy, or None for the default (the planner); see :meth:`policy`. ``drafters``:
        names, tried in turn (see :func:`drafter_names`); ``ngram`` True is the old spelling of
        ``ngram,model``, False takes prompt lookup out of the default. ``prediction``: the
        replies may carry a predicted output (``SamplerSettings.prediction``), which the
        prediction drafter tries first, with or without a draft model. ``slot``: the decoder
        runs on one slot of the shared contexts (:func:`engine.llama.slots.share`) instead of
        the runtime's own, with drafters and a policy of its own, timed on the slot's clock.
        """
        names = drafter_names(drafters, ngram, self.draft_ctx is not None)
        if prediction and not plain and PREDICTION not in names:
            names = (PREDICTION, *names)
        target = slot[0] if slot is not None else self.target_ctx
        if plain or not names:
            return PlainDecoder(target)
        if slot is not None:
            other = unshared_drafter(names)
            if other is not None:
                raise SpecchatError(
                    f"the '{other}' drafter cannot serve requests together: with "
                    f"--parallel above 1 choose from {', '.join(SLOT_DRAFTERS)}, or serve "
                    "with --parallel 1")
            env = DrafterEnv(slot[0], slot[1], target_name=self.selection.target.id)
        else:
            # Built here, so a drafter that lacks something (trained heads, a cut of the
            # target) says how to get it before anything runs.
            env = self._drafter_env(thorough=True)
        chosen = [build(n, env) for n in names]
        fixed = chosen[0].fixed_gamma if len(chosen) == 1 else None
        policy = self.policy(gamma, ngram="ngram" in names, clock=target.clock, fixed=fixed)
        return SpeculativeDecoder(target, env.draft, policy, chosen)

    def usable_drafters(self, names: Sequence[str]) -> tuple[str, ...]:
        """Of ``names``, those that can run with what is loaded (the app keeps one drafter
        setting for pairs and single models alike)."""
        return usable(names, self._drafter_env(thorough=False))

    def _drafter_env(self, thorough: bool) -> DrafterEnv:
        """The drafters' environment: the loaded models, and what the models layer's sources
        find for their needs, looked for when a drafter asks (``thorough``: see
        :class:`~specchat.models.drafter_sources.Target`)."""
        env = DrafterEnv(self.target_ctx, self.draft_ctx, target_name=self.selection.target.id)
        self._found.offer(env, Target(self.target, self.selection.target, self.paths,
                                      self.resolver, self._open_cut, thorough))
        return env

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
        self.save_controllers()
        self._controllers = []
        self._found.clear()  # its loaders would hand out the cuts closed here
        for model, ctx in self._cuts:
            ctx.close()
            model.close()
        self._cuts = []
        for obj in (self.draft_ctx, self.draft, self.target_ctx, self.target):
            if obj is not None:
                obj.close()


def _with_mtp(path: Path, settings: ModelSettings) -> ModelSettings:
    """The target's settings from its header: its MTP layers loaded when llama.cpp can run them
    (for ``--drafter mtp``), one block more in memory, which the load's memory estimate does not
    count."""
    heads = detect_path(path)
    return replace(settings, load_mtp=True) if heads is not None and heads.runnable else settings


def unshared_drafter(names: Sequence[str]) -> str | None:
    """The first of ``names`` whose state a slot of a shared context cannot keep (None: all
    of them can serve requests together)."""
    return next((n for n in names if n not in SLOT_DRAFTERS), None)


def drafter_names(drafters: Sequence[str] | None, ngram: bool | None, has_draft: bool
                  ) -> tuple[str, ...]:
    """The drafters to use: those named, else ``ngram,model`` (``ngram`` alone without a draft
    model) when ``ngram`` is set, else ``DEFAULT_PAIR_DRAFTERS`` when a draft model is loaded,
    else none."""
    if drafters:
        return tuple(drafters)
    if ngram:
        return ("ngram", "model") if has_draft else ("ngram",)
    if not has_draft:
        return ()
    if ngram is False:  # --no-ngram: prompt lookup out of the default
        return tuple(d for d in DEFAULT_PAIR_DRAFTERS if d != "ngram")
    return DEFAULT_PAIR_DRAFTERS
