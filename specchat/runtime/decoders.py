"""The decoders a runtime builds, and which drafters they run.

:meth:`Decoders.decoder` makes a plain decoder, or a speculative one over the drafters named
(by default prompt lookup and the draft model, :data:`DEFAULT_PAIR_DRAFTERS`; see
:func:`drafter_names`), on the runtime's own contexts or on one slot of the shared ones, with a
γ policy from :mod:`.policies`. The drafters are built through the engine's registry, by name,
from what the loaded models and the models layer's sources offer; only some can run on a slot
(:data:`SLOT_DRAFTERS`). :func:`prediction_counts` is OpenAI's account of a predicted output.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from specchat.engine.decode.decoding import Decoder
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.registry import DrafterEnv, build, usable
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.step_policy import GammaPolicy
from specchat.engine.llama.slots import SlotContext
from specchat.engine.policy.gamma import GammaSetting
from specchat.errors import SpecchatError
from specchat.models.drafter_sources import Target
from specchat.runtime.policies import Policies

# What drafts when nothing says (see drafter_names): prompt lookup where the conversation has a
# match (it reads nothing and costs a dictionary look-up, so it is free to try; the planner
# pauses it when it keeps being rejected), and the draft model where its measured costs pay,
# the planner choosing per step.
DEFAULT_PAIR_DRAFTERS = ("ngram", "model")
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


class Decoders(Policies):
    """The loaded models' decoders: plain or speculative, on the runtime's contexts or a slot."""

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
            env = DrafterEnv(slot[0], slot[1], target_name=self.selection.target.id,
                             keep=self._kept)
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
        env = DrafterEnv(self.target_ctx, self.draft_ctx, target_name=self.selection.target.id,
                         keep=self._kept)
        self._found.offer(env, Target(self.target, self.selection.target, self.paths,
                                      self.resolver, self._open_cut, thorough))
        return env


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
