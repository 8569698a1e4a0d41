"""Token trees on tiny real GGUF models: one llama_decode per tree, caches cut to the accepted
path, greedy output identical to plain, the planner's seam, and bad input (trees that do not
fit, a drafter that fails, cancel mid-tree)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import llama_cpp
import numpy as np
import pytest
from test_speculative import EXACT_KV, exact_joint, prompt_of, sampled_joint

from specchat.bench.chi2 import chi_square
from specchat.engine.decode.decoding import run_to_end
from specchat.engine.decode.drafting import fit_shape
from specchat.engine.decode.events import NoticeEvent, RejectedEvent, StepEvent, TokenEvent
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.plan import Plan
from specchat.engine.decode.registry import parse_names
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.step_policy import FixedGamma, PolicyBase
from specchat.engine.drafters.tree import best_shape
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings
from specchat.engine.llama.token_tree import tree_paths
from specchat.errors import SpecchatError

GREEDY = SamplerSettings(temperature=0, max_tokens=40)
T1 = SamplerSettings(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)


@pytest.fixture(scope="module")
def target(tiny_target: Path) -> LlamaModel:
    return LlamaModel(tiny_target)


@pytest.fixture(scope="module")
def draft(tiny_draft: Path) -> LlamaModel:
    return LlamaModel(tiny_draft)


def ctx(model: LlamaModel, n_ctx: int = 512, **settings: object) -> LlamaContext:
    return LlamaContext(model, ContextSettings(n_ctx=n_ctx, n_threads=1, **settings))  # type: ignore[arg-type]


class Planner(PolicyBase):
    """A policy that answers next_plan with a fixed shape, recording what it is told."""

    label = "planner"
    plans_steps = True

    def __init__(self, shape: Sequence[int], drafter: str = "tree") -> None:
        self.shape = tuple(shape)
        self.drafter = drafter
        self.available: list[tuple[str, ...]] = []
        self.steps: list[StepEvent] = []

    def next_gamma(self) -> int:
        raise AssertionError("a planner is asked for plans, not lengths")

    def next_plan(self, available: tuple[str, ...]) -> Plan:
        self.available.append(available)
        return Plan(self.drafter, self.shape, f"tree {len(self.shape)}")

    def observe(self, step: StepEvent) -> None:
        self.steps.append(step)


def token_ids(events: Sequence[object]) -> list[int]:
    return [e.token_id for e in events if isinstance(e, TokenEvent)]


# ------------------------------------------------------------------------ the cache API


def test_tree_paths_give_each_node_the_paths_through_it() -> None:
    #        0   1  2  3  4  5
    shape = (-1, -1, 0, 0, 1, 4)
    assert tree_paths(shape) == [(0, 1), (2,), (0,), (1,), (2,), (2,)]


def test_a_tree_in_one_batch_equals_each_path_prefilled(target: LlamaModel) -> None:
    c, fresh = ctx(target, **EXACT_KV), ctx(target, **EXACT_KV)
    prompt = prompt_of(target)
    c.decode(prompt[:-1], logits="none")
    shape = (-1, 0, 0, 0, 1, 1, 2, 4)  # node 0 is the prompt's last token
    toks = [prompt[-1], 5, 9, 11, 12, 13, 14, 15]
    rows = c.decode_tree(shape, range(len(toks)), toks).copy()

    def path(i: int) -> list[int]:
        out = []
        while i >= 0:
            out.append(toks[i])
            i = shape[i]
        return out[::-1]

    for i in range(len(toks)):
        fresh.clear()
        want = fresh.decode([*prompt[:-1], *path(i)])[0]
        np.testing.assert_allclose(rows[i], want, atol=1e-4)
    c.keep_branch(shape, 6, path(6))  # the prompt's last token, 9, 14
    assert c.tokens == [*prompt[:-1], *path(6)]
    assert all(llama_cpp.llama_memory_seq_pos_max(c.mem, s) == -1 for s in range(1, 16))
    got = c.decode([7])[0].copy()
    fresh.clear()
    np.testing.assert_allclose(got, fresh.decode([*prompt[:-1], *path(6), 7])[0], atol=1e-4)


def test_fit_shape_shrinks_instead_of_failing() -> None:
    shape = best_shape(12)
    assert fit_shape(shape, 100, 100, 100) == shape
    small = fit_shape(shape, 5, 100, 100)
    assert len(small) == 5 and small == shape[:5]
    shallow = fit_shape(shape, 100, 1, 100)
    assert shallow and all(p == -1 for p in shallow)
    narrow = fit_shape(shape, 100, 100, 2)
    assert len(tree_paths(narrow)) == len(narrow) and max(max(p) for p in tree_paths(narrow)) < 2
    for s in (small, shallow, narrow):
        Plan("tree", s)  # still a valid tree


def test_drafter_names_parse_with_clear_errors() -> None:
    assert parse_names("ngram, model") == ("ngram", "model")
    assert parse_names("tree") == ("tree",)
    with pytest.raises(SpecchatError, match="unknown drafter 'eagle'"):
        parse_names("eagle")
    with pytest.raises(SpecchatError, match="named twice"):
        parse_names("model,model")


# ------------------------------------------------------------------------ greedy, exact


@pytest.mark.parametrize("gamma", [1, 3, 8, 16])
def test_greedy_tree_is_token_identical_to_plain(target: LlamaModel, draft: LlamaModel,
                                                 gamma: int) -> None:
    tc, dc = ctx(target), ctx(draft)
    for text in ("hello there", "the cat sat", "0123 abc"):
        prompt = prompt_of(target, text)
        plain = run_to_end(PlainDecoder(ctx(target)), prompt, GREEDY)
        run = run_to_end(SpeculativeDecoder(tc, dc, FixedGamma(gamma), ["tree"]), prompt, GREEDY)
        assert run.tokens == plain.tokens, (text, gamma)
        if gamma >= 8:  # the default shape of 3 is a chain: a second child rarely pays
            assert any(s.kind == "tree" for s in run.steps)


def test_tree_steps_report_what_a_planner_needs(target: LlamaModel, draft: LlamaModel) -> None:
    shape = (-1, -1, -1, 0, 0, 1, 3)
    policy = Planner(shape)
    dec = SpeculativeDecoder(ctx(target), ctx(draft), policy, ["tree", "ngram"])
    run = run_to_end(dec, prompt_of(target), T1.with_(seed=3, max_tokens=60))
    # n-gram is offered only on steps where its lookup has a match
    assert all(a[0] == "tree" and set(a) <= {"tree", "ngram"} for a in policy.available)
    assert policy.steps == run.steps
    trees = [s for s in run.steps if s.kind == "tree"]
    assert trees and all(s.plan_size <= len(shape) and s.reason == "tree 7" for s in trees)
    assert trees[0].plan_size == len(shape)  # shrunk only near max_tokens
    for s in trees:
        assert len(s.accepted_ranks) == s.accepted <= s.depth <= 3
        assert all(0 <= r < 3 for r in s.accepted_ranks)
    assert any(r > 0 for s in trees for r in s.accepted_ranks)  # a second child was kept


def test_sampled_tree_first_tokens_are_distributed_as_plain(target: LlamaModel,
                                                            tmp_path: Path) -> None:
    from specchat.devtools.tiny_models import TinySpec, write_tiny_model

    close = LlamaModel(write_tiny_model(tmp_path / "close.gguf", TinySpec(seed=2),
                                        noise_from=TinySpec(seed=1), noise=0.25))
    prompt = prompt_of(target)
    exact = exact_joint(target, prompt, T1, depth=3)
    dec = SpeculativeDecoder(ctx(target), ctx(close), Planner(best_shape(8)), ["tree"])
    result = chi_square(sampled_joint(dec, prompt, T1, depth=3, n=3000, known=exact), exact)
    assert result.ok, str(result)


# ------------------------------------------------------------------ caches after a reply


def test_both_caches_hold_the_committed_path(target: LlamaModel, draft: LlamaModel) -> None:
    tc, dc = ctx(target, **EXACT_KV), ctx(draft, **EXACT_KV)
    prompt = prompt_of(target)
    run = run_to_end(SpeculativeDecoder(tc, dc, Planner(best_shape(10)), ["tree"]), prompt,
                     T1.with_(seed=21, max_tokens=80))
    assert sum(s.kind == "tree" for s in run.steps) > 10
    assert sum(s.accepted < s.depth for s in run.steps) > 3
    seq = prompt + run.tokens
    assert tc.tokens == seq[:-1] and seq[: len(dc.tokens)] == dc.tokens
    for c in (tc, dc):
        assert all(llama_cpp.llama_memory_seq_pos_max(c.mem, s) == -1 for s in range(1, 16))
        assert llama_cpp.llama_memory_seq_pos_max(c.mem, 0) == len(c.tokens) - 1
    got = tc.decode(seq[-1:])[0].copy()
    fresh = ctx(target, **EXACT_KV)
    np.testing.assert_allclose(got, fresh.decode(seq)[0], atol=1e-4)
    dc.truncate(len(seq) - 1)
    got_d = dc.decode(seq[len(dc.tokens):])[0].copy()
    fresh_d = ctx(draft, **EXACT_KV)
    np.testing.assert_allclose(got_d, fresh_d.decode(seq)[0], atol=1e-4)


def test_losing_branches_are_reported_as_such(target: LlamaModel, draft: LlamaModel) -> None:
    dec = SpeculativeDecoder(ctx(target), ctx(draft), Planner((-1, -1, -1, 0, 1)), ["tree"])
    events = list(dec.run(prompt_of(target), T1.with_(seed=5, max_tokens=40), threading.Event()))
    rejected = [e for e in events if isinstance(e, RejectedEvent)]
    assert any(e.branch > 0 for e in rejected) and any(e.branch == 0 for e in rejected)
    steps = [e for e in events if isinstance(e, StepEvent)]
    # Every drafted token is either kept or reported as rejected.
    assert len(rejected) == sum(s.gamma - s.accepted for s in steps)


# --------------------------------------------------------------------------- bad input


def test_a_tree_larger_than_the_context_or_the_sequences_is_shrunk(target: LlamaModel,
                                                                   draft: LlamaModel) -> None:
    prompt = prompt_of(target)
    tc = ctx(target, 64, n_seq_max=3)
    dc = ctx(draft, 64, n_seq_max=3)
    n_ctx = tc.n_ctx
    wide = tuple([-1] * 12 + list(range(12)))  # 12 leaves would need 12 sequences
    run = run_to_end(SpeculativeDecoder(tc, dc, Planner(wide), ["tree"]), prompt,
                     T1.with_(seed=9, max_tokens=n_ctx))
    assert run.stats.stop_reason in ("context", "eos")
    assert max(s.gamma for s in run.steps) <= 3 * 2  # three paths of two
    if run.stats.stop_reason == "context":
        assert len(prompt) + run.stats.generated_tokens == n_ctx + 1


def test_a_drafter_that_fails_drops_out_with_a_notice(tmp_path: Path,
                                                      target: LlamaModel) -> None:
    from specchat.devtools.tiny_models import TinySpec, vocabulary, write_tiny_model

    big = LlamaModel(write_tiny_model(tmp_path / "big.gguf", TinySpec(seed=1),
                                      tokens=vocabulary(extra=8)))
    dec = SpeculativeDecoder(ctx(big), ctx(target), Planner(best_shape(6)), ["tree"])
    prompt = prompt_of(big)
    for seed in range(20):
        events = list(dec.run(prompt, T1.with_(seed=seed, max_tokens=60), threading.Event()))
        ids = token_ids(events)
        if any(t >= 52 for t in ids):
            notices = [e.message for e in events if isinstance(e, NoticeEvent)]
            assert any("the draft stopped: it cannot read token" in m for m in notices), notices
            cut = next(i for i, t in enumerate(ids) if t >= 52)
            later = [e for e in events if isinstance(e, StepEvent) and e.position > cut]
            assert all(s.drafter == "none" for s in later)
            assert len(ids) == 60
            return
    pytest.fail("the target never produced a token the draft cannot read")


def test_cancel_mid_tree_leaves_both_caches_consistent(target: LlamaModel,
                                                       draft: LlamaModel) -> None:
    """A tree of more than 16 nodes runs with llama.cpp's abort callback: cancel during the
    target's tree decode itself."""
    tc, dc = ctx(target), ctx(draft)
    cancel = threading.Event()
    real = tc.decode_tree
    calls = 0

    def cancelling(shape: Sequence[int], nodes: Sequence[int], tokens: Sequence[int]
                   ) -> np.ndarray:
        nonlocal calls
        calls += 1
        if calls == 3:
            cancel.set()
        return real(shape, nodes, tokens)

    tc.decode_tree = cancelling  # type: ignore[method-assign]
    prompt = prompt_of(target)
    dec = SpeculativeDecoder(tc, dc, Planner(best_shape(24)), ["tree"])
    events = list(dec.run(prompt, T1.with_(seed=1, max_tokens=200), cancel))
    stats = events[-1]
    assert getattr(stats, "stop_reason", None) == "cancelled" and calls == 3
    seq = prompt + token_ids(events)
    assert tc.tokens == seq[: len(tc.tokens)] and len(tc.tokens) >= len(seq) - 1
    assert seq[: len(dc.tokens)] == dc.tokens
    for c in (tc, dc):
        assert all(llama_cpp.llama_memory_seq_pos_max(c.mem, s) == -1 for s in range(1, 16))
        assert llama_cpp.llama_memory_seq_pos_max(c.mem, 0) == len(c.tokens) - 1
    # The next reply is what a fresh pair gives.
    tc.decode_tree = real  # type: ignore[method-assign]
    again = run_to_end(dec, prompt, GREEDY)
    fresh = run_to_end(PlainDecoder(ctx(target)), prompt, GREEDY)
    assert again.tokens == fresh.tokens


def test_the_fate_trace_shows_losing_branches_marked(target: LlamaModel, draft: LlamaModel
                                                     ) -> None:
    from specchat.store.fates import BRANCH, BRANCH_MARK, FateTrace

    dec = SpeculativeDecoder(ctx(target), ctx(draft), Planner((-1, -1, -1, 0, 1)), ["tree"])
    trace = FateTrace()
    events = list(dec.run(prompt_of(target), T1.with_(seed=5, max_tokens=40), threading.Event()))
    for ev in events:
        if isinstance(ev, TokenEvent):
            trace.add_token(ev)
        elif isinstance(ev, RejectedEvent):
            trace.add_rejected(ev)
    trace.finish()
    branches = [s for s in trace.segments if s.kind == BRANCH]
    assert branches and all(s.text.startswith(BRANCH_MARK) for s in branches)
    assert trace.text == target.detokenize(token_ids(events))  # the reply itself is untouched
    again = FateTrace.decode(trace.text, trace.encode())
    assert again.segments == trace.segments


def test_the_draft_model_is_prefilled_only_when_first_asked(target: LlamaModel,
                                                            draft: LlamaModel) -> None:
    """A reply whose steps never ask the draft model leaves its cache (and time) untouched."""
    tc, dc = ctx(target), ctx(draft)
    prompt = prompt_of(target, "the cat sat on the mat, the cat sat on the mat, the cat")
    run = run_to_end(SpeculativeDecoder(tc, dc, Planner((-1, 0, 1), "ngram"), ["ngram", "model"]),
                     prompt, GREEDY)
    assert dc.tokens == [] and dc.decode_s == 0.0
    assert any(s.drafter == "ngram" for s in run.steps)
    run = run_to_end(SpeculativeDecoder(tc, dc, FixedGamma(3), ["ngram", "model"]), prompt,
                     GREEDY)
    assert any(s.drafter == "model" for s in run.steps) and dc.tokens[: len(prompt)] == prompt


def test_the_drafter_setting_in_the_config_file(tmp_path: Path) -> None:
    from specchat.config import load_config
    from specchat.errors import ConfigError

    path = tmp_path / "config.yaml"
    path.write_text("drafter: ngram, model\n")
    assert load_config(path).drafter == "ngram,model"
    path.write_text("ngram: true\n")  # the old key is still read
    assert load_config(path).ngram is True and load_config(path).drafter is None
    path.write_text("gamma: 3\ndrafter: nosuch\n")
    # Every drafter this package has is offered (the list grows as drafters are added).
    with pytest.raises(ConfigError, match=r"config.yaml:2: setting 'drafter' is wrong: unknown "
                       r"drafter 'nosuch' \(choose from [a-z, ]+\)") as got:
        load_config(path)
    offered = str(got.value).rsplit("(choose from ", 1)[1].rstrip(")").split(", ")
    assert offered == sorted(offered) and {"model", "ngram", "tree", "layerskip"} <= set(offered)


def test_drafter_before_or_after_the_command(tiny_target: Path, tiny_draft: Path,
                                             home: object, capsys: pytest.CaptureFixture[str]
                                             ) -> None:
    import json

    from specchat.cli.main import main

    for argv in (["--drafter", "tree", "ask", "hi"], ["ask", "hi", "--drafter", "tree"]):
        rc = main([*argv, "--model", str(tiny_target), "--draft", str(tiny_draft), "--gamma",
                   "8", "--temperature", "0", "--max-tokens", "12", "--json", "--threads", "1"])
        assert rc == 0
        steps = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        assert any(s.get("type") == "step" and s.get("kind") == "tree" for s in steps)
