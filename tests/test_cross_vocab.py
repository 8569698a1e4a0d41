"""Drafting across different vocabularies (TLI): exact, greedy-equal, and refused when useless.

- The whole decoder on scripted contexts whose vocabularies differ (the draft lacks one target
  token, has one of its own, numbers the rest differently, and reads the committed text through
  its own tokenizer): 10⁵ committed tokens at T = 0.9 follow the target's rows (χ² at 1e-6,
  exact quantile). Control: forgetting to renormalise q on the shared tokens fails the test.
- Real tiny models: greedy output through a different-vocabulary draft equals plain greedy
  output; sampled continuations are distributed as plain ones (χ² homogeneity); the pairing
  check says how many tokens are shared, and refuses a vocabulary sharing too few.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import cast

import gguf
import numpy as np
import pytest

from specchat.bench.chi2 import chi_square, critical_value, homogeneity
from specchat.cli.prove_cmd import sample
from specchat.devtools.scripted import ScriptedContext
from specchat.devtools.tiny_models import (
    CHARS,
    MERGES,
    SPECIALS,
    TinySpec,
    few_shared_vocabulary,
    write_tiny_model,
)
from specchat.engine.decode.decoding import run_to_end
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.sampling import Distribution, SamplerSettings, distribution
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.step_policy import FixedGamma
from specchat.engine.drafters._cross_vocab import CrossVocabDraft, VocabMap, valid_utf8_prefix
from specchat.engine.drafters.model import ModelDrafter
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings
from specchat.errors import IncompatiblePairError
from specchat.loading import check_pair
from specchat.models.compat import check_files
from specchat.models.vocab_compat import Level

V = 5  # target tokens: b"a" .. b"e"
T09 = SamplerSettings(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0)
TARGET_PIECES = [bytes([ord("a") + i]) for i in range(V)]
# The draft: no "d", a "z" of its own, the others numbered differently.
DRAFT_PIECES = [b"c", b"a", b"z", b"b", b"e", b"ab"]


def target_table(seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).normal(size=(V, V)) * 1.4).astype(np.float32)


def draft_tokenize(data: bytes) -> list[int]:
    """Longest match over the draft's pieces; a byte it lacks reads as "z"."""
    out, i = [], 0
    while i < len(data):
        if data[i:i + 2] == b"ab":
            out.append(5)
            i += 2
            continue
        piece = data[i:i + 1]
        out.append(DRAFT_PIECES.index(piece) if piece in DRAFT_PIECES else 2)
        i += 1
    return out


def scripted_cross(seed: int) -> tuple[LlamaContext, ModelDrafter]:
    tc = ScriptedContext(target_table(seed))
    rng = np.random.default_rng(seed + 100)
    # The draft knows the target a little: its row for a shared token follows the target's.
    dtable = rng.normal(size=(len(DRAFT_PIECES), len(DRAFT_PIECES))).astype(np.float32)
    dc = ScriptedContext(dtable)
    vmap = VocabMap.from_keys([(False, p) for p in TARGET_PIECES],
                              [(False, p) for p in DRAFT_PIECES])
    dm = CrossVocabDraft(cast(LlamaContext, tc), cast(LlamaContext, dc), vmap,
                         target_piece=lambda t: TARGET_PIECES[t], tokenize=draft_tokenize)
    return cast(LlamaContext, tc), ModelDrafter(dm)


def transitions(seed: int, s: SamplerSettings, replies: int, length: int
                ) -> Iterator[tuple[int, int]]:
    tc, drafter = scripted_cross(seed)
    dec = SpeculativeDecoder(tc, None, FixedGamma(4), [drafter])
    for r in range(replies):
        run = run_to_end(dec, [0], s.with_(seed=r, max_tokens=length))
        seq = [0, *run.tokens]
        yield from (((a + j) % V, b) for j, (a, b) in enumerate(pairwise(seq)))


def transition_test(pairs: Iterator[tuple[int, int]], s: SamplerSettings, seed: int
                    ) -> tuple[float, float, int]:
    t = target_table(seed)
    by_row: dict[int, Counter[int]] = {}
    n = 0
    for a, b in pairs:
        by_row.setdefault(a, Counter())[b] += 1
        n += 1
    stat, df = 0.0, 0
    for a, counts in by_row.items():
        p = distribution(t[a], s)
        r = chi_square(counts, dict(zip(p.ids.tolist(), p.probs.tolist(), strict=True)))
        stat += r.statistic
        df += r.df
    return stat, critical_value(df), n


def test_the_vocabulary_map_matches_tokens_by_bytes() -> None:
    vm = VocabMap.from_keys([(False, p) for p in TARGET_PIECES],
                            [(False, p) for p in DRAFT_PIECES])
    assert vm.n_shared == 4
    assert vm.t2d.tolist() == [1, 3, 0, -1, 4]
    assert vm.d2t.tolist() == [2, 0, -1, 1, 4, -1]
    q = Distribution(np.array([2, 0, 1]), np.array([0.5, 0.3, 0.2]))  # "z" is not shared
    r = vm.restrict(q)
    assert r is not None and r.ids.tolist() == [2, 0] and np.allclose(r.probs, [0.6, 0.4])
    assert vm.restrict(Distribution(np.array([2]), np.array([1.0]))) is None
    assert not vm.same()


def test_an_incomplete_utf8_character_waits() -> None:
    e = "é".encode()
    assert valid_utf8_prefix(b"ab" + e[:1]) == 2
    assert valid_utf8_prefix(b"ab" + e) == 4
    assert valid_utf8_prefix("€".encode()[:2]) == 0


def test_the_decoder_through_another_vocabulary_commits_the_target_chain() -> None:
    stat, crit, n = transition_test(transitions(11, T09, 1000, 100), T09, 11)
    assert n >= 100_000
    assert stat <= crit, (stat, crit)


def test_control_q_not_renormalised_on_the_shared_tokens_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def unnormalised(self: VocabMap, q: Distribution) -> Distribution | None:
        t = self.d2t[q.ids]
        keep = t >= 0
        return Distribution(t[keep], q.probs[keep]) if keep.any() else None

    monkeypatch.setattr(VocabMap, "restrict", unnormalised)
    stat, crit, _ = transition_test(transitions(11, T09, 1000, 100), T09, 11)
    assert stat > crit, (stat, crit)


def test_greedy_through_another_vocabulary_is_the_target_argmax_chain() -> None:
    tc, drafter = scripted_cross(5)
    t = target_table(5)
    run = run_to_end(SpeculativeDecoder(tc, None, FixedGamma(4), [drafter]), [0],
                     SamplerSettings(temperature=0, max_tokens=300), threading.Event())
    seq = [0, *run.tokens]
    assert all(b == int(np.argmax(t[(a + j) % V])) for j, (a, b) in enumerate(pairwise(seq)))
    assert any(s.accepted for s in run.steps)


# ------------------------------------------------------------------------- real tiny models

def other_tokens() -> list[str]:
    """Another vocabulary: the same specials and merges, the characters in another order
    without '?' and '!', and two tokens of its own."""
    chars = [c for c in reversed(CHARS) if c not in "?!"]
    merged = [m.replace(" ", "") for m in MERGES]
    return SPECIALS + chars + merged + ["<y0>", "<y1>"]


def renumbered(src: Path, dest: Path, tokens: list[str]) -> Path:
    """``src``'s network over the vocabulary ``tokens``: each token keeps its embedding and
    output rows where ``src`` has it (a new token gets small random ones), so the two models
    agree on the shared tokens while every id differs."""
    r = gguf.GGUFReader(src, "r")
    old = [str(bytes(r.fields["tokenizer.ggml.tokens"].parts[i]), "utf-8")
           for i in r.fields["tokenizer.ggml.tokens"].data]
    where = {t: i for i, t in enumerate(old)}
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(dest), "llama")
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = f.contents()
        if f.name == "tokenizer.ggml.tokens":
            value = tokens
        elif f.name == "tokenizer.ggml.token_type":
            value = [gguf.TokenType.CONTROL if t in SPECIALS else gguf.TokenType.NORMAL
                     for t in tokens]
        w.add_key_value(f.name, value, vtype, sub_type=sub)
    for t in r.tensors:
        data = np.array(t.data)
        if t.name in ("token_embd.weight", "output.weight"):
            data = np.stack([data[where[tok]] if tok in where
                             else rng.normal(size=data.shape[1]).astype(np.float32) * 0.1
                             for tok in tokens])
        w.add_tensor(t.name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dest


@pytest.fixture(scope="module")
def cross_draft(tiny_dir: Path, tiny_target: Path) -> Path:
    return renumbered(tiny_target, tiny_dir / "cross.gguf", other_tokens())


@pytest.fixture(scope="module")
def few_draft(tiny_dir: Path) -> Path:
    return write_tiny_model(tiny_dir / "few.gguf", TinySpec(seed=5), tokens=few_shared_vocabulary(),
                            name="tiny-few")


def contexts(target: Path, draft: Path) -> tuple[LlamaContext, LlamaContext]:
    cs = ContextSettings(n_ctx=512, n_threads=1)
    return LlamaContext(LlamaModel(target), cs), LlamaContext(LlamaModel(draft), cs)


def test_the_pair_check_drafts_through_the_shared_tokens(tiny_target: Path,
                                                         cross_draft: Path) -> None:
    r = check_files(tiny_target, cross_draft)
    assert r.verdict is Level.WARN
    msg = next(f.message for f in r.findings if f.what == "vocabulary")
    assert msg.startswith("different vocabularies: drafting through their 50 shared tokens (")
    assert "of the target's probability mass on calibration text" in msg
    assert check_pair(tiny_target, cross_draft)  # the runtime loads it, with the warning


def test_a_vocabulary_sharing_too_few_tokens_is_refused_with_how_many(
        tiny_target: Path, few_draft: Path) -> None:
    r = check_files(tiny_target, few_draft)
    assert r.verdict is Level.BAD
    assert "sharing only 18 of the target's 52 tokens" in r.findings[0].message
    with pytest.raises(IncompatiblePairError, match="sharing only 18 of"):
        check_pair(tiny_target, few_draft)


def test_real_greedy_through_another_vocabulary_equals_plain(tiny_target: Path,
                                                             cross_draft: Path) -> None:
    tc, dc = contexts(tiny_target, cross_draft)
    prompt = tc.model.tokenize("<|im_start|>user\nthe cat sat on the mat<|im_end|>\n")
    s = SamplerSettings(temperature=0, max_tokens=80)
    plain = run_to_end(PlainDecoder(tc), prompt, s, threading.Event()).tokens
    dec = SpeculativeDecoder(tc, dc, FixedGamma(3), ["model"])
    assert isinstance(cast(ModelDrafter, dec.drafters[0]).dm, CrossVocabDraft)
    spec = run_to_end(dec, prompt, s, threading.Event())
    assert spec.tokens == plain
    # The same network behind both vocabularies: it agrees except where a token is missing.
    assert sum(st.accepted for st in spec.steps) > 0.5 * sum(st.gamma for st in spec.steps)


def test_real_sampled_continuations_are_distributed_as_plain(tiny_target: Path,
                                                             cross_draft: Path) -> None:
    tc, dc = contexts(tiny_target, cross_draft)
    prompt = tc.model.tokenize("<|im_start|>user\nhi<|im_end|>\n")
    s = SamplerSettings(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0, max_tokens=2)
    cancel = threading.Event()
    a = sample(PlainDecoder(tc), prompt, lambda x: s.with_(seed=x), range(0, 3000), cancel)
    spec = SpeculativeDecoder(tc, dc, FixedGamma(3), ["model"])
    b = sample(spec, prompt, lambda x: s.with_(seed=x), range(3000, 6000), cancel)
    assert homogeneity(a.counts, b.counts).p_value >= 1e-6


def test_a_pair_of_two_vocabularies_calibrates_through_the_shared_tokens(
        tiny_target: Path, cross_draft: Path) -> None:
    """Calibration (and bench's cost curve) time and teacher-force the draft on its own tokens
    of the text: fed the target's ids it would fail inside llama.cpp."""
    from specchat.engine.drafters._cross_vocab import in_draft_vocab
    from specchat.engine.policy.agreement import agreement_trace, cross_agreement_trace
    from specchat.models.calibration import CalibrationOptions, CalibrationPrompt, calibrate

    tc, dc = contexts(tiny_target, cross_draft)
    prompt = tc.model.tokenize("<|im_start|>user\nthe cat sat on the mat<|im_end|>\n")
    assert in_draft_vocab(tc.model, dc.model, prompt) != prompt  # other ids, the same text
    assert dc.model.detokenize(in_draft_vocab(tc.model, dc.model, prompt)) == \
        tc.model.detokenize(prompt)
    assert in_draft_vocab(tc.model, tc.model, prompt) == prompt
    reply = run_to_end(PlainDecoder(tc), prompt, SamplerSettings(temperature=0, max_tokens=24),
                       threading.Event()).tokens
    cross = cross_agreement_trace(tc, dc, prompt, reply)
    # The same network behind both vocabularies: greedy choices agree where a token is shared.
    assert cross.positions == len(reply) and 0.5 < cross.alpha <= 1.0
    assert cross.draft_top is not None and len(cross.draft_top) == len(reply)
    same = agreement_trace(tc, LlamaContext(LlamaModel(tiny_target), ContextSettings(n_ctx=512)),
                           prompt, reply)
    assert same.alpha == 1.0  # the control: the target against itself agrees everywhere
    opts = CalibrationOptions(max_tokens=16, gamma_max=3, n_ctx=512, repeats=1, n_threads=1,
                              prompts=(CalibrationPrompt("a", "hello there"),
                                       CalibrationPrompt("b", "the cat sat on the mat")))
    r = calibrate(tiny_target, cross_draft, opts)
    assert 0 < r.alpha <= 1 and r.positions > 0 and r.draft_s > 0
    assert len(r.confidence) > 0
