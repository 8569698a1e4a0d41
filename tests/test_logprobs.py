"""Log-probabilities of the target's distribution on every committed token: the sampler's
definition on plain arrays, then plain and speculative decoding on the tiny real pair, whose
figures must agree (accepted, corrected and bonus tokens alike) with the target's own rows."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import numpy as np
import pytest

from specchat.devtools.tiny_models import TinySpec, write_tiny_model
from specchat.engine.decode.decoding import Decoder
from specchat.engine.decode.events import StepEvent, TokenEvent, TokenOrigin
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.sampling import (
    LOGPROB_FLOOR,
    SamplerSettings,
    distribution,
    token_logprobs,
)
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.step_policy import FixedGamma
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings

EXACT_KV = {"flash_attn": "off", "type_k": "f32", "type_v": "f32"}
GREEDY = SamplerSettings(temperature=0, max_tokens=32, logprobs=5)
SAMPLED = SamplerSettings(temperature=0.8, top_k=20, top_p=0.95, min_p=0.02, max_tokens=32,
                          logprobs=4)
# Logits differ slightly with how llama.cpp batched the tokens (F32 cache, no flash attention:
# ~1e-6 relative); an O(1) difference would be another row or another distribution.
TOL = 1e-3


# ------------------------------------------------------------------- the definition


def test_greedy_is_the_log_softmax_of_the_raw_logits() -> None:
    row = np.array([2.0, -1.0, 5.0, 5.0, 0.5, -np.inf], dtype=np.float32)
    lp = token_logprobs(row, 0, SamplerSettings(temperature=0, logprobs=3))
    finite = row[np.isfinite(row)].astype(np.float64)
    lse = math.log(np.exp(finite).sum())
    assert lp.logprob == pytest.approx(2.0 - lse)
    assert [i for i, _ in lp.top] == [2, 3, 0]  # by logit, ties by id
    assert [v for _, v in lp.top] == pytest.approx([5.0 - lse, 5.0 - lse, 2.0 - lse])
    assert token_logprobs(row, 5, SamplerSettings(temperature=0)).logprob == LOGPROB_FLOOR
    assert token_logprobs(row, 0, SamplerSettings(temperature=0, logprobs=0)).top == ()


def test_sampled_is_the_processed_distribution_the_token_was_drawn_from() -> None:
    rng = np.random.default_rng(0)
    row = (rng.standard_normal(200) * 3).astype(np.float32)
    s = SamplerSettings(temperature=0.5, top_k=10, top_p=0.9, min_p=0.0, logprobs=20)
    d = distribution(row, s)
    t = int(d.ids[1])
    lp = token_logprobs(row, t, s)
    assert lp.logprob == pytest.approx(math.log(d.prob(t)))
    # at most what the filters kept, likeliest first, summing (as probabilities) to one
    assert len(lp.top) == d.ids.size <= 10
    assert [i for i, _ in lp.top] == d.ids.tolist()
    assert sum(math.exp(v) for _, v in lp.top) == pytest.approx(1.0)
    filtered_out = int(np.argmin(row))
    assert token_logprobs(row, filtered_out, s).logprob == LOGPROB_FLOOR


def test_settings_refuse_a_count_out_of_range() -> None:
    for bad in (-1, 21):
        with pytest.raises(ValueError, match="0 to 20"):
            SamplerSettings(logprobs=bad).validate()
    assert SamplerSettings(logprobs=20).validate().logprobs == 20


# --------------------------------------------------------------------- the decoders


@pytest.fixture(scope="module")
def target(tiny_target: Path) -> LlamaModel:
    return LlamaModel(tiny_target)


@pytest.fixture(scope="module")
def draft(tmp_path_factory: pytest.TempPathFactory) -> LlamaModel:
    """A draft that agrees with the target about half the time: every fate happens."""
    path = tmp_path_factory.mktemp("lp") / "close.gguf"
    write_tiny_model(path, TinySpec(seed=2), noise_from=TinySpec(seed=1), noise=0.25)
    return LlamaModel(path)


def ctx(model: LlamaModel) -> LlamaContext:
    return LlamaContext(model, ContextSettings(n_ctx=512, n_threads=1, **EXACT_KV))


def prompt_of(model: LlamaModel, text: str) -> list[int]:
    return model.tokenize(f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n")


def tokens_of(dec: Decoder, prompt: list[int], s: SamplerSettings,
              kinds: set[str] | None = None) -> list[TokenEvent]:
    """The reply's token events (``kinds`` collects the steps' kinds: chain, tree, none)."""
    events = list(dec.run(prompt, s, threading.Event()))
    if kinds is not None:
        kinds |= {e.kind for e in events if isinstance(e, StepEvent)}
    return [e for e in events if isinstance(e, TokenEvent)]


def reference(model: LlamaModel, prompt: list[int], events: list[TokenEvent],
              s: SamplerSettings) -> list[tuple[float, list[int]]]:
    """Each token's figures from the target's own rows, one token at a time."""
    c = ctx(model)
    row = c.decode(prompt, logits="last")[0]
    out = []
    for ev in events:
        lp = token_logprobs(np.array(row), ev.token_id, s)
        out.append((lp.logprob, [i for i, _ in lp.top]))
        row = c.decode([ev.token_id], logits="last")[0]
    return out


def assert_matches(events: list[TokenEvent], ref: list[tuple[float, list[int]]]) -> None:
    assert len(events) == len(ref)
    for ev, (logprob, top) in zip(events, ref, strict=True):
        assert ev.logprob is not None, ev
        assert ev.logprob.logprob == pytest.approx(logprob, abs=TOL), ev
        assert [i for i, _ in ev.logprob.top] == top, ev


@pytest.mark.parametrize(("drafter", "gamma"), [("model", 3), ("tree", 8), ("ngram", 3)])
def test_greedy_speculative_reports_what_plain_reports(target: LlamaModel, draft: LlamaModel,
                                                       drafter: str, gamma: int) -> None:
    prompt = prompt_of(target, "the cat sat on the mat, the cat sat on the mat, the cat")
    plain = tokens_of(PlainDecoder(ctx(target)), prompt, GREEDY)
    dc = ctx(draft) if drafter != "ngram" else None
    kinds: set[str] = set()
    spec = tokens_of(SpeculativeDecoder(ctx(target), dc, FixedGamma(gamma), [drafter]),
                     prompt, GREEDY, kinds)
    assert "tree" in kinds or drafter != "tree"
    assert [e.token_id for e in spec] == [e.token_id for e in plain]
    assert {e.origin for e in spec} >= {TokenOrigin.ACCEPTED, TokenOrigin.CORRECTED}
    assert_matches(spec, [(e.logprob.logprob, [i for i, _ in e.logprob.top])  # type: ignore[union-attr]
                          for e in plain])
    assert_matches(plain, reference(target, prompt, plain, GREEDY))
    assert all(e.logprob is not None and e.logprob.top[0][0] == e.token_id for e in spec)


def test_sampled_figures_are_the_targets_for_every_fate(target: LlamaModel,
                                                        draft: LlamaModel) -> None:
    """Accepted drafts, corrected tokens (drawn from a residual) and bonus tokens all report
    the target's processed distribution at their position, never the draft's or the
    residual's; plain decoding the same."""
    prompt = prompt_of(target, "hello there")
    fates: set[TokenOrigin] = set()
    kinds: set[str] = set()
    for seed in (1, 2, 3):
        s = SAMPLED.with_(seed=seed)
        for drafter, gamma in (("model", 4), ("tree", 8)):
            dec = SpeculativeDecoder(ctx(target), ctx(draft), FixedGamma(gamma), [drafter])
            spec = tokens_of(dec, prompt, s, kinds)
            assert_matches(spec, reference(target, prompt, spec, s))
            fates |= {e.origin for e in spec}
        plain = tokens_of(PlainDecoder(ctx(target)), prompt, s)
        assert_matches(plain, reference(target, prompt, plain, s))
    assert fates >= {TokenOrigin.ACCEPTED, TokenOrigin.CORRECTED, TokenOrigin.BONUS}
    assert "tree" in kinds


def test_without_the_setting_no_token_carries_figures(target: LlamaModel,
                                                      draft: LlamaModel) -> None:
    prompt = prompt_of(target, "hello there")
    for dec in (PlainDecoder(ctx(target)), SpeculativeDecoder(ctx(target), ctx(draft))):
        for s in (GREEDY, SAMPLED.with_(seed=1)):
            events = tokens_of(dec, prompt, s.with_(logprobs=None))
            assert events and all(e.logprob is None for e in events)


def test_ask_json_carries_them_and_refuses_them_without_json(tiny_target: Path,
                                                             tmp_path: Path) -> None:
    from tests.test_cli import specchat

    home = tmp_path / "home"
    r = specchat(home, "ask", "hello", "--model", str(tiny_target), "--temperature", "0",
                 "--max-tokens", "5", "--json", "--logprobs", "2")
    assert r.returncode == 0, r.stderr
    tokens = [x for x in map(json.loads, r.stdout.splitlines()) if x["type"] == "token"]
    assert len(tokens) == 5
    for t in tokens:
        assert t["logprob"] <= 0 and len(t["top_logprobs"]) == 2
        assert t["top_logprobs"][0]["id"] == t["id"]  # greedy: the chosen is the likeliest
    for args, message in ((["--logprobs", "2"], "--logprobs needs --json"),
                          (["--json", "--logprobs", "21"], "0 to 20")):
        r = specchat(home, "ask", "hello", "--model", str(tiny_target), *args)
        assert r.returncode != 0 and message in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
