"""What is saved with an assistant message: its ``GenerationStats`` and what produced them.

Stored as JSON in ``messages.stats`` with a ``version``: 2 is :meth:`ReplyStats.to_json`. Version
1 (schema 1's rows, no version key) was one flat object: the stats' fields, their speculative
detail as ``extra`` with ad-hoc keys, the decoder settings beside them; :func:`upgrade_v1` turns
it into version 2 (the schema migration to version 2 runs it over every row).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from specchat.engine.decode.events import BatchTiming, GenerationStats, SpecDetail

STATS_VERSION = 2


@dataclass(frozen=True)
class ReplyStats:
    generation: GenerationStats = field(default_factory=GenerationStats)
    decoder: str = ""  # "plain" | "speculative"
    # The drafters that proposed tokens in this reply, in the decoder's order ("ngram",
    # "model"; "lookahead"): what drafted, not what the decoder could have tried.
    drafters: tuple[str, ...] = ()
    gamma: int | None = None  # the last step's γ; None for plain decoding
    gamma_mode: str = ""  # what chose γ: "fixed", "auto · code", "pair"...
    ctx_size: int = 0
    pair: str = ""  # the pair's (or the single model's) label

    def to_json(self) -> str:
        doc = {"version": STATS_VERSION, "generation": self.generation.as_dict(),
               "decoder": self.decoder, "drafters": list(self.drafters),
               "gamma": self.gamma, "gamma_mode": self.gamma_mode,
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
        """Read back ``to_json()``'s object; missing fields take their defaults, derived values
        are recomputed; ValueError if a field holds the wrong kind of value."""
        gamma = doc.get("gamma")
        return cls(_generation(_map(doc.get("generation", {}))),
                   decoder=_str(doc.get("decoder", "")),
                   drafters=tuple(_str(n) for n in _list(doc.get("drafters", []))),
                   gamma=None if gamma is None else _int(gamma),
                   gamma_mode=_str(doc.get("gamma_mode", "")),
                   ctx_size=_int(doc.get("ctx_size", 0)), pair=_str(doc.get("pair", "")))


def _generation(d: Mapping[str, Any]) -> GenerationStats:
    values: dict[str, Any] = {}
    for f in fields(GenerationStats):
        if f.name != "detail" and f.name in d:
            # Every field but detail is a scalar whose default says its kind.
            values[f.name] = _SCALAR[type(f.default)](d[f.name])
    return GenerationStats(**values, detail=_detail(_map(d.get("detail", {}))))


def _detail(d: Mapping[str, Any]) -> SpecDetail:
    return SpecDetail(
        position_drafted=_ints(d.get("position_drafted", [])),
        position_accepted=_ints(d.get("position_accepted", [])),
        overlap_mean=_maybe_float(d.get("overlap_mean")),
        exact_match_alpha=_maybe_float(d.get("exact_match_alpha")),
        overlap_n=_int(d.get("overlap_n", 0)),
        verify_batches=tuple(BatchTiming(_int(b.get("size")), _int(b.get("count")),
                                         _float(b.get("ms")))
                             for b in map(_map, _list(d.get("verify_batches", [])))),
        draft_ms_per_token=_maybe_float(d.get("draft_ms_per_token")),
        steps_by_drafter=_counts(d.get("steps_by_drafter", {})),
        drafted_by_drafter=_counts(d.get("drafted_by_drafter", {})),
        accepted_by_drafter=_counts(d.get("accepted_by_drafter", {})),
        step_s=_float(d.get("step_s", 0.0)), llama_s=_float(d.get("llama_s", 0.0)))


# Schema 1's ``extra`` keys that SpecDetail keeps under the same name; the rest were derived
# (acceptance_by_position, overhead_share) or are regrouped (the verify timings by batch).
_V1_DETAIL = ("position_drafted", "position_accepted", "overlap_mean", "exact_match_alpha",
              "overlap_n", "draft_ms_per_token", "steps_by_drafter", "step_s", "llama_s")
_V1_SETTINGS = ("decoder", "gamma", "gamma_mode", "ctx_size", "pair")


def upgrade_v1(doc: Any) -> dict[str, Any]:
    """A version-1 stats object as version 2. Keys it does not know are dropped; ValueError if
    it is not an object or what is kept is malformed."""
    doc = _map(doc)
    extra = _map(doc.get("extra") or {})
    detail: dict[str, Any] = {k: extra[k] for k in _V1_DETAIL if k in extra}
    ms = _map(extra.get("verify_ms_by_batch") or {})
    n = _map(extra.get("verify_n_by_batch") or {})
    detail["verify_batches"] = [{"size": int(b), "count": n.get(b), "ms": ms[b]}
                                for b in sorted(ms, key=int)]
    generation = {f.name: doc[f.name] for f in fields(GenerationStats) if f.name in doc}
    out = {"version": STATS_VERSION, "generation": {**generation, "detail": detail},
           **{k: doc[k] for k in _V1_SETTINGS if k in doc}}
    ReplyStats.from_dict(out)  # refuse now what could not be read later
    return out


def _counts(v: Any) -> dict[str, int]:
    return {_str(k): _int(n) for k, n in _map(v).items()}


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"expected a whole number, got {v!r}")
    return v


def _float(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"expected a number, got {v!r}")
    return float(v)


def _maybe_float(v: Any) -> float | None:
    return None if v is None else _float(v)


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError(f"expected text, got {v!r}")
    return v


def _list(v: Any) -> list[Any]:
    if not isinstance(v, list):
        raise ValueError(f"expected a list, got {v!r}")
    return v


def _ints(v: Any) -> tuple[int, ...]:
    return tuple(_int(x) for x in _list(v))


def _map(v: Any) -> Mapping[str, Any]:
    if not isinstance(v, Mapping):
        raise ValueError(f"expected a mapping, got {v!r}")
    return v


_SCALAR = {int: _int, float: _float, str: _str}
