"""Calibrate a pair on this machine: α on a few kinds of prompt, draft and verify costs, and from
them the predicted speed-up for each γ, what to run, and a verdict in plain words.

The verify cost is measured as a table, T(n) for n = 1..32 (the planner's cost curve; the CPU
curve has kinks a line misses), as far as the target's replies are long enough. Besides the
draft model, the n-gram drafter is evaluated on the same greedy replies (a lookup costs nearly
nothing, so it can pay where the draft model cannot): the recommendation is the draft model at
its best γ, the n-gram drafter, or — when neither is predicted to pay — plain decoding (γ 0).

The prompts are six Spec-Bench questions (Apache-2.0; coding, writing, maths, translation, QA)
in ``specchat/data/calibration_prompts.jsonl``. α is measured by teacher forcing
(:mod:`specchat.engine.policy.agreement`), independent of any speculative decoder.
"""

from __future__ import annotations

import datetime as dt
import json
import platform
import threading
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.messages import Message
from specchat.engine.decode.plain import PlainDecoder
from specchat.engine.drafters._cross_vocab import cross_map, in_draft_vocab
from specchat.engine.drafters.ngram import NgramDrafter
from specchat.engine.llama import batch_rounding
from specchat.engine.llama.context import DecodeCancelled, LlamaContext
from specchat.engine.llama.machine_load import LoadWatch, MachineLoad
from specchat.engine.llama.model import LlamaModel
from specchat.engine.llama.model_settings import ContextSettings, ModelSettings
from specchat.engine.policy.acceptance import CONF_EDGES, confidence_counts
from specchat.engine.policy.agreement import agreement_trace, cross_agreement_trace, greedy_continuation
from specchat.engine.policy.costs import CostCurve, draft_step_cost, verify_costs
from specchat.engine.policy.speedup import PAYS, best_gamma, speedup_table, verdict
from specchat.engine.policy.verify_table import TABLE_SIZE
from specchat.errors import Cancelled, SpecchatError
from specchat.models.progress import Progress, ProgressFn, no_progress

ROUNDING_TOKENS = 32  # reply tokens the batch-rounding measurement evaluates (≈ 2 plain passes)
TASK = "calibrate"  # the progress records' task


@dataclass(frozen=True)
class CalibrationPrompt:
    category: str
    prompt: str
    question_id: int = 0


def builtin_prompts() -> list[CalibrationPrompt]:
    text = resources.files("specchat").joinpath("data/calibration_prompts.jsonl").read_text(
        encoding="utf-8")
    return [CalibrationPrompt(d["category"], d["prompt"], d["question_id"])
            for d in map(json.loads, text.splitlines()) if d]


@dataclass(frozen=True)
class CalibrationOptions:
    max_tokens: int = 64  # reply length per prompt
    gamma_max: int = 8
    prompts: tuple[CalibrationPrompt, ...] = ()  # empty: the built-in ones
    n_ctx: int = 2048
    n_threads: int = 0
    n_gpu_layers: int = -1
    repeats: int = 3  # timing repeats per batch size
    cost_points: int = TABLE_SIZE  # T(n) measured for n = 1..this (as far as replies allow)
    # Tokens a decode takes at once: at least cost_points and ROUNDING_TOKENS. llama.cpp sizes
    # a context's compute buffer by it (logits for every row: vocabulary × n_batch floats).
    n_batch: int = 512


@dataclass(frozen=True)
class PromptResult:
    category: str
    positions: int
    alpha: float


@dataclass(frozen=True)
class CalibrationResult:
    target: str  # file paths, as calibrated
    draft: str
    alpha: float  # pooled over every position of every prompt
    positions: int
    per_prompt: tuple[PromptResult, ...]
    draft_s: float
    verify_s: tuple[float, ...]
    speedups: tuple[tuple[int, float], ...]
    gamma: int  # the recommended γ of the draft model (0: plain decoding is the fastest)
    speedup: float
    verdict: str
    machine: str = ""
    n_threads: int = 0
    when: str = field(default_factory=lambda: dt.datetime.now().isoformat(timespec="seconds"))
    # (kept, seen) per bin of the draft's top-1 probability (acceptance.CONF_EDGES): how well
    # the draft's confidence predicts acceptance, for auto-γ's early stop. Empty in old records.
    confidence: tuple[tuple[float, float], ...] = ()
    # What to run: "model" (the draft model at ``gamma``), "ngram" (the n-gram drafter at
    # ``ngram_gamma``) or "none" (plain decoding; ``gamma`` is then 0). Old records: "model".
    drafter: str = "model"
    ngram_alpha: float | None = None  # the n-gram drafter's acceptance on the same replies
    ngram_gamma: int = 0
    ngram_speedup: float = 0.0  # its predicted speed-up at ngram_gamma (replayed on the replies)
    # Logits: how far a gap between the target's top tokens moves with batch shape on this
    # build (engine.llama.batch_rounding); a greedy divergence at a closer tie is rounding, not a bug.
    # None in old records.
    batch_rounding: float | None = None
    # What competed with the timing: the load average when it started, the share of CPU time
    # stolen while it ran, the share other programs used (None in older records), and the cores
    # (0 in old records: not known). Costs timed on a busy machine are too high, and the
    # planner would trust them.
    load: float | None = None
    steal: float | None = None
    cores: int = 0
    others: float | None = None

    @property
    def machine_load(self) -> MachineLoad | None:
        return MachineLoad(self.cores, self.load, self.steal, self.others) if self.cores else None

    @property
    def busy(self) -> bool:
        return self.machine_load is not None and self.machine_load.busy

    @property
    def pays(self) -> bool:
        return self.drafter != "none" and max(self.speedup, self.ngram_speedup) >= PAYS

    @property
    def costs(self) -> CostCurve:
        return CostCurve(self.draft_s, self.verify_s)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> CalibrationResult:
        d: dict[str, Any] = json.loads(text)
        d["per_prompt"] = tuple(PromptResult(**p) for p in d["per_prompt"])
        d["verify_s"] = tuple(d["verify_s"])
        d["speedups"] = tuple((int(g), float(s)) for g, s in d["speedups"])
        conf = d.get("confidence") or ()
        d["confidence"] = (tuple((float(k), float(n)) for k, n in conf)
                           if len(conf) == len(CONF_EDGES) + 1 else ())
        return cls(**d)


def calibrate(target_path: Path, draft_path: Path, options: CalibrationOptions = CalibrationOptions(),
              report: ProgressFn = no_progress, cancel: threading.Event | None = None
              ) -> CalibrationResult:
    """Load the pair and measure it; raises :class:`Cancelled` if ``cancel`` is set on the way."""
    report(Progress(TASK, 0, _total(options), unit="steps"))
    ms = ModelSettings(n_gpu_layers=options.n_gpu_layers)
    target = LlamaModel(target_path, ms)
    try:
        draft = LlamaModel(draft_path, ms)
        try:
            return calibrate_loaded(target, draft, options, report, cancel)
        finally:
            draft.close()
    finally:
        target.close()


@dataclass
class PromptMeasure:
    """One prompt measured: its α, the target's greedy reply, the draft's confidences."""

    result: PromptResult
    prompt: list[int]
    reply: list[int]
    tops: list[float]
    agreed: list[bool]


@dataclass
class CalibrationState:
    """What a calibration has measured so far. Handed to :func:`calibrate_loaded` again after a
    cancel, it goes on at the next prompt (the timing, at the end, starts over: a measurement
    cut in two halves is no measurement)."""

    measured: list[PromptMeasure] = field(default_factory=list)


def calibrate_loaded(target: LlamaModel, draft: LlamaModel,
                     options: CalibrationOptions = CalibrationOptions(),
                     report: ProgressFn = no_progress, cancel: threading.Event | None = None,
                     state: CalibrationState | None = None) -> CalibrationResult:
    """Measure a pair already loaded (the app's own models: no second copy in memory) on
    contexts of its own, freed before it returns; raises :class:`Cancelled` if ``cancel`` is
    set on the way, ``state`` then keeping the prompts measured."""
    cancel = cancel or threading.Event()
    state = state if state is not None else CalibrationState()
    prompts = list(options.prompts) or builtin_prompts()
    cs = ContextSettings(n_ctx=options.n_ctx, n_threads=options.n_threads,
                         n_batch=options.n_batch)
    total = _total(options)
    half = total // 2

    def at(done: float) -> None:
        report(Progress(TASK, done, total, unit="steps"))

    at(len(state.measured) * options.max_tokens)
    t_ctx = LlamaContext(target, cs)
    try:
        d_ctx = LlamaContext(draft, cs)
    except BaseException:
        t_ctx.close()
        raise
    t_ctx.cancel = d_ctx.cancel = cancel
    cross = cross_map(target, draft) is not None  # TLI: the draft reads its own tokens
    try:
        chat = ChatEngine(PlainDecoder(t_ctx))
        for i in range(len(state.measured), len(prompts)):
            at(i * options.max_tokens)
            prompt = chat.tokenize_chat([Message("user", prompts[i].prompt)])
            reply = greedy_continuation(t_ctx, prompt, options.max_tokens, cancel)
            trace = (cross_agreement_trace(t_ctx, d_ctx, prompt, reply, cancel) if cross
                     else agreement_trace(t_ctx, d_ctx, prompt, reply, draft_top=True))
            state.measured.append(PromptMeasure(
                PromptResult(prompts[i].category, trace.positions, trace.alpha), prompt, reply,
                list(trace.draft_top or []), list(trace.agree)))
        longest = max(state.measured, key=lambda m: len(m.reply))
        prompt, reply = longest.prompt, longest.reply
        n_verify = options.gamma_max + 1
        if len(reply) < n_verify:
            raise SpecchatError(f"the target's replies were too short to time ({len(reply)} "
                                f"tokens; {n_verify} needed): is it a chat model?")
        at(half)
        watch = LoadWatch()  # what else ran while the costs were timed
        # A draft of another vocabulary is timed on its own tokens of the same text.
        d_prompt, d_reply = (in_draft_vocab(target, draft, t) for t in (prompt, reply[:16]))
        draft_s = draft_step_cost(d_ctx, d_prompt, d_reply or d_prompt[-1:], cancel)
        points = max(n_verify, min(options.cost_points, len(reply)))
        verify_s = verify_costs(t_ctx, prompt, reply, points, options.repeats, cancel,
                                lambda share: at(half + 0.9 * half * share))
        rounding = batch_rounding.measure(t_ctx, prompt, reply[:ROUNDING_TOKENS], cancel).gap
        load = watch.done()
    except DecodeCancelled:
        report(Progress(TASK, failed=True))
        raise Cancelled("calibration cancelled") from None
    finally:
        for obj in (d_ctx, t_ctx):
            obj.close()
    results = [m.result for m in state.measured]
    positions = sum(r.positions for r in results)
    agree = sum(sum(m.agreed) for m in state.measured)
    tops = [t for m in state.measured for t in m.tops]
    agreed = [a for m in state.measured for a in m.agreed]
    replies = [(m.prompt, m.reply) for m in state.measured]
    alpha = agree / positions if positions else 0.0
    costs = CostCurve(draft_s, verify_s)
    table = speedup_table(alpha, costs, options.gamma_max)
    gamma, speedup = best_gamma(table)
    ng_alpha, ng_gamma, ng_speedup = ngram_replay(replies, verify_s, options.gamma_max)
    drafter = recommend(speedup, ng_speedup)
    text = verdict(alpha, costs, gamma, speedup)
    if drafter == "ngram":
        text = (f"the n-gram drafter pays here (--ngram): about {ng_speedup:.2f}× at γ="
                f"{ng_gamma}; the draft model " + (f"{speedup:.2f}×" if speedup >= PAYS else
                                                    "does not pay: " + text.split(": ", 1)[-1]))
    elif drafter == "none":
        text = (f"the draft model's best, γ={gamma}, would run at {speedup:.2f}×: "
                + text.split(": ", 1)[-1])
    if speedup < PAYS:
        gamma = 0  # the draft model does not pay: the pair's γ says plain
    report(Progress(TASK, total, total, unit="steps", finished=True))
    return CalibrationResult(
        target=str(target.path), draft=str(draft.path), alpha=alpha, positions=positions,
        per_prompt=tuple(results), draft_s=draft_s, verify_s=verify_s, speedups=tuple(table),
        gamma=gamma, speedup=speedup, verdict=text,
        machine=f"{platform.machine()} {platform.node()}", n_threads=t_ctx.n_threads,
        confidence=confidence_counts(tops, agreed), drafter=drafter, ngram_alpha=ng_alpha,
        ngram_gamma=ng_gamma, ngram_speedup=ng_speedup, batch_rounding=rounding,
        load=load.load_before, steal=load.steal, cores=load.cores, others=load.others)


def _total(options: CalibrationOptions) -> int:
    """Progress steps: the replies' tokens, then the timing, which takes about as long on a
    CPU (half the bar each)."""
    return 2 * len(options.prompts or builtin_prompts()) * options.max_tokens


def recommend(model_speedup: float, ngram_speedup: float) -> str:
    """What to run: the draft model, the n-gram drafter, or neither ("none": plain)."""
    if max(model_speedup, ngram_speedup) < PAYS:
        return "none"
    return "ngram" if ngram_speedup > model_speedup else "model"


def ngram_replay(replies: list[tuple[list[int], list[int]]], verify_s: tuple[float, ...],
                 gamma_max: int) -> tuple[float | None, int, float]:
    """(α, best γ, predicted speed-up) of prompt-lookup drafting, replayed on greedy replies:
    at each step the drafter proposes up to γ tokens from the prompt and reply so far; greedy
    verification keeps the prefix that matches the reply. A step costs T(drafts + 1) — the
    lookup itself is free next to a target pass —, a step without a proposal is a plain one."""
    best_g, best_s, kept_all, seen_all = 0, 0.0, 0, 0
    top = min(gamma_max, len(verify_s) - 1)
    for g in range(1, top + 1):
        seconds = 0.0
        tokens = kept = seen = 0
        for prompt, reply in replies:
            ng = NgramDrafter()
            ng.reset(prompt)
            i = 0
            while i < len(reply):
                drafts = ng.lookup(min(g, len(reply) - i))
                k = 0
                while k < len(drafts) and drafts[k] == reply[i + k]:
                    k += 1
                if drafts:
                    seen += k + (1 if k < len(drafts) else 0)
                    kept += k
                step = min(k + 1, len(reply) - i)
                seconds += verify_s[len(drafts)]
                ng.extend(reply[i: i + step])
                i += step
                tokens += step
        speedup = tokens * verify_s[0] / seconds if seconds > 0 else 0.0
        if g == 1 or speedup > best_s * 1.01:
            best_g, best_s = g, speedup
        if g == top:
            kept_all, seen_all = kept, seen
    alpha = kept_all / seen_all if seen_all else None
    return alpha, best_g, best_s


def format_result(r: CalibrationResult) -> str:
    """The result as a few lines of text (the CLI prints this; the wizard shows a table)."""
    lines = [f"α (greedy agreement) {r.alpha:.2f} over {r.positions} positions: " + ", ".join(
        f"{p.category} {p.alpha:.2f}" for p in r.per_prompt)]
    lines.append(f"draft step {r.draft_s * 1000:.1f} ms ({r.costs.draft_ratio:.0%} of a target "
                 "step); target pass over n tokens: " + ", ".join(
                     f"{n}: {s * 1000:.1f} ms" for n, s in enumerate(r.verify_s, 1)))
    lines.append("predicted speed-up by γ: " + ", ".join(f"{g}: {s:.2f}×" for g, s in r.speedups))
    if r.ngram_alpha is not None:
        lines.append(f"n-gram drafter: α {r.ngram_alpha:.2f}, {r.ngram_speedup:.2f}× at "
                     f"γ={r.ngram_gamma}")
    if r.batch_rounding is not None:
        lines.append(f"batch rounding: gaps between the target's top tokens move by up to "
                     f"{r.batch_rounding:.3f} logits with batch shape (a greedy reply may part "
                     "from plain decoding at a closer tie)")
    lines.append(f"recommended: {recommendation(r)}: {r.verdict}")
    if r.busy:
        lines.append(busy_warning(r))
    return "\n".join(lines)


def recommendation(r: CalibrationResult) -> str:
    """What to run, in words: "plain decoding", "the n-gram drafter (γ=4)" or "γ = 3"."""
    return {"none": "plain decoding", "ngram": f"the n-gram drafter (γ={r.ngram_gamma})"}.get(
        r.drafter, f"γ = {r.gamma}")


def busy_warning(r: CalibrationResult) -> str:
    """One line for a calibration timed on a busy machine (its costs are too high)."""
    load = r.machine_load
    what = load.describe() if load is not None else "busy"
    return (f"measured while the machine was busy ({what}): its costs are likely too high, "
            "and the planner starts from them; calibrate again when the machine is idle")
