"""How many tokens to draft per step: the γ setting, and the simple policies.

The interface a policy implements, and the fixed policy, are the decoder's
(:mod:`specchat.engine.decode.step_policy`). Here: two baselines the auto controller
(:mod:`specchat.engine.policy.auto_gamma`) is measured against: Hugging Face transformers'
heuristic and a draft-confidence cutoff.

The user's γ *setting* (config file, CLI, app) is one tagged value, :class:`GammaSetting`, read
by :func:`parse_gamma` wherever it comes from: ``plan`` (the hardware-aware planner,
:mod:`specchat.engine.policy.planner`: chain, tree or plain each step, from measured costs — the
default), ``auto`` (the adaptive chain length of :mod:`specchat.engine.policy.auto_gamma`), ``pair``
(the pair's calibrated γ) or a whole number (a fixed draft length; 0 = plain steps).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from specchat.engine.decode.events import StepEvent
from specchat.engine.decode.plan import NONE
from specchat.engine.decode.step_policy import GAMMA_CAP, PolicyBase, check_gamma

GAMMA_DEFAULT = 4  # the draft length when a fixed γ is wanted and nobody named one

GammaKind = Literal["plan", "auto", "pair", "fixed"]
GAMMA_KINDS: tuple[GammaKind, ...] = ("plan", "auto", "pair", "fixed")


@dataclass(frozen=True, slots=True)
class GammaSetting:
    """What the user asked γ to be: ``plan``, ``auto``, ``pair``, or ``fixed`` with ``n``."""

    kind: GammaKind = "plan"
    n: int = GAMMA_DEFAULT  # the draft length of "fixed" (kept, unused, for the other kinds)

    def __str__(self) -> str:
        return str(self.n) if self.kind == "fixed" else self.kind

    def to_config(self) -> int | str:
        """As the config file stores it: the mode's name, or the number."""
        return self.n if self.kind == "fixed" else self.kind


GAMMA_HELP = f"plan, auto, pair or a whole number 0-{GAMMA_CAP}"
_ALIASES = {"plan": "plan", "planner": "plan", "auto": "auto", "pair": "pair"}


def parse_gamma(value: object, where: str = "γ") -> GammaSetting:
    """The one reader of a γ setting (config value, CLI text, settings form); ``where`` names
    the source for the error ("config.yaml: setting 'gamma'"). Raises ValueError."""
    if isinstance(value, GammaSetting):
        return value
    n: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    elif isinstance(value, str):
        text = value.strip().lower()
        if text in _ALIASES:
            return GammaSetting(_ALIASES[text])  # type: ignore[arg-type]
        if text.isdigit():
            n = int(text)
    if n is None:
        raise ValueError(f"{where} must be {GAMMA_HELP}, not {value!r}")
    if not 0 <= n <= GAMMA_CAP:
        raise ValueError(f"{where} must be between 0 and {GAMMA_CAP}, not {n}")
    return GammaSetting("fixed", n)


class HfHeuristic(PolicyBase):
    """transformers' "heuristic" schedule: start at 5; +2 after a step whose drafts were all
    accepted, else −1 (never below 1). The state persists across replies, as there."""

    label = "heuristic"

    def __init__(self, start: int = 5, gamma_max: int = GAMMA_CAP) -> None:
        self.gamma = check_gamma(start)
        self.gamma_max = check_gamma(gamma_max)

    def next_gamma(self) -> int:
        return self.gamma

    def observe(self, step: StepEvent) -> None:
        if step.drafter == NONE or step.gamma == 0:
            return
        if step.accepted == step.gamma:
            self.gamma = min(self.gamma + 2, self.gamma_max)
        else:
            self.gamma = max(self.gamma - 1, 1)

    def __repr__(self) -> str:
        return f"HfHeuristic({self.gamma})"


class ConfidenceCutoff(PolicyBase):
    """Draft while the draft model's top-1 probability stays at or above ``p_min`` (up to
    ``gamma_max`` tokens) — the cutoff llama.cpp's ``--draft-p-min`` applies."""

    def __init__(self, p_min: float, gamma_max: int = 10) -> None:
        if not 0.0 <= p_min <= 1.0:
            raise ValueError("p_min must be between 0 and 1")
        self.p_min = p_min
        self.gamma_max = check_gamma(gamma_max)
        self.label = f"p_min {p_min:g}"

    def next_gamma(self) -> int:
        return self.gamma_max

    def keep_drafting(self, drafted: int, top_prob: Callable[[], float]) -> bool:
        return drafted < self.gamma_max and top_prob() >= self.p_min

    def __repr__(self) -> str:
        return f"ConfidenceCutoff({self.p_min:g}, {self.gamma_max})"
