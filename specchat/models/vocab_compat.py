"""Can this draft model draft for that target? Compare their vocabularies from GGUF metadata.

Speculative decoding feeds the target's token ids to the draft and back, so what must agree is
the *meaning of every id the draft can propose*: the token texts. A draft whose vocabulary is
the target's plus or minus unused padding at the end still works (the engine restricts the
draft to the shared ids); anything else is refused, with the first id that differs.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import Enum
from typing import Any

from specchat.errors import ModelFileError
from specchat.formats.gguf_checks import vocabulary_problem
from specchat.formats.gguf_file import TOKENS, GgufHeader


class Level(str, Enum):
    OK = "ok"
    WARN = "warning"
    BAD = "incompatible"


@dataclass(frozen=True)
class Finding:
    level: Level
    what: str  # a short label: "vocab size", "token texts", ...
    message: str  # a plain-words sentence


def tokens_of(h: GgufHeader) -> list[str]:
    toks = h.metadata.get(TOKENS)
    if toks is None:
        if h.token_texts:  # read with texts, and there are none: the file has no vocabulary
            raise ModelFileError(f"{h.path}: the model has no vocabulary ({TOKENS} is missing "
                                 "from its metadata), so it cannot be paired or used")
        raise ValueError(f"{h.path}: header was read without token texts")
    return list(toks)


def vocab_hash(tokens: list[str]) -> str:
    return hashlib.sha256("\0".join(tokens).encode("utf-8")).hexdigest()[:16]


def _is_padding(text: str) -> bool:
    t = text.lower()
    return "pad" in t or "unused" in t or t.startswith(("<extra", "[extra", "<|reserved"))


def compare_vocab(target: GgufHeader, draft: GgufHeader) -> list[Finding]:
    """Findings about the pair's vocabularies, worst first. No BAD finding → usable pair."""
    unusable = [Finding(Level.BAD, "vocabulary", f"the {role} cannot be used: {problem}")
                for role, h in (("target", target), ("draft", draft))
                if (problem := vocabulary_problem(h)) is not None]
    if unusable:  # e.g. no vocabulary, or one llama.cpp aborts on: nothing to compare
        return unusable
    out: list[Finding] = []
    tm = target.metadata.get("tokenizer.ggml.model")
    dm = draft.metadata.get("tokenizer.ggml.model")
    if tm != dm:
        out.append(Finding(Level.BAD, "tokenizer",
                           f"different tokenizer types: target {tm}, draft {dm}"))
    tt, dt = tokens_of(target), tokens_of(draft)
    n = min(len(tt), len(dt))
    if tt[:n] != dt[:n]:
        i = next(i for i in range(n) if tt[i] != dt[i])
        same = sum(1 for a, b in zip(tt, dt, strict=False) if a == b)
        out.append(Finding(
            Level.BAD, "token texts",
            f"token {i} is {tt[i]!r} in the target but {dt[i]!r} in the draft "
            f"({same} of {n} ids agree): the models use different vocabularies"))
    if len(tt) != len(dt):
        longer, extra = (tt, "target") if len(tt) > len(dt) else (dt, "draft")
        tail = longer[n:]
        if all(_is_padding(t) for t in tail[:64]) or len(tail) <= 256:
            out.append(Finding(
                Level.WARN, "vocab size",
                f"vocabulary sizes differ ({len(tt)} target, {len(dt)} draft); the {len(tail)} "
                f"extra ids of the {extra} look like padding, so only the shared ids are drafted"))
        else:
            out.append(Finding(Level.BAD, "vocab size",
                               f"vocabulary sizes differ: {len(tt)} target, {len(dt)} draft"))
    for key, label in (("tokenizer.ggml.bos_token_id", "BOS"),
                       ("tokenizer.ggml.eos_token_id", "EOS")):
        a, b = _int(target.metadata.get(key)), _int(draft.metadata.get(key))
        if a != b:
            out.append(Finding(Level.WARN, label,
                               f"{label} token differs (target {a}, draft {b}); ids mean the same "
                               "tokens, so drafting works, but replies end on the target's rule"))
    a, b = (target.metadata.get("tokenizer.ggml.add_bos_token"),
            draft.metadata.get("tokenizer.ggml.add_bos_token"))
    if a != b:
        out.append(Finding(Level.WARN, "add_bos",
                           f"add-BOS setting differs (target {a}, draft {b}); the draft sees "
                           "the target's tokens, so this is harmless"))
    order = {Level.BAD: 0, Level.WARN: 1, Level.OK: 2}
    return sorted(out, key=lambda f: order[f.level])


def _int(v: Any) -> int | None:
    return None if v is None else int(v)


def verdict(findings: list[Finding]) -> Level:
    """The worst level among the findings (OK findings are facts, not problems)."""
    if any(f.level is Level.BAD for f in findings):
        return Level.BAD
    if any(f.level is Level.WARN for f in findings):
        return Level.WARN
    return Level.OK


# ---------------------------------------------------------------- different vocabularies (TLI)

MIN_SHARED = 1000  # fewer shared tokens than this (or half a smaller vocabulary) cannot draft
MIN_MASS = 0.5  # nor can shared tokens covering less than half of the target's text


def _gpt2_byte_decoder() -> dict[str, int]:
    # GPT-2's byte-level BPE spells each byte as a printable character (bytes_to_unicode).
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


_GPT2 = _gpt2_byte_decoder()
_CONTROL, _USER_DEFINED, _UNUSED, _BYTE = 3, 4, 5, 6


def token_keys(h: GgufHeader) -> list[tuple[bool, bytes] | None] | None:
    """What each token is, (special, bytes), from the header alone; None when the tokenizer's
    spelling of bytes is not one specchat can read back."""
    model = h.metadata.get("tokenizer.ggml.model")
    if model not in ("gpt2", "llama"):
        return None
    types = h.metadata.get("tokenizer.ggml.token_type")
    out: list[tuple[bool, bytes] | None] = []
    for i, text in enumerate(tokens_of(h)):
        kind = int(types[i]) if types is not None and i < len(types) else 1
        if kind in (_CONTROL, _USER_DEFINED):
            out.append((True, text.encode("utf-8")))
            continue
        if kind == _UNUSED or not text:
            out.append(None)
            continue
        if model == "gpt2":
            try:
                out.append((False, bytes(_GPT2[c] for c in text)))
            except KeyError:
                out.append((False, text.encode("utf-8")))
        elif kind == _BYTE or (len(text) == 6 and text.startswith("<0x") and text.endswith(">")):
            out.append((False, bytes([int(text[3:5], 16)])))
        else:
            out.append((False, text.replace("\u2581", " ").encode("utf-8")))
    return out


def shared_tokens(target: GgufHeader, draft: GgufHeader) -> int | None:
    """How many tokens both vocabularies have, matched by their bytes (None: not readable)."""
    tk, dk = token_keys(target), token_keys(draft)
    if tk is None or dk is None:
        return None
    return len({k for k in tk if k is not None} & {k for k in dk if k is not None})


def cross_vocab_finding(target: GgufHeader, draft: GgufHeader, mass: float | None) -> Finding:
    """The verdict on drafting across different vocabularies: through the shared tokens, or
    refused when they are too few (saying how many)."""
    n = shared_tokens(target, draft)
    if n is None:
        kinds = {str(target.metadata.get('tokenizer.ggml.model')),
                 str(draft.metadata.get('tokenizer.ggml.model'))} - {"gpt2", "llama"}
        return Finding(Level.BAD, "token texts",
                       "the models use different vocabularies, and the tokens of a "
                       f"{', '.join(sorted(kinds))} tokenizer cannot be matched by their bytes")
    n_target = len(tokens_of(target))
    need = min(MIN_SHARED, n_target // 2)
    if n < need:
        return Finding(Level.BAD, "token texts",
                       f"different vocabularies sharing only {n} of the target's {n_target} "
                       f"tokens (at least {need} are needed): too few to draft through")
    if mass is not None and mass < MIN_MASS:
        return Finding(Level.BAD, "token texts",
                       f"different vocabularies: their {n} shared tokens are only {mass:.0%} "
                       "of the target's probability mass on calibration text, too few to help")
    share = (f" ({mass:.0%} of the target's probability mass on calibration text)"
             if mass is not None else "")
    return Finding(Level.WARN, "vocabulary",
                   f"different vocabularies: drafting through their {n} shared tokens{share}")
