"""The γ policies a runtime hands its decoders, and the learning controllers among them.

A fixed γ is the setting's (or the pair's calibrated one); a learning controller (the planner,
auto-γ) is new for each decoder — one per chat session, one per race —, seeded from the pair's
stored calibration (:meth:`~Policies.auto_seed`) and from the state its kind learnt in earlier
processes, and reseeded when a calibration ends while it is in use. On close, the state of the
controller of each kind that learnt the most is saved for the next process.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from specchat.engine.decode.decoding import Decoder
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.step_policy import FixedGamma, GammaPolicy
from specchat.engine.policy.auto_gamma import AutoGamma, AutoGammaSeed, AutoGammaSettings
from specchat.engine.policy.controller import Controller
from specchat.engine.policy.gamma import GAMMA_DEFAULT, GammaSetting, parse_gamma
from specchat.engine.policy.planner import Planner
from specchat.engine.policy.planner_settings import PlannerSettings
from specchat.errors import BusyError, SpecchatError
from specchat.runtime.loaded import LoadedModels

Learner = TypeVar("Learner", bound=Controller)  # a learning controller (plan, auto)
# Calibration prompt categories → the auto controller's topics (engine.policy.topics.TOPICS).
CALIBRATION_TOPICS = {"coding": "code", "math": "math", "math_reasoning": "math",
                      "translation": "translation", "summarization": "summary"}


class Policies(LoadedModels):
    """The loaded models' γ policies: a runtime's controllers, handed out, warmed and saved."""

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

    def close(self) -> None:
        """Save the controllers' state, then free the models (:meth:`LoadedModels.close`)."""
        self.save_controllers()
        self._controllers = []
        super().close()
