"""What a decoder will do, in words a report or a JSON line records: which drafters it tries
and what chooses γ ("plan", "auto", "fixed 4", "pair 3"), read from the decoder itself, so what
is written is what ran, not what a flag or the config file asked for."""

from __future__ import annotations

from dataclasses import dataclass

from specchat.engine.decode.decoding import Decoder
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.step_policy import FixedGamma
from specchat.engine.policy.auto_gamma import AutoGamma
from specchat.engine.policy.planner import Planner


@dataclass(frozen=True)
class InForce:
    decoder: str  # "plain" | "speculative"
    drafters: tuple[str, ...] = ()  # tried in turn; () for plain decoding
    gamma_mode: str = "off"  # "plan", "auto", "fixed 4", "pair 3"; "off" for plain decoding

    def as_dict(self) -> dict[str, object]:
        return {"decoder": self.decoder, "drafters": list(self.drafters),
                "gamma_mode": self.gamma_mode}

    def line(self) -> str:
        """``drafter ngram, model · γ plan`` (``plain decoding``)."""
        if self.decoder == "plain":
            return "plain decoding"
        return f"drafter {', '.join(self.drafters) or '?'} · γ {self.gamma_mode}"


def in_force(decoder: Decoder) -> InForce:
    if not isinstance(decoder, SpeculativeDecoder):
        return InForce("plain")
    drafters = tuple(d.name for d in decoder.drafters)
    policy = decoder.policy
    if isinstance(policy, FixedGamma):
        mode = f"{policy.label} {policy.gamma}"  # "fixed 4", "pair 3", "default 4"
    elif isinstance(policy, Planner):
        mode = "plan"
    elif isinstance(policy, AutoGamma):
        mode = "auto"
    else:  # a policy of the caller's own: what it calls itself
        mode = policy.label
    return InForce("speculative", drafters, mode)
