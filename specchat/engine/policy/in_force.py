"""What a decoder will do, in words a report or a JSON line records: which drafters it tries
and what chooses γ ("plan", "auto", "fixed 4", "pair 3"), read from the decoder itself, so what
is written is what ran, not what a flag or the config file asked for."""

from __future__ import annotations

from dataclasses import dataclass

from specchat.engine.decode.decoding import Decoder
from specchat.engine.decode.step_policy import FixedGamma


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
    if decoder.name == "plain":
        return InForce("plain")
    drafters = tuple(n for d in getattr(decoder, "drafters", ())  # a fallback: "ngram,model"
                     for n in str(getattr(d, "name", type(d).__name__)).split(",") if n)
    policy = getattr(decoder, "policy", None)
    if policy is None:
        mode = "?"
    elif isinstance(policy, FixedGamma):
        mode = f"{policy.label} {policy.gamma}"  # "fixed 4", "pair 3", "default 4"
    else:  # "plan · warm-up", "auto · code": the mode is the first word
        mode = str(policy.label).partition(" · ")[0]
    return InForce("speculative", drafters, mode)
