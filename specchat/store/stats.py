"""What is saved with an assistant message: its ``GenerationStats`` and what produced them.

Stored as JSON in ``messages.stats`` with a ``version``: 2 is :meth:`ReplyStats.to_json`. Version
1 (schema 1's rows, no version key) was one flat object: the stats' fields, their speculative
detail as ``extra`` with ad-hoc keys, the decoder settings beside them; :func:`upgrade_v1` turns
it into version 2 (the schema migration to version 2 runs it over every row).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specchat.engine.events import GenerationStats

STATS_VERSION = 2


@dataclass(frozen=True)
class ReplyStats:
    generation: GenerationStats = field(default_factory=GenerationStats)
    decoder: str = ""  # "plain" | "speculative"
    gamma: int | None = None  # the last step's γ; None for plain decoding
    gamma_mode: str = ""  # what chose γ: "fixed", "auto · code", "pair"...
    ctx_size: int = 0
    pair: str = ""  # the pair's (or the single model's) label

    def to_json(self) -> str:
        doc = {"version": STATS_VERSION, "generation": self.generation.as_dict(),
               "decoder": self.decoder, "gamma": self.gamma, "gamma_mode": self.gamma_mode,
               "ctx_size": self.ctx_size, "pair": self.pair}
        return json.dumps(doc, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | None) -> ReplyStats | None:
        """The stored stats, or None if there are none or the cell is damaged (a damaged cell
        costs the numbers, never the message)."""
        if not text:
            return None
        try:
            doc = json.loads(text)
            if not isinstance(doc, dict) or doc.get("version") != STATS_VERSION:
                return None
            return cls.from_dict(doc)
        except ValueError:  # json.JSONDecodeError is one
            return None

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> ReplyStats:
        gen = doc.get("generation", {})
        gamma = doc.get("gamma")
        if not isinstance(gen, Mapping) or not (gamma is None or type(gamma) is int):
            raise ValueError("malformed reply stats")
        text = {k: doc.get(k, "") for k in ("decoder", "gamma_mode", "pair")}
        ctx = doc.get("ctx_size", 0)
        if not all(isinstance(v, str) for v in text.values()) or type(ctx) is not int:
            raise ValueError("malformed reply stats")
        return cls(GenerationStats.from_dict(gen), gamma=gamma, ctx_size=ctx, **text)


# Schema 1's ``extra`` keys that SpecDetail keeps under the same name; the rest were derived
# (acceptance_by_position, overhead_share) or are regrouped (the verify timings by batch).
_V1_DETAIL = ("position_drafted", "position_accepted", "overlap_mean", "exact_match_alpha",
              "overlap_n", "draft_ms_per_token", "steps_by_drafter", "step_s", "llama_s")
_V1_SETTINGS = ("decoder", "gamma", "gamma_mode", "ctx_size", "pair")


def upgrade_v1(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A version-1 stats object as version 2. Keys it does not know are dropped; ValueError if
    what is kept is malformed (``ReplyStats.from_dict`` checks it)."""
    extra = doc.get("extra") or {}
    if not isinstance(extra, Mapping):
        raise ValueError("malformed stats detail")
    detail: dict[str, Any] = {k: extra[k] for k in _V1_DETAIL if k in extra}
    ms, n = extra.get("verify_ms_by_batch") or {}, extra.get("verify_n_by_batch") or {}
    if not isinstance(ms, Mapping) or not isinstance(n, Mapping):
        raise ValueError("malformed verify timings")
    detail["verify_batches"] = [{"size": int(b), "count": n.get(b), "ms": ms[b]}
                                for b in sorted(ms, key=int)]
    gen_keys = set(GenerationStats.__dataclass_fields__) - {"detail"}
    generation = {k: doc[k] for k in gen_keys if k in doc}
    out = {"version": STATS_VERSION, "generation": {**generation, "detail": detail},
           **{k: doc[k] for k in _V1_SETTINGS if k in doc}}
    ReplyStats.from_dict(out)  # refuse now what could not be read later
    return out
