"""Constrained decoding (JSON schemas, Lark and GBNF grammars through llguidance) on tiny real
GGUF pairs whose vocabulary has JSON's punctuation: the reply follows the grammar, greedy
speculative output is plain's, and sampled output is distributed as the masked target's."""

from __future__ import annotations

import contextlib
import json
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from specchat.bench.chi2 import chi_square
from specchat.engine.decode import speculative, target_pass
from specchat.engine.decode.decoding import Decoder
from specchat.engine.decode.drafting import DraftRequest, Proposal
from specchat.engine.decode.events import Event, GenerationStats, StepEvent, TokenEvent
from specchat.engine.decode.grammar import Constraint, GrammarError, compile_grammar, start
from specchat.engine.decode.grammar_drafts import allowed_part
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.sampling import SamplerSettings, distribution
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.step_policy import FixedGamma
from specchat.engine.decode.verify import one_hot
from specchat.engine.drafters.ngram import NgramDrafter
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings

# A record with a bounded string, a bounded integer and a boolean, written compactly: every
# reply ends, and its keys and punctuation are forced (where drafts are accepted).
RECORD = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 6},
                   "age": {"type": "integer", "minimum": 0, "maximum": 99},
                   "ok": {"type": "boolean"}},
    "required": ["name", "age", "ok"],
    "additionalProperties": False,
    "x-guidance": {"whitespace_flexible": False},
}
# Free strings from the second token on: room for the draft to be wrong (rejections, residuals).
STRINGS = {"type": "array", "items": {"type": "string"},
           "x-guidance": {"whitespace_flexible": False}}
T1 = SamplerSettings(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
GREEDY = SamplerSettings(temperature=0, max_tokens=60)


@pytest.fixture(scope="module")
def target(tiny_json_target: Path) -> LlamaModel:
    return LlamaModel(tiny_json_target)


@pytest.fixture(scope="module")
def draft(tiny_json_draft: Path) -> LlamaModel:
    return LlamaModel(tiny_json_draft)


def ctx(model: LlamaModel) -> LlamaContext:
    return LlamaContext(model, ContextSettings(n_ctx=512, n_threads=1))


def prompt_of(model: LlamaModel, text: str = "hello there") -> list[int]:
    return model.tokenize(f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n")


def run(dec: Decoder, prompt: Sequence[int], s: SamplerSettings) -> tuple[list[Event], GenerationStats]:
    events = list(dec.run(prompt, s, threading.Event()))
    stats = events[-1]
    assert isinstance(stats, GenerationStats)
    return events, stats


def token_ids(events: list[Event]) -> list[int]:
    return [e.token_id for e in events if isinstance(e, TokenEvent)]


def text_of(model: LlamaModel, events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TokenEvent))


def schema(obj: dict[str, object]) -> str:
    return compile_grammar("json_schema", json.dumps(obj))


def is_record(text: str) -> bool:
    """``text`` parses as JSON and satisfies RECORD."""
    try:
        v = json.loads(text)
    except json.JSONDecodeError:
        return False
    return (isinstance(v, dict) and set(v) == {"name", "age", "ok"}
            and isinstance(v["name"], str) and len(v["name"]) <= 6
            and type(v["age"]) is int and 0 <= v["age"] <= 99 and type(v["ok"]) is bool)


# ----------------------------------------------------------------------- compiling


@pytest.mark.parametrize(("kind", "text", "says"), [
    ("json_schema", "{", "not valid JSON"),
    ("json_schema", "[1]", "must be a JSON object"),
    ("json_schema", '{"type": "foo"}', "does not compile: Invalid type: foo"),
    ("json_schema", '{"$ref": "#/nowhere"}', "does not compile"),
    ("grammar", "start: foo", 'unknown name: "foo"'),
    ("grammar", "  ", "empty"),
    ("grammar", "root ::= [a-", "grammar"),
])
def test_a_bad_schema_or_grammar_says_why_in_one_line(kind: str, text: str, says: str) -> None:
    with pytest.raises(GrammarError, match=says) as e:
        compile_grammar(kind, text)  # type: ignore[arg-type]
    assert "\n" not in str(e.value)


def test_lark_gbnf_and_json_object_compile(target: LlamaModel) -> None:
    """GBNF (llama.cpp's format) is converted; both forms allow the same first tokens."""
    gbnf = start(target, compile_grammar("grammar", 'root ::= "ab" | "c"'))
    lark = start(target, compile_grammar("grammar", 'start: "ab" | "c"'))
    assert gbnf is not None and lark is not None
    allowed = {target.piece(int(t)) for t in np.flatnonzero(gbnf.allowed())}
    assert allowed == {b"a", b"c"}
    assert np.array_equal(gbnf.allowed(), lark.allowed())
    obj = start(target, compile_grammar("json_object"))
    assert obj is not None
    assert {target.piece(int(t)) for t in np.flatnonzero(obj.allowed())} >= {b"{", b'{"'}


def test_the_matcher_follows_paths_and_rolls_back(target: LlamaModel) -> None:
    g = start(target, compile_grammar("grammar", 'start: "ab" "c"'))
    assert isinstance(g, Constraint)
    a, b, c = (target.tokenize(x, parse_special=False)[0] for x in "abc")
    first = g.allowed().copy()
    assert g.allows_path([a, b]) and not g.allows_path([b])
    assert g.allows_path([a]) and not g.allows_path([a, c])  # a refused token breaks nothing
    assert np.flatnonzero(g.allowed([a])).tolist() == [b]
    assert np.array_equal(g.allowed(), first)  # back at the start
    row = np.zeros(target.n_vocab, dtype=np.float32)
    masked = g.mask(row, [a, b])
    assert np.flatnonzero(np.isfinite(masked)).tolist() == [c]
    assert np.all(row == 0)  # a copy: llama.cpp's buffer is left alone
    g.advance([a, b])
    assert not g.accepting
    g.advance([c])
    assert g.accepting
    assert all(target.is_eog(int(t)) for t in np.flatnonzero(g.allowed()))
    with pytest.raises(GrammarError, match="breaks the grammar"):
        g.advance([a])


# -------------------------------------------------------------------------- greedy


def drafters_for(target: LlamaModel) -> dict[str, list[object] | None]:
    return {"model": None, "tree": ["tree"],
            "ngram": [NgramDrafter(n_min=1, is_eog=target.is_eog)]}


@pytest.mark.parametrize("drafter", ["model", "tree", "ngram"])
def test_greedy_speculative_is_token_identical_to_plain(target: LlamaModel, draft: LlamaModel,
                                                        drafter: str) -> None:
    g = schema(RECORD)
    s = GREEDY.with_(grammar=g)
    drafted = rejected = 0
    # (The last echoes a record: the lookup drafts from it, and is rejected where it differs.)
    for text in ("hello there", "the cat sat", "0123 abc", '{"name": "bob", "age": 3, "ok": true}'):
        prompt = prompt_of(target, text)
        plain, _ = run(PlainDecoder(ctx(target)), prompt, s)
        names = drafters_for(target)[drafter]
        dec = SpeculativeDecoder(ctx(target), None if drafter == "ngram" else ctx(draft),
                                 FixedGamma(4), names)  # type: ignore[arg-type]
        spec, stats = run(dec, prompt, s)
        assert token_ids(spec) == token_ids(plain), (text, drafter)
        assert is_record(text_of(target, plain)), text_of(target, plain)
        assert stats.stop_reason == "eos"
        drafted += stats.drafted
        rejected += sum(e.rejected for e in spec if isinstance(e, StepEvent))
    assert drafted > 10 and rejected > 0, (drafted, rejected)


def test_greedy_logprobs_are_the_masked_targets_in_both_decoders(target: LlamaModel,
                                                                 draft: LlamaModel) -> None:
    """Each token's log-probability is the masked, renormalised distribution's: forbidden
    tokens are never listed, and plain and speculative report the same figures."""
    s = GREEDY.with_(grammar=schema(RECORD), logprobs=5)
    prompt = prompt_of(target)
    plain, _ = run(PlainDecoder(ctx(target)), prompt, s)
    spec, _ = run(SpeculativeDecoder(ctx(target), ctx(draft), FixedGamma(3)), prompt, s)
    a = [e.logprob for e in plain if isinstance(e, TokenEvent)]
    b = [e.logprob for e in spec if isinstance(e, TokenEvent)]
    assert len(a) == len(b) > 10
    for x, y in zip(a, b, strict=True):
        assert x is not None and y is not None
        assert x.logprob == pytest.approx(y.logprob, abs=1e-4)
        assert [i for i, _ in x.top] == [i for i, _ in y.top]
    g = start(target, schema(RECORD))
    assert g is not None
    first = a[0]
    assert first is not None and all(g.allowed()[i] for i, lp in first.top if lp > -9999.0)
    forced = sum(1 for x in a if x is not None and x.logprob == pytest.approx(0.0, abs=1e-6))
    assert forced > 5  # a JSON reply's keys and punctuation: one allowed token, probability 1


# ------------------------------------------------------------------------- sampled


def exact_joint(model: LlamaModel, prompt: list[int], s: SamplerSettings, grammar: str,
                depth: int, prune: float = 1e-4) -> dict[object, float]:
    """P(first ``depth`` tokens, or fewer before the end) under plain constrained sampling,
    from the target's logits masked by a matcher that follows each prefix. Mass below
    ``prune`` goes to "other"."""
    c = ctx(model)
    g = start(model, grammar)
    assert g is not None
    out: dict[object, float] = {}

    def walk(prefix: tuple[int, ...], mass: float) -> None:
        c.truncate(0)
        row = g.mask(c.decode([*prompt, *prefix])[0], prefix)
        d = distribution(row, s)
        for t, p in zip(d.ids.tolist(), d.probs.tolist(), strict=True):
            path, m = (*prefix, t), mass * p
            if model.is_eog(t):  # the reply ends there; its end token is no token event
                out[prefix] = out.get(prefix, 0.0) + m
            elif len(path) == depth:
                out[path] = m
            elif m >= prune:
                walk(path, m)
            else:
                out["other"] = out.get("other", 0.0) + m

    walk((), 1.0)
    return out


def sampled_joint(dec: Decoder, prompt: list[int], s: SamplerSettings, depth: int, n: int,
                  known: dict[object, float]) -> tuple[Counter[object], int, int, Counter[str]]:
    """Counts of the first ``depth`` tokens over ``n`` seeds; the drafts made and rejected;
    the drafting steps by drafter."""
    counts: Counter[object] = Counter()
    by: Counter[str] = Counter()
    drafted = rejected = 0
    for seed in range(n):
        events, stats = run(dec, prompt, s.with_(seed=seed, max_tokens=depth))
        path = tuple(token_ids(events))
        counts[path if path in known else "other"] += 1
        drafted += stats.drafted
        rejected += sum(e.rejected for e in events if isinstance(e, StepEvent))
        by.update(e.drafter for e in events if isinstance(e, StepEvent) and e.gamma)
    return counts, drafted, rejected, by


@pytest.mark.parametrize(("drafter", "text", "min_rejected"), [
    ("model", "hello there", 200), ("tree", "hello there", 200),
    # An earlier reply in JSON: the lookup proposes its opening after "assistant\n", and
    # proposes what the grammar forbids elsewhere (cut: the draft model drafts instead).
    ("ngram,model", 'hi<|im_end|>\n<|im_start|>assistant\n["s4"]<|im_end|>\n'
                    '<|im_start|>user\nagain', 40)])
def test_sampled_constrained_speculation_is_exact(target: LlamaModel, draft: LlamaModel,
                                                  drafter: str, text: str,
                                                  min_rejected: int) -> None:
    """χ² against the masked target's exact joint of the first three tokens, with drafts
    made and rejected (the residual of a masked p and a masked q is what is tested). With
    ``ngram,model`` the lookup's forbidden chains are cut and the model drafts instead."""
    g = schema(STRINGS)
    prompt = prompt_of(target, text)
    s = T1.with_(grammar=g)
    exact = exact_joint(target, prompt, s, g, depth=3)
    names = {"model": None, "tree": ["tree"],
             "ngram,model": [NgramDrafter(n_min=1, is_eog=target.is_eog), "model"]}[drafter]
    dec = SpeculativeDecoder(ctx(target), ctx(draft), FixedGamma(2), names)  # type: ignore[arg-type]
    counts, drafted, rejected, by = sampled_joint(dec, prompt, s, 3, 2000, exact)
    result = chi_square(counts, exact)
    assert result.ok, str(result)
    assert drafted > 1000 and rejected > min_rejected, (drafted, rejected)
    if drafter == "ngram,model":
        assert by["ngram"] > 500, by


def test_a_forbidden_certain_draft_is_cut_and_a_random_one_kept(target: LlamaModel) -> None:
    g = start(target, compile_grammar("grammar", 'start: "ab" "c"'))
    assert g is not None
    a, b, c = (target.tokenize(x, parse_special=False)[0] for x in "abc")
    q = distribution(np.arange(target.n_vocab, dtype=np.float32), T1)
    sure = [one_hot(t) for t in (a, b, a, c)]
    chain = Proposal("ngram", (a, b, a, c), (-1, 0, 1, 2), tuple(sure))
    assert allowed_part(chain, g).tokens == (a, b)  # cut before the forbidden certain token
    drawn = replace(chain, q=(sure[0], sure[1], q, sure[3]))
    assert allowed_part(drawn, g).tokens == (a, b, a)  # a drawn one stays (p = 0 rejects it)
    fine = Proposal("ngram", (a, b, c, target.eos), (-1, 0, 1, 2), (*sure[:3], one_hot(target.eos)))
    assert allowed_part(fine, g) is fine  # an end token after a complete reply is allowed
    tree = Proposal("tree", (b, a), (-1, -1), tuple(sure[:2]))
    assert allowed_part(tree, g) is tree and allowed_part(chain, None) is chain


def test_a_target_left_unmasked_is_caught(target: LlamaModel, draft: LlamaModel,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Control: masking the draft but verifying against the target's unmasked rows writes
    tokens the grammar forbids, and the χ² check fails."""
    g = schema(STRINGS)
    prompt = prompt_of(target)
    s = T1.with_(grammar=g)
    exact = exact_joint(target, prompt, s, g, depth=3)
    monkeypatch.setattr(target_pass._TargetRows, "row", lambda self, i: self.rows[i])
    advance = speculative.SpeculativeDecoder._advance

    def lenient(self: SpeculativeDecoder, tokens: Sequence[int], reply: object) -> None:
        with contextlib.suppress(GrammarError):  # (a forbidden token is what it writes)
            advance(self, tokens, reply)  # type: ignore[arg-type]

    monkeypatch.setattr(speculative.SpeculativeDecoder, "_advance", lenient)
    dec = SpeculativeDecoder(ctx(target), ctx(draft), FixedGamma(2))
    counts, *_ = sampled_joint(dec, prompt, s, 3, 600, exact)
    assert not chi_square(counts, exact).ok


def test_an_unmasked_draft_is_still_exact_but_accepts_less(
        target: LlamaModel, draft: LlamaModel, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule is exact for any q the drafts were drawn from: a drafter that ignores the
    grammar (the n-gram lookup, Medusa's heads) only loses the drafts the grammar forbids."""
    g = schema(STRINGS)
    prompt = prompt_of(target)
    s = T1.with_(grammar=g)
    exact = exact_joint(target, prompt, s, g, depth=3)
    masked_dec = SpeculativeDecoder(ctx(target), ctx(draft), FixedGamma(2))
    with_mask = sampled_joint(masked_dec, prompt, s, 3, 300, exact)

    def unmasked(*args: object) -> DraftRequest:
        return DraftRequest(*args[:5])  # type: ignore[arg-type]

    monkeypatch.setattr(speculative, "DraftRequest", unmasked)
    dec = SpeculativeDecoder(ctx(target), ctx(draft), FixedGamma(2))
    counts, drafted, rejected, _ = sampled_joint(dec, prompt, s, 3, 2000, exact)
    result = chi_square(counts, exact)
    assert result.ok, str(result)
    assert drafted > 1000 and rejected > 200
    # Acceptance: the share of drafts kept, with and without the draft's mask.
    assert rejected / drafted > with_mask[2] / with_mask[1]


@pytest.mark.parametrize("drafter", ["model", "tree", "ngram"])
def test_every_sampled_reply_parses_against_the_schema(target: LlamaModel, draft: LlamaModel,
                                                       drafter: str) -> None:
    g = schema(RECORD)
    s = SamplerSettings(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=80,
                        grammar=g)
    prompt = prompt_of(target)
    names = drafters_for(target)[drafter]
    dec = SpeculativeDecoder(ctx(target), None if drafter == "ngram" else ctx(draft),
                             FixedGamma(3), names)  # type: ignore[arg-type]
    plain = PlainDecoder(ctx(target))
    for seed in range(40):
        for d in (dec, plain):
            events, stats = run(d, prompt, s.with_(seed=seed))
            text = text_of(target, events)
            assert stats.stop_reason == "eos" and is_record(text), (seed, d.name, text)
