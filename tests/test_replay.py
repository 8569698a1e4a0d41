"""Replay exactness on real (tiny and demo) models, and ``specchat bench --chained``/``--replay``."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from specchat.cli.main import main
from specchat.devtools.tiny_models import TinySpec, write_tiny_model
from specchat.engine.decode.events import GenerationStats, StepEvent
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.decode.step_policy import FixedGamma, GammaPolicy
from specchat.engine.llama.context import LlamaContext
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings
from specchat.engine.policy.agreement import agreement_trace, greedy_continuation
from specchat.engine.policy.gamma import ConfidenceCutoff, HfHeuristic
from specchat.engine.policy.replay import ReplayCosts, TurnTrace, VirtualClock, replay_turn
from specchat.errors import SpecchatError
from specchat.paths import AppPaths

COSTS = ReplayCosts(0.001, tuple(0.004 + 0.001 * n for n in range(1, 13)))


@pytest.fixture(scope="module")
def pair(tiny_target: Path, tmp_path_factory: pytest.TempPathFactory
         ) -> tuple[LlamaContext, LlamaContext]:
    path = tmp_path_factory.mktemp("replay") / "close.gguf"
    write_tiny_model(path, TinySpec(seed=2), noise_from=TinySpec(seed=1), noise=0.25)
    settings = ContextSettings(n_ctx=512, n_threads=1)
    return (LlamaContext(LlamaModel(tiny_target), settings),
            LlamaContext(LlamaModel(path), settings))


def record(target: LlamaContext, draft: LlamaContext, prompt: list[int], max_tokens: int
           ) -> TurnTrace:
    reply = greedy_continuation(target, prompt, max_tokens, include_eog=True)
    tr = agreement_trace(target, draft, prompt, reply, draft_top=True, draft_stepwise=True)
    assert tr.draft_top is not None
    return TurnTrace("", tuple(tr.agree), tuple(tr.draft_top),
                     tuple(draft.model.is_eog(d) for d in tr.draft_tokens),
                     tuple("" for _ in reply), max_tokens)


def live(target: LlamaContext, draft: LlamaContext, policy: GammaPolicy, prompt: list[int],
         max_tokens: int, stepwise: bool = True) -> tuple[list[StepEvent], GenerationStats]:
    target.clear()
    draft.clear()
    events = list(SpeculativeDecoder(target, draft, policy, stepwise_draft=stepwise).run(
        prompt, SamplerSettings(temperature=0, max_tokens=max_tokens), threading.Event()))
    stats = events[-1]
    assert isinstance(stats, GenerationStats)
    return [e for e in events if isinstance(e, StepEvent)], stats


def assert_replays_exactly(target: LlamaContext, draft: LlamaContext, prompts: Sequence[list[int]],
                           max_tokens: int, policies: Sequence[GammaPolicy],
                           stepwise: bool = True, exact_drafts: bool = True) -> int:
    """Each policy's live step sequence (drafted, kept) equals its replay; returns steps.

    After a rejection the live draft goes on along its own tokens, which a teacher-forced record
    cannot know (whether it meets an end-of-generation token there), so on a real pair the
    number drafted may differ, only in steps with a rejection (``exact_drafts=False``)."""
    total = 0
    for prompt in prompts:
        target.clear()
        draft.clear()
        trace = record(target, draft, prompt, max_tokens)
        for policy in policies:
            steps, stats = live(target, draft, policy, prompt, max_tokens, stepwise)
            replayed = replay_turn(policy, trace, COSTS)  # these policies keep no state
            assert stats.generated_tokens == trace.positions == replayed.tokens
            assert [s.accepted for s in steps] == replayed.accepted, policy
            assert stats.steps == replayed.steps
            if isinstance(policy, FixedGamma):  # no early stop: the drafts are exact too
                differ = [(s.gamma, r, s.accepted) for s, r in zip(steps, replayed.drafted,
                                                                    strict=True) if s.gamma != r]
                assert not differ or not exact_drafts, differ
                assert all(kept < min(live_n, r) for live_n, r, kept in differ), differ
            total += stats.steps
    return total


@pytest.mark.parametrize("stepwise", [True, False], ids=["stepwise-draft", "batched-draft"])
def test_replaying_a_policy_reproduces_the_live_run_on_tiny_models(
        pair: tuple[LlamaContext, LlamaContext], stepwise: bool) -> None:
    target, draft = pair
    model = target.model
    prompts = [model.tokenize(f"<|im_start|>user\n{t}<|im_end|>\n<|im_start|>assistant\n")
               for t in ("hello there", "the cat sat on a mat", "one two three")]
    policies: list[GammaPolicy] = [FixedGamma(g) for g in (1, 2, 4, 7)]
    policies += [ConfidenceCutoff(0.6, 8)]
    steps = assert_replays_exactly(target, draft, prompts, 40, policies, stepwise)
    assert steps > 100


def test_replay_follows_a_stateful_policy_step_by_step(
        pair: tuple[LlamaContext, LlamaContext]) -> None:
    """The HF heuristic's γ depends on every earlier step: live and replay agree throughout."""
    target, draft = pair
    prompt = target.model.tokenize("<|im_start|>user\nabc abc abc<|im_end|>\n"
                                   "<|im_start|>assistant\n")
    trace = record(target, draft, prompt, 60)
    steps, _ = live(target, draft, HfHeuristic(), prompt, 60)
    replayed = replay_turn(HfHeuristic(), trace, COSTS, VirtualClock())
    assert [s.gamma for s in steps] == replayed.drafted
    assert [s.accepted for s in steps] == replayed.accepted
    assert len(set(replayed.drafted)) > 2


def write_prompts(path: Path) -> Path:
    lines = [{"question_id": i, "category": cat, "turns": [f"hello {i} abc", "next"]}
             for i, cat in enumerate(["alpha", "beta", "alpha", "beta", "alpha"])]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return path


def test_bench_chained_runs_every_policy_live_and_in_replay(
        tiny_target: Path, tiny_draft: Path, home: AppPaths, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    rc = main(["bench", "--model", str(tiny_target), "--draft", str(tiny_draft), "--prompts",
               str(write_prompts(tmp_path / "q.jsonl")), "--chained", "--seeds", "2",
               "--topics", "alpha,beta,alpha", "--gamma", "auto,1,3", "--p-min", "0.5",
               "--max-tokens", "24", "--threads", "1", "--out", str(out)])
    assert rc == 0
    doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
    policies = {"plain", "auto", "plan", "γ=1", "γ=3", "hf", "p_min=0.5"}
    assert set(doc["live"]["policies"]) == policies
    assert len(doc["live_records"]) == 2 * 3 * len(policies)
    assert all(r["identical"] for r in doc["live_records"])
    assert doc["replay"]["exactness"]["matched"] == doc["replay"]["exactness"]["turns"] == 12
    assert set(doc["replay"]["tok_s"]) == policies - {"plain"}
    assert doc["replay"]["oracle_tok_s"] >= max(doc["replay"]["tok_s"][p] for p in ("γ=1", "γ=3"))
    modes = {m for r in doc["live_records"] if r["policy"] == "auto" for m, _ in r["modes"]}
    assert modes <= {"auto · warm-up", "auto · chat", "auto · code", "auto · math"}
    md = (out / "results.md").read_text(encoding="utf-8")
    assert "| auto |" in md and "per-segment oracle" in md and md in capsys.readouterr().out
    # the stored traces replay again without the models
    again = tmp_path / "again"
    assert main(["bench", "--replay-from", str(out / "results.json"), "--gamma", "auto,1,3",
                 "--p-min", "0.5", "--out", str(again)]) == 0
    redo = json.loads((again / "results.json").read_text(encoding="utf-8"))
    assert redo["replay"]["tok_s"] == pytest.approx(doc["replay"]["tok_s"])


def test_bench_gamma_auto_on_single_prompts(tiny_target: Path, tiny_draft: Path, home: AppPaths,
                                            tmp_path: Path) -> None:
    out = tmp_path / "out"
    rc = main(["bench", "--model", str(tiny_target), "--draft", str(tiny_draft), "--prompts",
               str(write_prompts(tmp_path / "q.jsonl")), "--gamma", "auto,2", "--temperature",
               "0", "--max-tokens", "16", "--threads", "1", "--out", str(out)])
    assert rc == 0
    doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert {r["gamma"] for r in doc["rows"]} == {None, "auto", 2}


def test_ask_with_gamma_auto_streams_the_mode(tiny_target: Path, tiny_draft: Path,
                                             home: AppPaths,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["ask", "hello", "--model", str(tiny_target), "--draft", str(tiny_draft),
               "--gamma", "auto", "--temperature", "0", "--max-tokens", "20", "--json",
               "--threads", "1"])
    assert rc == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    steps = [x for x in lines if x["type"] == "step"]
    assert steps and all(x["mode"].startswith("auto · ") for x in steps)
    assert any(x["type"] == "token" for x in lines)


def test_gamma_auto_is_a_controller_per_decoder_seeded_by_the_calibration(
        tiny_target: Path, tiny_draft: Path, home: AppPaths) -> None:
    from specchat.engine.policy.auto_gamma import AutoGamma
    from specchat.loading import select
    from specchat.models.calibration import CalibrationOptions, CalibrationPrompt, calibrate
    from specchat.models.calibration_store import save_calibration
    from specchat.models.catalog import load_catalog
    from specchat.models.resolver import ModelResolver
    from specchat.runtime.opening import Runtime

    cat = load_catalog()
    sel = select(cat, model=str(tiny_target), draft=str(tiny_draft))
    rt = Runtime.open(sel, ModelResolver(cat, home))
    try:
        cold = rt.decoder(gamma="auto")
        assert isinstance(cold, SpeculativeDecoder) and isinstance(cold.policy, AutoGamma)
        assert not cold.policy.seeded and cold.policy.label == "auto · warm-up"
        # one per decoder (a chat session, a race): never shared implicitly
        assert rt.decoder(gamma="auto").policy is not cold.policy  # type: ignore[attr-defined]
        with pytest.raises(SpecchatError, match="auto"):
            rt.decoder(gamma="sometimes")
    finally:
        rt.close()
    opts = CalibrationOptions(max_tokens=16, gamma_max=3, n_ctx=512, repeats=1, n_threads=1,
                              prompts=(CalibrationPrompt("coding", "hello there"),
                                       CalibrationPrompt("writing", "the cat sat")))
    save_calibration(home, calibrate(tiny_target, tiny_draft, opts))
    rt = Runtime.open(sel, ModelResolver(cat, home))
    try:
        auto = rt.new_auto_gamma()
        assert auto.seeded and set(auto.topic_priors) == {"code", "chat"}
        assert auto.confidence.total > 0 and auto.label == "auto · chat"
    finally:
        rt.close()


@pytest.mark.slow
def test_replay_reproduces_live_step_counts_on_the_demo_pair(
        demo_files: tuple[Path, Path]) -> None:
    from specchat.bench.prompts import load_prompts
    from specchat.engine.decode.chat import ChatEngine
    from specchat.engine.decode.messages import Message
    from specchat.engine.decode.plain import PlainDecoder

    settings = ContextSettings(n_ctx=2048, n_threads=1)
    target = LlamaContext(LlamaModel(demo_files[0]), settings)
    draft = LlamaContext(LlamaModel(demo_files[1]), settings)
    engine = ChatEngine(PlainDecoder(target))
    prompts = [engine.tokenize_chat([Message("user", p.text)]) for p in
               load_prompts(categories=("coding", "translation", "writing"), per_category=1)]
    policies: list[GammaPolicy] = [FixedGamma(1), FixedGamma(3), FixedGamma(6),
                                   ConfidenceCutoff(0.5, 10)]
    steps = assert_replays_exactly(target, draft, prompts, 48, policies, exact_drafts=False)
    assert steps > 80
