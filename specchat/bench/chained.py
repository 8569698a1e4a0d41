"""Chained multi-topic conversations from Spec-Bench: built, recorded once, run live.

A conversation is one chat whose user turns walk through topics (coding → writing → maths →
translation → coding → summarisation by default), each a Spec-Bench question picked by the
seed. Recording runs it once greedily with the target alone and, by teacher forcing, records
each reply's agreement trace (:class:`TurnTrace`) — enough to replay any γ policy. The live run
then replays the *same* prompts turn by turn through every policy (each policy keeps its state
across the turns, as it would in a chat) and checks every reply is token-identical to the
recording, which greedy speculative decoding guarantees.

Within a turn the policies run one after the other in an order rotated from turn to turn, so a
machine getting busier or quieter affects them alike. Caches are not cleared between runs: the
prompt prefix is reused (prefill is not what is measured; tokens/s counts the reply only).
"""

from __future__ import annotations

import codecs
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specchat.bench.prompts import BenchPrompt, load_prompts
from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.decoding import Decoder, new_text, run_to_end
from specchat.engine.decode.messages import Message
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.speculative import SpeculativeDecoder
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.prefix import common_prefix
from specchat.engine.policy.agreement import agreement_trace, greedy_continuation
from specchat.engine.policy.replay import TurnTrace
from specchat.errors import SpecchatError
from specchat.runtime.opening import Runtime

DEFAULT_TOPICS = ("coding", "writing", "math_reasoning", "translation", "coding", "summarization")
PLAIN = "plain"


@dataclass(frozen=True)
class Conversation:
    seed: int
    turns: tuple[BenchPrompt, ...]

    @property
    def name(self) -> str:
        return f"seed {self.seed}"


def chained_conversations(topics: Sequence[str] = DEFAULT_TOPICS, seeds: Sequence[int] = (1,),
                          path: Path | None = None, exclude: Sequence[str] = ()
                          ) -> list[Conversation]:
    """One conversation per seed: a question of each topic in turn, drawn without repeats
    (``exclude``: question ids not to use, e.g. those the pair was calibrated on)."""
    pool: dict[str, list[BenchPrompt]] = {}
    for p in load_prompts(path, categories=sorted(set(topics)), per_category=10 ** 6):
        if p.question_id not in exclude:
            pool.setdefault(p.category, []).append(p)
    out = []
    for seed in seeds:
        rng = random.Random(seed)
        left = {c: list(ps) for c, ps in pool.items()}
        turns = []
        for topic in topics:
            if not left.get(topic):
                raise SpecchatError(f"not enough '{topic}' questions for {len(topics)} turns")
            turns.append(left[topic].pop(rng.randrange(len(left[topic]))))
        out.append(Conversation(seed, tuple(turns)))
    return out


@dataclass(frozen=True)
class RecordedTurn:
    prompt: BenchPrompt
    tokens: tuple[int, ...]  # the chat-formatted prompt
    reply: tuple[int, ...]  # the target's greedy reply, with its end-of-generation token
    trace: TurnTrace


def _pieces(model: LlamaModel, tokens: Sequence[int]) -> list[str]:
    """The text each token adds, decoded incrementally as a streaming reply is."""
    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    return ["" if model.is_eog(t) else dec.decode(model.piece(t)) for t in tokens]


def record_conversation(runtime: Runtime, conv: Conversation, max_tokens: int,
                        system: str | None) -> list[RecordedTurn]:
    """Run the conversation greedily (target alone) and teacher-force the draft over it."""
    tctx, dctx = runtime.target_ctx, runtime.draft_ctx
    if dctx is None or runtime.draft is None:
        raise SpecchatError("chained benchmarks need a pair (a draft model)")
    engine = ChatEngine(PlainDecoder(tctx))
    messages = [Message("system", system)] if system else []
    previous: list[int] = []
    out = []
    for p in conv.turns:
        messages.append(Message("user", p.text))
        prompt = engine.fit(messages, max_tokens).tokens
        reply = greedy_continuation(tctx, prompt, max_tokens, include_eog=True)
        tr = agreement_trace(tctx, dctx, prompt, reply, draft_top=True, draft_stepwise=True)
        assert tr.draft_top is not None
        request = new_text(runtime.target.detokenize, prompt[common_prefix(previous, prompt):])
        trace = TurnTrace(request, tuple(tr.agree), tuple(tr.draft_top),
                          tuple(runtime.draft.is_eog(d) for d in tr.draft_tokens),
                          tuple(_pieces(runtime.target, reply)), max_tokens, p.category,
                          len(prompt))
        out.append(RecordedTurn(p, tuple(prompt), tuple(reply), trace))
        text = runtime.target.detokenize([t for t in reply if not runtime.target.is_eog(t)])
        messages.append(Message("assistant", text))
        previous = [*prompt, *reply]
    return out


def live_decoders(runtime: Runtime, policies: dict[str, Any]) -> dict[str, Decoder]:
    """A decoder per policy name (``PLAIN`` → plain decoding), kept for a whole conversation."""
    out: dict[str, Decoder] = {}
    for name, policy in policies.items():
        if name == PLAIN:
            out[name] = PlainDecoder(runtime.target_ctx)
        else:
            out[name] = SpeculativeDecoder(runtime.target_ctx, runtime.draft_ctx, policy)
    return out


def run_live(decoders: dict[str, Decoder], conv: Conversation, recorded: Sequence[RecordedTurn],
             progress: Callable[[str], None] = lambda _m: None) -> list[dict[str, Any]]:
    """Every decoder over the recorded prompts, turn by turn; one record per (turn, policy)."""
    names = list(decoders)
    records = []
    for k, turn in enumerate(recorded):
        settings = SamplerSettings(temperature=0, max_tokens=turn.trace.max_tokens)
        shift = (k + conv.seed) % len(names)
        for name in names[shift:] + names[:shift]:
            run = run_to_end(decoders[name], turn.tokens, settings)
            tokens, steps, stats = run.tokens, run.steps, run.stats
            gen_s = stats.total_s - stats.prompt_s
            rec = {"seed": conv.seed, "turn": k, "category": turn.prompt.category,
                   "question_id": turn.prompt.question_id, "policy": name,
                   "tokens": stats.generated_tokens, "seconds": gen_s, "steps": stats.steps,
                   "drafted": stats.drafted, "accepted": stats.accepted,
                   "rejections": stats.rejections,
                   # token events leave out the end-of-generation token; the count has it
                   "identical": tokens == list(turn.reply[: len(tokens)])
                   and stats.generated_tokens == len(turn.reply),
                   "gammas": [s.gamma for s in steps], "kept": [s.accepted for s in steps],
                   "modes": _runs_of([s.mode for s in steps])}
            records.append(rec)
            tps = stats.generated_tokens / gen_s if gen_s > 0 else 0.0
            progress(f"  {conv.name} turn {k + 1} {turn.prompt.category} {name}: "
                     f"{stats.generated_tokens} tokens, {tps:.1f} tok/s"
                     + ("" if rec["identical"] else "  (reply differs from the recording!)"))
    return records


def _runs_of(labels: Sequence[str]) -> list[list[Any]]:
    """Run-length encoding ([label, count], ...) of the per-step mode labels."""
    out: list[list[Any]] = []
    for lab in labels:
        if out and out[-1][0] == lab:
            out[-1][1] += 1
        else:
            out.append([lab, 1])
    return out
